"""What a job's pipeline decided: one typed ``Outcome``, applied by ``settle()`` (settle.py).

A step of the pipeline (pipeline.py, execution.py) returns ``None`` to let the next step go on,
or one of these frozen values to end the job's processing. Each kind maps to one fenced Lua
transition of ``Queue`` (``DropStale`` to none), one log line and one count:

=============  ==========================  ============  ===========================
outcome        Queue transition            event         attempt spent
=============  ==========================  ============  ===========================
``Ack``        ack (batched: ack_many)     succeeded     - (deduplicated: answered
                                                         from a completed record)
``Retry``      retry                       retried       yes
``Snooze``     snooze                      snoozed       no
``Bury``       bury                        buried        ``spend_attempt``
``HandBack``   hand_back                   handed_back   no
``DropStale``  (none: the lease is gone)   dropped       -
``Cancelled``  finish_cancelled            cancelled     no (DLQ or discarded)
``Expired``    bury (kind ``expired``)     max_age       no
``SnoozeCap``  bury (kind ``snooze_cap``)  snooze_capped no
=============  ==========================  ============  ===========================
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from antre.stores.idempotency import Completed, IdempotencyStore
from antre.engine.locks import Lock
from antre.engine.retry import Decision, describe, format_traceback


@dataclass(frozen=True)
class Ack:
    """Done: ``result`` is stored with the job. ``deduplicated``: the handler did not run, the
    result is the one a completed idempotency record holds. ``completion``: the idempotency
    record is still to be marked completed, with the other successes of the job's prefetched
    batch in one commit, right before their batched ack (settle.py); until then it is not
    done."""

    result: Any = None
    deduplicated: bool = False
    completion: Completion | None = None


ACKED = Ack()  # the common success (no result): one shared, immutable instance


@dataclass(frozen=True)
class Completion:
    """What an ``Ack`` still has to record before it may be acked: the owned idempotency key
    (``store.complete_many``) and the business lock the handler ran under, whose release said
    whether it was still held when the job ended (``lock.lost``)."""

    store: IdempotencyStore
    item: Completed
    lock: Lock | None = None


@dataclass(frozen=True)
class Retry:
    """Failed with a retryable error: back in ``delay_ms``, one attempt spent."""

    delay_ms: int
    error: str
    kind: str
    traceback: str = ""


@dataclass(frozen=True)
class Snooze:
    """Not now (held back, lock busy, database away, ...): back in ``delay_ms``, no attempt
    spent. ``counter`` is the queue's stats counter; ``count_as`` an extra count of this
    process; ``note`` and ``level`` make the outcome's log line say why."""

    delay_ms: int
    reason: str
    counter: str = "snoozed"
    count_as: str = ""
    note: str = ""
    level: int = logging.INFO
    details: dict[str, Any] | None = None  # for the job's timeline: the lock and fence, ...
    behind_key: bool = False  # a job with a lock_key gives its turn to the next (issue 23)


@dataclass(frozen=True)
class Bury:
    """To the dead-letter queue with ``reason``."""

    reason: str
    kind: str
    error: str = ""
    traceback: str = ""
    spend_attempt: bool = False


@dataclass(frozen=True)
class HandBack:
    """Back to ready at once, no attempt spent (shutdown). Redis being away is waited for until
    ``give_up_at`` (monotonic seconds); after that the lease expires and the sweeper returns it."""

    give_up_at: float


@dataclass(frozen=True)
class DropStale:
    """This delivery no longer holds the job (its lease was lost or given up): nothing is
    written; whoever holds it now settles it. ``newly_lost``: the loss was found by this step
    (counted as ``lease_lost``), not earlier by the heartbeat."""

    why: str
    newly_lost: bool = False


# -- incident controls --------------------------------------------------------------------------
@dataclass(frozen=True)
class Cancelled:
    """An operator cancelled the job: to the DLQ with ``reason`` (``to='dlq'``) or discarded.
    Its SQL effects were rolled back."""

    to: str
    reason: str


@dataclass(frozen=True)
class Expired:
    """Older than its handler's ``max_age_s`` when reserved: to the DLQ without running."""

    age_ms: int
    max_age_s: float

    @property
    def reason(self) -> str:
        return (f"expired: {self.age_ms / 1000:.1f}s old when reserved, over its max_age_s "
                f"of {self.max_age_s:g}s; it did not run")


@dataclass(frozen=True)
class SnoozeCap:
    """Held back ``snoozes`` times (the last: ``last``): to the DLQ instead of once more."""

    snoozes: int
    cap: int
    last: Snooze

    @property
    def reason(self) -> str:
        return (f"held back {self.snoozes} times without running (last: {self.last.reason}), "
                f"over its cap of {self.cap}; look at what holds it, then replay")


Outcome = Ack | Retry | Snooze | Bury | HandBack | DropStale | Cancelled | Expired | SnoozeCap
OUTCOME_TYPES = (Ack, Retry, Snooze, Bury, HandBack, DropStale, Cancelled, Expired, SnoozeCap)


def event_of(outcome: Outcome) -> str:
    """The outcome's event name: its log line's ``event`` and this process's count."""
    if isinstance(outcome, Ack):
        return "deduplicated" if outcome.deduplicated else "succeeded"
    if isinstance(outcome, Retry):
        return "retried"
    if isinstance(outcome, Snooze):
        return "snoozed"
    if isinstance(outcome, Bury):
        return "buried"
    if isinstance(outcome, HandBack):
        return "handed_back"
    if isinstance(outcome, Cancelled):
        return "cancelled"
    if isinstance(outcome, Expired):
        return "max_age"  # not 'expired': that is a lease expiry in logs and metrics
    if isinstance(outcome, SnoozeCap):
        return "snooze_capped"
    return "dropped"


def from_decision(decision: Decision, exc: BaseException) -> Outcome:
    """The retry policy's decision about a handler's failure, as an outcome (pure)."""
    if decision.action == "snooze" and decision.kind == "version_conflict":
        # optimistic locking (issue 23 item 7): behind its key's next job, no attempt spent
        return Snooze(decision.delay_ms, decision.kind, counter="version_conflict",
                      count_as="version_conflict", note=decision.reason, behind_key=True,
                      details={"conflict": decision.reason})
    if decision.action == "snooze":
        return Snooze(decision.delay_ms, decision.kind)
    if decision.action == "retry":
        return Retry(decision.delay_ms, describe(exc), decision.kind, format_traceback(exc))
    return Bury(decision.reason, decision.kind, error=describe(exc),
                traceback=format_traceback(exc), spend_attempt=True)


def jitter_ms(low_ms: int, high_ms: int) -> int:
    """A short random wait, so jobs refused together do not come back together."""
    return random.randint(low_ms, high_ms)


def lock_lost(lock_key: str | None) -> Snooze:
    """The job's business lock was lost while it ran (expired, force-released): nothing of the
    run is committed; back shortly, no attempt spent."""
    return Snooze(jitter_ms(200, 1000), "lock_lost", counter="lock_lost", level=logging.WARNING,
                  note=f"lock {lock_key} was lost while the job ran; not committing")
