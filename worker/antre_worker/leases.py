"""Keeping what a running job holds: its Redis lease (extended by the heartbeat, capped by the
handler's max runtime, or by the handler itself through ``ctx.extend_lease``), the owner lease of
its idempotency record and its flow-control slots (both follow the Redis lease), its business
lock (compare-and-expire every third of its TTL), and its timeouts (soft: ``ctx.cancelled``;
hard: the handler's thread is interrupted and the job settled as a timeout, see interrupt.py).

The heartbeat never waits for SQL: the idempotency records' owner leases are extended by a
thread of their own (``SqlLeases``), so a stalled database delays only them, while every Redis
lease, slot and lock is renewed on time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from antre import Antre, JobTimeout, LeaseLost
from antre.control.cancel import Cancels
from antre.clock import Clock
from antre.engine.envelope import Job
from antre.engine.locks import Locks
from antre.observe.logs import job_fields
from antre.stores.idempotency import IdempotencyStore

from .failures import failure_outcome
from .held import Running
from .interrupt import raise_in
from .outcomes import Cancelled
from .settle import Settler

log = logging.getLogger("antre.worker")

DEFAULT_MAX_RUNTIME_S = 3600.0  # a job whose handler is unknown here


def quietly(fn: Callable[[], Any]) -> None:
    """Flow-control bookkeeping: slots and probes expire by themselves if this fails."""
    try:
        fn()
    except redis.RedisError as exc:
        log.debug("flow control bookkeeping failed: %s", exc, extra={"event": "error"})


class SqlLeases:
    """Extends idempotency owner leases on the ``antre-sql-leases`` thread: ``submit`` only
    records the newest deadline of a record (a later one replaces one still waiting) and
    returns at once, whatever the database does."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[int, str], tuple[IdempotencyStore, Job, int]] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, store: IdempotencyStore, job: Job, deadline_ms: int) -> None:
        with self._cond:
            self._waiting[(id(store), job.idempotency_key)] = (store, job, deadline_ms)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="antre-sql-leases")
                self._thread.start()
            self._cond.notify()

    def idle(self, timeout_s: float) -> bool:
        """Wait until every submitted extension was written (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and not self._busy, timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._waiting))
                batch, self._waiting, self._busy = self._waiting, {}, True
            for store, job, deadline_ms in batch.values():
                _extend_sql(store, job, deadline_ms)
            with self._cond:
                self._busy = False
                self._cond.notify_all()


def _extend_sql(store: IdempotencyStore, job: Job, deadline_ms: int) -> None:
    try:
        store.extend_lease(job.idempotency_key, job.epoch, deadline_ms, job_id=job.id)
    except Exception as exc:
        log.error("could not extend the idempotency lease: %s", exc,
                  extra=job_fields(job, "error"))


class Leases:
    """The heartbeat's work on the jobs this process holds (``beat``), and ``extend_by`` for
    ``ctx.extend_lease``. ``on_abandon(r, cause)`` is called after the heartbeat settled ``r``
    for a handler it could not stop (cause ``hard_timeout`` or ``cancel_ignored``)."""

    def __init__(self, app: Antre, locks: Locks, clock: Clock, settler: Settler, *,
                 hard_grace_s: float, on_abandon: Callable[[Running, str], None]) -> None:
        self.app = app
        self.locks = locks
        self.clock = clock
        self.settler = settler
        self.hard_grace_s = hard_grace_s
        self.on_abandon = on_abandon
        self.cancels = Cancels(app.redis, clock, app.scripts)
        self.sql = SqlLeases()

    def beat(self, held: list[Running]) -> None:
        """Enforce timeouts and cancel requests, extend every held lease, renew the business
        locks."""
        now = self.clock()
        self._note_cancels(held, now)
        for r in held:
            if r.started_ms and not r.closed:
                self._check_timeout(r, now)
            if r.started_ms and not r.closed:
                self._check_cancel(r, now)
            if not r.closed and not r.lease_lost and _extend_due(r, now):
                self._extend(r)
            self._renew_lock(r)
            if r.reporter is not None and not r.closed:
                r.reporter.flush_due()  # a ctx.progress the rate limit held back

    def _max_runtime_ms(self, r: Running) -> int:
        spec = r.spec or self.app.handlers.get(r.job.type)
        return int((spec.max_runtime_s if spec else DEFAULT_MAX_RUNTIME_S) * 1000)

    # -- timeouts ------------------------------------------------------------------------------
    def _check_timeout(self, r: Running, now: int) -> None:
        """Past its timeout the handler is told (``ctx.cancelled``); a grace later (its hard
        timeout) ``HardTimeout`` is raised into its thread, and the job is settled as a
        timeout by that thread, through the ordinary failure path. A handler that cannot be
        interrupted (an async one, or a thread stuck in a C call for another grace) is
        abandoned: the job is settled from here and the process retires."""
        timeout_ms = int(r.job.timeout_s * 1000)
        ran_ms = now - r.started_ms
        if ran_ms >= timeout_ms and not r.soft_timed_out and r.ctx is not None:
            r.soft_timed_out = True
            r.stop_handler()
            log.warning("job %s passed its timeout of %gs; cancelled", r.job.id, r.job.timeout_s,
                        extra=job_fields(r.job, "soft_timeout", duration_ms=ran_ms))
        grace_ms = int(min(self.hard_grace_s, r.job.timeout_s) * 1000)
        if ran_ms < timeout_ms + grace_ms:
            return
        if r.interrupted_ms:
            if now - r.interrupted_ms >= grace_ms:
                self._abandon(r, ran_ms, now - r.interrupted_ms)
            return
        if not self._interrupt(r, now, ran_ms):
            self._abandon(r, ran_ms, None)

    def _interrupt(self, r: Running, now: int, ran_ms: int) -> bool:
        """Raise ``HardTimeout`` into a sync handler's thread while it runs (interrupt.py);
        False when there is none to interrupt."""
        if r.cancel_task is not None:  # an async handler: its task was cancelled already
            return False
        with r.handler_guard:
            if not r.in_handler:
                return False
            r.interrupt_error = (f"hard timeout after {ran_ms / 1000:g} s (its timeout is "
                                 f"{r.job.timeout_s:g} s): the handler was interrupted")
            if not raise_in(r.thread):
                return False
            r.interrupted_ms = now
        log.warning("hard timeout: job %s interrupted after %gs", r.job.id, ran_ms / 1000,
                    extra=job_fields(r.job, "hard_timeout", duration_ms=ran_ms,
                                     error_kind="timeout"))
        return True

    def _abandon(self, r: Running, ran_ms: int, interrupted_ms: int | None) -> None:
        """Hard timeout of a handler that could not be interrupted: settle the job as a
        timeout (fenced, spends an attempt); whatever its thread does later is dropped, and
        the process retires once its other jobs are done (``on_abandon``)."""
        why = ("it did not return to Python within %gs of its interrupt (a C call that does "
               "not return)" % (interrupted_ms / 1000) if interrupted_ms is not None
               else "it could not be interrupted")
        exc = JobTimeout(f"hard timeout after {ran_ms / 1000:g} s (its timeout is "
                         f"{r.job.timeout_s:g} s): {why}; the handler was abandoned and its "
                         "process retired")
        spec = r.spec or self.app.handlers.get(r.job.type)
        self.settler.settle(r, failure_outcome(r, spec.retry if spec else None, exc))
        r.closed = True
        self.on_abandon(r, "hard_timeout")
        log.error("hard timeout: job %s abandoned (%s); this process retires once its other "
                  "jobs are done", r.job.id, why,
                  extra=job_fields(r.job, "expired", duration_ms=ran_ms, error_kind="timeout"))

    # -- an operator's cancel request -----------------------------------------------------------
    def _note_cancels(self, held: list[Running], now: int) -> None:
        """Cancel requests of the jobs held (one HGETALL per queue, usually empty): the
        handler sees ``ctx.cancelled``; the grace period starts now."""
        queues = {r.queue.name for r in held if not r.closed and r.cancel is None}
        requests = {name: self.cancels.pending(name) for name in queues}
        for r in held:
            req = requests.get(r.queue.name, {}).get(r.job.id)
            if req is None or r.cancel is not None or r.closed:
                continue
            r.cancel, r.cancel_seen_ms = req, now
            if r.ctx is not None:  # started: ctx.cancelled, and an async handler's task
                r.stop_handler()   # is cancelled (it may ignore it: then the grace ends it)
            log.warning("job %s cancelled by %s; the handler has %gs to stop", r.job.id, req.by,
                        self._grace_s(r), extra=job_fields(r.job, "cancel_requested"))

    def _grace_s(self, r: Running) -> float:
        spec = r.spec or self.app.handlers.get(r.job.type)
        return spec.cancel_grace_s if spec is not None else 10.0

    def _check_cancel(self, r: Running, now: int) -> None:
        """Past the grace, a cancelled handler that has not returned is abandoned like a hard
        timeout: the job ends where the operator chose, the process retires."""
        req = r.cancel
        if req is None or now - r.cancel_seen_ms < self._grace_s(r) * 1000:
            return
        # no SQL here: the stuck handler may hold the database (a SQLite writer locks it all);
        # its idempotency record is told if it ever returns, else its lease runs out
        if not self.settler.settle(r, Cancelled(req.to, req.dlq_reason)):
            return  # the handler returned meanwhile and its runner settled the job
        r.closed = True
        log.error("cancelled job %s did not stop within %gs; abandoned, this process retires "
                  "once its other jobs are done", r.job.id, self._grace_s(r),
                  extra=job_fields(r.job, "cancel_abandoned", error_kind="cancelled"))
        self.on_abandon(r, "cancel_ignored")

    # -- the lease and what follows it -----------------------------------------------------------
    def _extend(self, r: Running) -> None:
        try:
            deadline = r.queue.extend(r.job.id, r.job.epoch, r.job.visibility_timeout_ms,
                                      mode="at_least",
                                      cap_ms=r.job.reserved_at + self._max_runtime_ms(r))
        except LeaseLost as exc:
            if r.closed:  # settled (acked) while we extended: not a loss
                return
            r.lease_lost = True
            r.stop_handler()
            self.settler.lease_lost(r.job, exc)
            return
        self._follow(r, deadline, sql_inline=False)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("lease extended to %d", deadline, extra=job_fields(r.job, "lease_extended"))

    def extend_by(self, r: Running, seconds: float) -> int:
        """``ctx.extend_lease``: now + seconds, capped by the handler's max runtime."""
        deadline = r.queue.extend(r.job.id, r.job.epoch, int(seconds * 1000), mode="from_now",
                                  cap_ms=r.job.reserved_at + self._max_runtime_ms(r))
        self._follow(r, deadline, sql_inline=True)
        return deadline

    def _follow(self, r: Running, deadline: int, *, sql_inline: bool) -> None:
        """The job's new lease deadline, for its flow-control slots and idempotency record
        (written by this thread when ``sql_inline``, the handler's own ``ctx.extend_lease``;
        the heartbeat's go to the ``SqlLeases`` thread)."""
        r.job.deadline = deadline
        admission = r.admission
        if admission is not None:
            quietly(lambda: admission.renew(deadline))
        if r.store is None:
            return
        if sql_inline:
            _extend_sql(r.store, r.job, deadline)
        else:
            self.sql.submit(r.store, r.job, deadline)

    def _renew_lock(self, r: Running) -> None:
        """Compare-and-expire the job's business lock every third of its TTL (a lock TTL must
        be longer than a heartbeat); a failed renewal marks it lost and the commit is refused."""
        lock = r.lock
        if lock is None or lock.lost or time.monotonic() - r.lock_renewed < lock.ttl_ms / 3000:
            return
        try:
            if self.locks.renew(lock):
                r.lock_renewed = time.monotonic()
        except redis.RedisError as exc:
            log.warning("could not renew lock %s: %s", lock.key, exc,
                        extra=job_fields(r.job, "lock_renew_failed"))


def _extend_due(r: Running, now: int) -> bool:
    """A lease with more than two thirds of its visibility timeout left is not extended yet: it
    cannot be lost before its deadline, and hundreds of async jobs in flight then cost no
    hundreds of round trips per heartbeat."""
    return r.job.deadline - now <= r.job.visibility_timeout_ms * 2 // 3
