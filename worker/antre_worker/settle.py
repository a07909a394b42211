"""``Settler.settle(r, outcome)``: the one place a job's outcome is applied.

One fenced Lua transition per outcome (``Queue.ack / retry / snooze / bury / hand_back``),
retried through a Redis outage (never given up: an outcome that did not land is redone on the
next delivery, never acked falsely; only a hand-back at shutdown gives up, and then the lease
expires), then one log line and one count per outcome, each read from the outcome's declaration
(``OutcomeKind`` in outcomes.py). Within a prefetched batch the
acks wait and go together in one round trip (``flush_acks``): each is still its own fenced
script, and a lease lost meanwhile is refused and logged while nothing else changes. Their
idempotency completions, when waiting (``Ack.completion``), are committed first, in one
transaction: a job whose lock was found lost at its release, or whose completion could not be
committed, is snoozed instead of acked. The successes that wrote through ``ctx.db`` wait for
their batch's shared transaction (transaction.py) the same way: acked once it committed, all
snoozed if it did not.

At the default INFO level the outcome's line is the only line of an ordinary job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, cast

from antre.clock import Clock
from antre.control.cancel import CancelRequest
from antre.engine.envelope import Job
from antre.engine.failing import Failure
from antre.errors import LeaseLost
from antre.hooks import Hooks
from antre.observe.joblog import LOG_NOTE
from antre.observe.logs import job_fields, job_line, succeeded_line
from antre.observe.metrics import DurationBuffer
from antre.observe.perf import record_run

from . import hooked
from .health import REDIS_DOWN, RedisHealth
from .held import Running
from .outcomes import (Ack, Cancelled, Completion, DropStale, HandBack, Outcome, OutcomeKind,
                       Path, Snooze, jitter_ms, kind_of, lock_lost)

log = logging.getLogger("antre.worker")


class Settler:
    """Applies outcomes; counts them in ``counts`` and their latency in ``durations``."""

    def __init__(self, health: RedisHealth, clock: Clock, counts: Counter[str],
                 durations: DurationBuffer, hooks: Hooks | None = None) -> None:
        self.health = health
        self.clock = clock
        self.counts = counts
        self.durations = durations
        self.hooks = hooks if hooks is not None else Hooks()  # the app's hooks (hooked.py)
        self._local = threading.local()  # per runner thread: acks waiting for their batch
        # the same lists by thread: a batch whose thread is stuck in a handler is sent by
        # another (flush_abandoned)
        self._open: dict[int, tuple[list[tuple[Running, Ack]], list[tuple[Running, Outcome]]]] = {}

    # -- batching ----------------------------------------------------------------------------
    def begin_batch(self, batched: bool) -> None:
        """From now on this thread's plain acks wait for ``flush_acks`` (when ``batched``)."""
        acks: list[tuple[Running, Ack]] | None = [] if batched else None
        fails: list[tuple[Running, Outcome]] | None = [] if batched else None
        self._local.acks = acks
        self._local.fails = fails  # retries and burials, sent together
        self._local.completing = None  # the keys of the waiting acks' completions
        if acks is not None and fails is not None:  # (found by flush_abandoned)
            self._open[threading.get_ident()] = (acks, fails)

    def batching(self) -> bool:
        return getattr(self._local, "acks", None) is not None

    def completing(self, idempotency_key: str) -> bool:
        """Whether this thread's batch holds a success of ``idempotency_key`` whose completion
        is not recorded yet (a duplicate in the same batch waits for it: ``flush_acks``)."""
        keys: set[str] | None = getattr(self._local, "completing", None)
        return keys is not None and idempotency_key in keys

    def flush_acks(self) -> None:
        """Retry and bury the failures of a prefetched batch in one round trip, then ack its
        successes in one more (also when the failures could not be settled: those come back
        through their leases)."""
        self._open.pop(threading.get_ident(), None)
        fails: list[tuple[Running, Outcome]] = getattr(self._local, "fails", None) or []
        self._local.fails = None
        try:
            if fails:
                self._fail_together(fails)
        finally:
            pending: list[tuple[Running, Ack]] = getattr(self._local, "acks", None) or []
            self._local.acks = self._local.completing = None
            self._send_successes(pending)

    def flush_abandoned(self, thread: int) -> None:
        """What the batch of ``thread`` holds waiting (the acks and failures of the jobs it ran
        before the handler it is stuck in), sent from this thread: its jobs are not delivered
        again because one handler of their batch never returns. Taken out of the batch, so the
        thread sends nothing of it twice if it ever returns."""
        held = self._open.pop(thread, None)
        if held is None:
            return
        acks, fails = held
        pending, failing = list(acks), list(fails)
        acks.clear()
        fails.clear()
        try:
            if failing:
                self._fail_together(failing)
        finally:
            self._send_successes(pending)

    def _send_successes(self, pending: list[tuple[Running, Ack]]) -> None:
        if any(ack.transaction is not None for _, ack in pending):
            pending = self._committed(pending)
        if any(ack.completion is not None for _, ack in pending):
            pending = self._complete(pending)
        by_queue: dict[str, list[tuple[Running, Ack]]] = {}
        for r, ack in pending:
            by_queue.setdefault(r.queue.name, []).append((r, ack))
        for done in by_queue.values():
            self._ack_together(done)

    def take_ack(self, r: Running) -> Ack | None:
        """The batch's waiting ack when it is all the batch holds: ``r``'s plain ack, no
        completion to commit first and no failure to settle (a hand-over: runner.py); taken out
        of the batch. None: the batch settles as usual."""
        acks = getattr(self._local, "acks", None)
        if (not acks or len(acks) != 1 or acks[0][0] is not r or acks[0][1].completion
                is not None or getattr(self._local, "fails", None)):
            return None
        ack = cast(Ack, acks[0][1])
        acks.clear()  # (in place: flush_abandoned holds the same list)
        self._local.completing = None
        return ack

    def put_back(self, r: Running, ack: Ack) -> None:
        """``take_ack``'s ack, back in the batch (it is acked with it after all)."""
        self._local.acks.append((r, ack))

    def handed_over(self, r: Running, ack: Ack, status: str) -> None:
        """What ``Queue.handover`` did with ``r``'s ack: acked ('OK'), refused for a lost lease,
        or refused because the lock was lost while the job ran ('LOCK': snoozed instead,
        nothing of the run counts)."""
        r.released_with_ack = True
        if status == "OK":
            self._record(r, ack)
        elif status == "LOCK":
            self._settle_closed(r, lock_lost(r.job.lock_key))
        else:
            self.lease_lost(r.job, LeaseLost(f"job {r.job.id}: {status[5:]}; nothing was "
                                             "changed"))

    def _committed(self, pending: list[tuple[Running, Ack]]) -> list[tuple[Running, Ack]]:
        """The acks whose effects wait in their batch's shared transaction (transaction.py):
        committed by now (the batch's end commits it, on its own thread), they may be acked; if it did not commit,
        every one of its jobs goes back unacked (snoozed, no attempt spent: nothing of their
        runs counts), a job whose lock was lost as ``lock_lost``."""
        out: list[tuple[Running, Ack]] = []
        for r, ack in pending:
            tx = ack.transaction
            if tx is None:
                out.append((r, ack))
                continue
            if not tx.done:
                # its transaction is still open on the thread that ran it (a batch whose
                # thread is stuck in a handler, sent by ``flush_abandoned``): not acked, it
                # comes back through its lease (its effects commit with that thread, if ever)
                continue
            if tx.error is None:
                out.append((r, ack))
            elif r.lock_fence is not None and any(
                    lock.lost and lock.key == r.job.lock_key for lock in tx.released_locks):
                self._settle_closed(r, lock_lost(r.job.lock_key))
            else:
                self._settle_closed(r, Snooze(
                    jitter_ms(200, 1000), "batch_commit_failed", level=logging.ERROR,
                    note=f"its batch's transaction did not commit: {tx.error}"))
        return out

    def _complete(self, pending: list[tuple[Running, Ack]]) -> list[tuple[Running, Ack]]:
        """Record the batch's waiting idempotency completions in one commit (per store); return
        what may be acked now. A job whose lock was found lost when it was released is snoozed
        instead (nothing of its run counts); if the commit fails they are all snoozed (the
        database is away: retried, no attempt spent); a key no longer owned by its delivery is
        dropped (a newer delivery holds the job)."""
        groups: dict[int, list[tuple[Running, Ack, Completion]]] = {}
        for r, ack in pending:
            c = ack.completion
            if c is None:
                continue
            if c.lock is not None and c.lock.lost:
                self._settle_closed(r, lock_lost(r.job.lock_key))
            else:
                groups.setdefault(id(c.store), []).append((r, ack, c))
        completed: set[int] = set()
        for group in groups.values():
            try:
                done = group[0][2].store.complete_many([c.item for _, _, c in group])
            except Exception as exc:
                for r, _, _ in group:
                    self._settle_closed(r, Snooze(
                        jitter_ms(200, 1000), "database_unavailable", level=logging.ERROR,
                        note=f"idempotency completion not recorded: {exc}"))
                continue
            for r, ack, c in group:
                if c.item.key in done:
                    completed.add(id(ack))
                else:
                    self._record(r, DropStale(
                        f"idempotency record {c.item.key!r} is no longer owned by fence "
                        f"{c.item.fence}", newly_lost=True))
        return [(r, ack) for r, ack in pending
                if ack.completion is None or id(ack) in completed]

    def _settle_closed(self, r: Running, outcome: Outcome) -> None:
        """Apply ``outcome`` to a job already closed for its batched ack (which it no longer
        gets)."""
        try:
            self.health.call(transition, r, outcome, kind_of(outcome))
        except LeaseLost as exc:
            self.lease_lost(r.job, exc)
            return
        self._record(r, outcome)

    def _ack_together(self, done: list[tuple[Running, Ack]]) -> None:
        q = done[0][0].queue
        lost = {j.id for j in self.health.call(q.ack_many, [(r.job, a.result) for r, a in done],
                                               notes=[timeline_note(r, a) for r, a in done])}
        for r, ack in done:
            if r.job.id in lost:
                self.lease_lost(r.job, LeaseLost(f"job {r.job.id}: the lease changed before "
                                                 "its batched ack; nothing was changed"))
            else:
                self._record(r, ack)

    def _fail_together(self, fails: list[tuple[Running, Outcome]]) -> None:
        by_queue: dict[str, list[tuple[Running, Outcome]]] = {}
        for r, outcome in fails:
            by_queue.setdefault(r.queue.name, []).append((r, outcome))
        for items in by_queue.values():
            q = items[0][0].queue
            replies = self.health.call(q.fail_many, [failure_of(r, o) for r, o in items])
            for (r, outcome), reply in zip(items, replies):
                if reply.startswith("LOST:"):
                    self.lease_lost(r.job, LeaseLost(f"job {r.job.id}: {reply[5:]}; nothing "
                                                     "was changed"))
                else:
                    self._record(r, cancelled_instead(r) if reply == "CANCELLED" else outcome)

    # -- settling ----------------------------------------------------------------------------
    def settle(self, r: Running, outcome: Outcome) -> bool:
        """Apply ``outcome`` to the job ``r`` holds, as its declaration's ``path`` says; False
        when nothing was written (already settled, lease lost, or a drop)."""
        kind = kind_of(outcome)
        path = kind.path(outcome)
        if path is Path.DROP:
            self._record(r, outcome)
            return False
        if path is Path.HAND_BACK:
            return self._hand_back(r, cast(HandBack, outcome), kind)
        with r.settle_lock:
            if r.closed:
                return False
            if path is not Path.FENCED and self.batching():
                self._wait_for_batch(r, outcome, path)
                r.closed = True
                return True
            try:
                if self.health.call(transition, r, outcome, kind):
                    outcome = cancelled_instead(r)
            except LeaseLost as exc:
                self.lease_lost(r.job, exc)
                return False
            r.closed = True  # settled: nothing else may touch this lease
        self._record(r, outcome)
        return True

    def _wait_for_batch(self, r: Running, outcome: Outcome, path: Path) -> None:
        """``outcome`` waits for ``flush_acks``: a retry or burial with its batch's failures,
        an ack with its successes (its idempotency completion noted as pending)."""
        if path is Path.BATCH_FAIL:
            self._local.fails.append((r, outcome))
            return
        ack = cast(Ack, outcome)
        self._local.acks.append((r, ack))
        if ack.completion is not None:
            if self._local.completing is None:
                self._local.completing = set()
            self._local.completing.add(ack.completion.item.key)

    def _hand_back(self, r: Running, outcome: HandBack, kind: OutcomeKind[HandBack]) -> bool:
        with r.settle_lock:
            if r.closed or r.lease_lost:
                return False
            r.closed = True  # whatever the handler does later is dropped
            r.stop_handler()
            try:
                if self.health.call(transition, r, outcome, kind,
                                    give_up_at=outcome.give_up_at):
                    self._record(r, cancelled_instead(r))  # cancelled: never handed back
                    return True
            except LeaseLost as exc:
                self.lease_lost(r.job, exc)
                return False
            except REDIS_DOWN:
                log.error("could not hand back job %s (redis unreachable); its lease will "
                          "expire and the sweeper returns it", r.job.id,
                          extra=job_fields(r.job, "expired"))
                return False
        self._record(r, outcome)
        return True

    def lease_lost(self, job: Job, exc: BaseException) -> None:
        self.counts["lease_lost"] += 1
        log.warning("lease lost: %s", exc, extra=job_fields(job, "lease_lost"))

    # -- one count and one line per outcome ----------------------------------------------------
    def _record(self, r: Running, outcome: Outcome) -> None:
        kind = kind_of(outcome)
        event = kind.event(outcome)
        self._count(r, outcome, kind, event)
        if self.hooks:
            hooked.settled(self.hooks, r, outcome, kind, duration_ms(r))
        level = kind.level(outcome)
        if not log.isEnabledFor(level):
            return
        fence = r.lock_fence  # the fencing token of the lock the job ran under, if any
        if event == "succeeded":  # the common case: its own quick line
            succeeded_line(log, r.job, duration_ms(r), fence)
            return
        job_line(log, level, "%s job %s%s", (event, r.job.id, kind.note(outcome)),
                 job_fields(r.job, event, duration_ms=duration_ms(r), lock_fence=fence,
                            error_kind=kind.error_kind(outcome), **kind.details(outcome)))

    def _count(self, r: Running, outcome: Outcome, kind: OutcomeKind[Any], event: str) -> None:
        if kind.ends_latency:
            self.durations.add(r.job.queue, r.job.type, "latency",
                               self.clock() - r.job.created_at)
        ran = duration_ms(r)
        if ran is not None:  # its handler ran: the performance page's figures (perf.py)
            job = r.job
            wait = job.reserved_at - job.visible_at if job.reserved_at and job.visible_at else 0
            record_run(self.durations, job.queue, job.type, self.clock(), ran, wait,
                       kind.failed_run)
        self.counts[event] += 1
        for counter in kind.counts(outcome):
            self.counts[counter] += 1


def transition(r: Running, outcome: Outcome, kind: OutcomeKind[Any]) -> bool:
    """The outcome's one fenced Lua transition, with its timeline note; True when the job,
    cancelled by an operator, was ended as cancelled instead of put back (the script
    decides)."""
    return kind.transition(r, outcome, timeline_note(r, outcome))


def failure_of(r: Running, outcome: Outcome) -> Failure:
    """``outcome`` as its batched form: what its ``transition`` passes ``q.retry`` /
    ``q.bury``."""
    batched = kind_of(outcome).batched
    assert batched is not None, f"{type(outcome).__name__} has no batched form"
    return batched(r, outcome, timeline_note(r, outcome))


def cancelled_instead(r: Running) -> Cancelled:
    """The outcome of a job the script ended as cancelled instead of putting it back (its
    request as this process knows it; the script applied the one stored on the job)."""
    req = r.cancel or CancelRequest.parse(r.job.cancel)
    if req is None:
        return Cancelled("dlq", "cancelled by an operator")
    return Cancelled(req.to, req.dlq_reason)


def timeline_note(r: Running, outcome: Outcome) -> dict[str, Any] | None:
    """What the worker knows of an outcome, for the job's timeline (the settling script
    appends it to its event): the handler's run time; for an ack the fences its effects
    committed under (the lease epoch fences the idempotency record, the lock's token fences
    SQL effects under a business lock); for a snooze why, with its details."""
    note: dict[str, Any] = {}
    ran = duration_ms(r)
    if ran is not None:
        note["ran_ms"] = ran
    note.update(kind_of(outcome).timeline(r, outcome))
    own = r.own_log
    if own:  # the handler's own log, written by the same script (queue.LOG_SEP)
        note[LOG_NOTE] = own.encode()
    return note or None


def duration_ms(r: Running) -> int | None:
    """How long the handler has run (None before it started)."""
    return int((time.monotonic() - r.started_mono) * 1000) if r.started_mono else None

