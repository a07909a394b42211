"""What a job's pipeline decided: one typed outcome, applied by ``Settler.settle`` (settle.py).

A step of the pipeline (pipeline.py, execution.py) returns ``None`` to let the next step go on,
or one of these frozen values to end the job's processing. Each outcome type is declared once
with its ``OutcomeKind``: everything a reader needs of it (how it is settled and its fenced Lua
transition, its log line's event, level, error kind and note, its timeline details, its
counts). The readers (settle.py, pipeline.py, spans.py) read the declaration, never the type;
``tests/worker/test_outcome_kinds.py`` checks every outcome type has one and every field is
read. A new outcome is a class here, its ``declare(...)`` and its place in ``Outcome``.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from antre.engine.failing import Failure
from antre.engine.locks import Lock
from antre.engine.queue import Note
from antre.engine.retry import Decision, describe, format_traceback
from antre.stores.idempotency import Completed, IdempotencyStore

from .held import Running

OutcomeT = TypeVar("OutcomeT")  # an outcome type


class Path(enum.Enum):
    """How ``Settler.settle`` applies an outcome."""

    DROP = "drop"  # nothing is written: the lease is no longer this delivery's
    HAND_BACK = "hand_back"  # the handler is stopped, the job handed back (given up in time)
    FENCED = "fenced"  # its own fenced transition, retried through an outage
    BATCH_ACK = "batch_ack"  # within a prefetched batch: acked with the batch's other acks
    BATCH_FAIL = "batch_fail"  # within a prefetched batch: with its other retries and burials


@dataclass(frozen=True)
class OutcomeKind(Generic[OutcomeT]):
    """One outcome type's declaration: what every reader of the outcome needs.

    ``transition`` is the fenced Lua transition (True: the job, cancelled by an operator, was
    ended as cancelled instead of put back); ``batched`` its form in a batch's ``fail_many``
    (for ``Path.BATCH_FAIL`` only). ``event``: the log line's event and this process's count;
    ``counts``: further counts of this process; ``ends_latency``: the job's end-to-end latency
    ends here; ``failed_run``: a failed run on the performance page. ``snooze_reason``: why it
    is held back ('' when not), for its span and the snooze cap; ``releases_lock``: the
    business lock's release may ride in the transition's round trip; ``told``: what the app's
    lifecycle hooks are told of it (None: nothing)."""

    path: Callable[[OutcomeT], Path]
    transition: Callable[[Running, OutcomeT, Note], bool]
    batched: Callable[[Running, OutcomeT, Note], Failure] | None
    event: Callable[[OutcomeT], str]
    level: Callable[[OutcomeT], int]
    error_kind: Callable[[OutcomeT], str]
    note: Callable[[OutcomeT], str]
    details: Callable[[OutcomeT], dict[str, Any]]
    timeline: Callable[[Running, OutcomeT], dict[str, Any]]
    counts: Callable[[OutcomeT], tuple[str, ...]]
    snooze_reason: Callable[[OutcomeT], str]
    ends_latency: bool
    failed_run: bool
    releases_lock: bool
    told: Callable[[OutcomeT], Told | None] = lambda _o: None  # what the hooks are told


@dataclass(slots=True)
class Told:
    """What the app's lifecycle hooks are told of an outcome (hooked.py): the hook method
    (``after_job``, ``on_retry`` or ``on_dead``), a success's result, a failure's error, error
    kind, traceback, retry delay and error group signature ('': the kind's and error's)."""

    method: str
    result: Any = None
    error: str = ""
    kind: str = ""
    traceback: str = ""
    delay_ms: int = 0
    signature: str = ""


KINDS: dict[type[Any], OutcomeKind[Any]] = {}


def declare(cls: type[OutcomeT], kind: OutcomeKind[OutcomeT]) -> OutcomeKind[OutcomeT]:
    """Register ``kind`` as the declaration of the outcome type ``cls``."""
    KINDS[cls] = kind
    return kind


def kind_of(outcome: Outcome) -> OutcomeKind[Any]:
    """The declaration of ``outcome``'s type."""
    return KINDS[type(outcome)]


def _const(value: Any) -> Callable[[Any], Any]:
    return lambda _o: value


_blank = _const("")
_info = _const(logging.INFO)
_warning = _const(logging.WARNING)
_no_counts = _const(())
_fenced = _const(Path.FENCED)


def _no_details(_o: Any) -> dict[str, Any]:
    return {}


def _no_timeline(_r: Running, _o: Any) -> dict[str, Any]:
    return {}


def _quiet(r: Running, outcome: Any, note: Note) -> bool:
    """No transition: nothing is written."""
    return False


# -- success --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ack:
    """Done: ``result`` is stored with the job. ``deduplicated``: the handler did not run, the
    result is the one a completed idempotency record holds. ``completion``: the idempotency
    record is still to be marked completed, with the other successes of the job's prefetched
    batch in one commit, right before their batched ack (settle.py); until then it is not
    done. ``transaction``: its ctx.db effects and completion wait in its batch's shared
    transaction (transaction.py), acked only once that committed."""

    result: Any = None
    deduplicated: bool = False
    completion: Completion | None = None
    transaction: Any = None  # a BatchTransaction (transaction.py)


ACKED = Ack()  # the common success (no result): one shared, immutable instance


@dataclass(frozen=True)
class Completion:
    """What an ``Ack`` still has to record before it may be acked: the owned idempotency key
    (``store.complete_many``) and the business lock the handler ran under, whose release said
    whether it was still held when the job ended (``lock.lost``)."""

    store: IdempotencyStore
    item: Completed
    lock: Lock | None = None


def _ack(r: Running, o: Ack, note: Note) -> bool:
    """``Queue.ack``, with the business lock's release in the same round trip when it waits
    (``r.ack_release``); a release that found the lock gone marks it lost."""
    release, r.ack_release = r.ack_release, None
    held = r.queue.ack(r.job, o.result, release=release,
                       counter="deduplicated" if o.deduplicated else "acked", note=note)
    if held is not None:  # the lock went in the same round trip
        r.released_with_ack = True
        if not held and r.lock is not None:
            r.lock.lost = True
    return False


def _ack_timeline(r: Running, o: Ack) -> dict[str, Any]:
    """The fences the run's effects committed under: the lease epoch fences the idempotency
    record, the lock's token fences SQL effects under a business lock."""
    note: dict[str, Any] = {}
    if r.owns_idempotency:
        note["idempotency_fence"] = r.job.epoch
    # a batched ack's lock was released already: its completion still names it
    lock = r.lock or (o.completion.lock if o.completion else None)
    if lock is not None:
        note["lock"], note["lock_fence"] = lock.key, lock.fence
    return note


declare(Ack, OutcomeKind[Ack](
    path=lambda o: Path.FENCED if o.deduplicated else Path.BATCH_ACK,
    transition=_ack, batched=None,
    event=lambda o: "deduplicated" if o.deduplicated else "succeeded",
    level=_info, error_kind=_blank, note=_blank, details=_no_details, timeline=_ack_timeline,
    counts=_const(("processed",)), snooze_reason=_blank,
    ends_latency=True, failed_run=False, releases_lock=True,
    told=lambda o: None if o.deduplicated else Told("after_job", result=o.result)))


# -- failure --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Retry:
    """Failed with a retryable error: back in ``delay_ms``, one attempt spent."""

    delay_ms: int
    error: str
    kind: str
    traceback: str = ""


def _retry(r: Running, o: Retry, note: Note) -> bool:
    return r.queue.retry(r.job, delay_ms=o.delay_ms, error=o.error, kind=o.kind,
                         traceback=o.traceback, note=note, keep_turn=_keeps_turn(r))


def _retry_failure(r: Running, o: Retry, note: Note) -> Failure:
    return Failure(r.job, "retry", o.error, o.kind, o.traceback, note, delay_ms=o.delay_ms,
                   keep_turn=_keeps_turn(r))


def _keeps_turn(r: Running) -> bool:
    """A retried job with a lock_key keeps its key's turn unless its handler is unordered."""
    return r.spec is None or r.spec.ordered


declare(Retry, OutcomeKind[Retry](
    path=_const(Path.BATCH_FAIL), transition=_retry, batched=_retry_failure,
    event=_const("retried"), level=_warning, error_kind=lambda o: o.kind,
    note=lambda o: f": {o.error}", details=lambda o: {"delay_ms": o.delay_ms},
    timeline=_no_timeline, counts=_const(("failed",)), snooze_reason=_blank,
    ends_latency=False, failed_run=True, releases_lock=False,
    told=lambda o: Told("on_retry", error=o.error, kind=o.kind, traceback=o.traceback,
                        delay_ms=o.delay_ms)))


@dataclass(frozen=True)
class Bury:
    """To the dead-letter queue with ``reason``."""

    reason: str
    kind: str
    error: str = ""
    traceback: str = ""
    spend_attempt: bool = False


def _bury(r: Running, o: Bury, note: Note) -> bool:
    r.queue.bury(r.job, reason=o.reason, error=o.error or o.reason, kind=o.kind,
                 traceback=o.traceback, spend_attempt=o.spend_attempt, note=note)
    return False


def _bury_failure(r: Running, o: Bury, note: Note) -> Failure:
    return Failure(r.job, "bury", o.error or o.reason, o.kind, o.traceback, note,
                   spend_attempt=o.spend_attempt, reason=o.reason)


declare(Bury, OutcomeKind[Bury](
    path=_const(Path.BATCH_FAIL), transition=_bury, batched=_bury_failure,
    event=_const("buried"), level=_warning, error_kind=lambda o: o.kind,
    note=lambda o: f": {o.reason}", details=_no_details, timeline=_no_timeline,
    counts=_const(("failed",)), snooze_reason=_blank,
    ends_latency=True, failed_run=True, releases_lock=False,
    told=lambda o: Told("on_dead", error=o.error or o.reason, kind=o.kind,
                        traceback=o.traceback)))


# -- not now --------------------------------------------------------------------------------
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
    behind_key: bool = False  # a job with a lock_key gives its turn to its key's next job


def _snooze(r: Running, o: Snooze, note: Note) -> bool:
    return r.queue.snooze(r.job, o.delay_ms, o.reason, counter=o.counter, note=note,
                          keep_turn=not o.behind_key)


def _snooze_timeline(r: Running, o: Snooze) -> dict[str, Any]:
    """Why it was held back, with its details."""
    note = dict(o.details or {})
    if o.note:
        note["note"] = o.note
    return note


declare(Snooze, OutcomeKind[Snooze](
    path=_fenced, transition=_snooze, batched=None,
    event=_const("snoozed"), level=lambda o: o.level, error_kind=lambda o: o.reason,
    note=lambda o: f": {o.note}" if o.note else "", details=lambda o: {"delay_ms": o.delay_ms},
    timeline=_snooze_timeline, counts=lambda o: (o.count_as,) if o.count_as else (),
    snooze_reason=lambda o: o.reason,
    ends_latency=False, failed_run=False, releases_lock=False))


# -- this delivery lets go ------------------------------------------------------------------
@dataclass(frozen=True)
class HandBack:
    """Back to ready at once, no attempt spent (shutdown). Redis being away is waited for until
    ``give_up_at`` (monotonic seconds); after that the lease expires and the sweeper returns it."""

    give_up_at: float


declare(HandBack, OutcomeKind[HandBack](
    path=_const(Path.HAND_BACK),
    transition=lambda r, o, note: r.queue.hand_back(r.job, note=note), batched=None,
    event=_const("handed_back"), level=_info, error_kind=_blank,
    note=_const(" (no attempt spent)"), details=_no_details,
    timeline=lambda r, o: {"why": "the worker is shutting down"}, counts=_no_counts,
    snooze_reason=_blank, ends_latency=False, failed_run=False, releases_lock=False))


@dataclass(frozen=True)
class DropStale:
    """This delivery no longer holds the job (its lease was lost or given up): nothing is
    written; whoever holds it now settles it. ``newly_lost``: the loss was found by this step
    (counted as ``lease_lost``), not earlier by the heartbeat."""

    why: str
    newly_lost: bool = False


declare(DropStale, OutcomeKind[DropStale](
    path=_const(Path.DROP), transition=_quiet, batched=None,
    event=_const("dropped"), level=_warning, error_kind=_const("lease_lost"),
    note=lambda o: f": {o.why}; outcome dropped", details=_no_details, timeline=_no_timeline,
    counts=lambda o: ("lease_lost",) if o.newly_lost else (), snooze_reason=_blank,
    ends_latency=False, failed_run=False, releases_lock=False))


# -- incident controls ----------------------------------------------------------------------
@dataclass(frozen=True)
class Cancelled:
    """An operator cancelled the job: to the DLQ with ``reason`` (``to='dlq'``) or discarded.
    Its SQL effects were rolled back."""

    to: str
    reason: str


def _cancel(r: Running, o: Cancelled, note: Note) -> bool:
    r.queue.finish_cancelled(r.job, to=o.to, reason=o.reason)
    return False


declare(Cancelled, OutcomeKind[Cancelled](
    path=_fenced, transition=_cancel, batched=None,
    event=_const("cancelled"), level=_warning, error_kind=_const("cancelled"),
    note=lambda o: f": {o.reason}" + (" (discarded)" if o.to == "discard" else ""),
    details=_no_details, timeline=_no_timeline, counts=_no_counts, snooze_reason=_blank,
    ends_latency=True, failed_run=False, releases_lock=False))


@dataclass(frozen=True)
class Expired:
    """Older than its handler's ``max_age_s`` when reserved: to the DLQ without running."""

    age_ms: int
    max_age_s: float

    @property
    def reason(self) -> str:
        return (f"expired: {self.age_ms / 1000:.1f}s old when reserved, over its max_age_s "
                f"of {self.max_age_s:g}s; it did not run")

    @property
    def signature(self) -> str:
        """Its error group's signature (one group for every expired job)."""
        return "expired: older than its max_age_s"


def _expire(r: Running, o: Expired, note: Note) -> bool:
    r.queue.bury(r.job, reason=o.reason, kind="expired", spend_attempt=False,
                 signature=o.signature, note=note)
    return False


declare(Expired, OutcomeKind[Expired](
    path=_fenced, transition=_expire, batched=None,
    event=_const("max_age"),  # not 'expired': that is a lease expiry in logs and metrics
    level=_warning, error_kind=_const("expired"), note=lambda o: f": {o.reason}",
    details=_no_details, timeline=_no_timeline, counts=_no_counts, snooze_reason=_blank,
    ends_latency=True, failed_run=False, releases_lock=False,
    told=lambda o: Told("on_dead", error=o.reason, kind="expired", signature=o.signature)))


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

    @property
    def signature(self) -> str:
        """Its error group's signature (one group per reason it was held back)."""
        return f"snooze_cap: {self.last.reason}"


def _cap(r: Running, o: SnoozeCap, note: Note) -> bool:
    r.queue.bury(r.job, reason=o.reason, kind="snooze_cap", spend_attempt=False,
                 signature=o.signature, note=note)
    return False


declare(SnoozeCap, OutcomeKind[SnoozeCap](
    path=_fenced, transition=_cap, batched=None,
    event=_const("snooze_capped"), level=_warning, error_kind=_const("snooze_cap"),
    note=lambda o: f": {o.reason}", details=_no_details, timeline=_no_timeline,
    counts=_no_counts, snooze_reason=_blank,
    ends_latency=True, failed_run=False, releases_lock=False,
    told=lambda o: Told("on_dead", error=o.reason, kind="snooze_cap", signature=o.signature)))


Outcome = Ack | Retry | Snooze | Bury | HandBack | DropStale | Cancelled | Expired | SnoozeCap


# -- named constructors ---------------------------------------------------------------------
def from_decision(decision: Decision, exc: BaseException) -> Outcome:
    """The retry policy's decision about a handler's failure, as an outcome (pure)."""
    if decision.action == "snooze" and decision.kind == "version_conflict":
        # optimistic locking: behind its key's next job, no attempt spent
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
