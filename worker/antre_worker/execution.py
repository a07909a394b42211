"""The pipeline's last step: run the handler, then commit or classify its failure.

``Execution.run(r)`` always returns an outcome. Success: the handler's SQL writes, the lock's
fencing token and the idempotency completion are one transaction, committed only while the
business lock is still held (``Ack``); a lost lock, a newer token or a database that dropped
under the commit snooze the job, and nothing of the run counts. Failure: the retry policy
decides (``Retry`` / ``Snooze`` / ``Bury``, see failures.py). A result or failure that arrives
after the lease was given up is dropped (``DropStale``). Within a prefetched batch, a success
that wrote nothing through ``ctx.db`` has its completion recorded with the batch's other
successes, in one commit before their batched ack (settle.py); whether its lock was held to the
end is then told by the lock's release (its compare-and-delete reply), not a renewal. A
success that wrote through ``ctx.db`` in a batch of several jobs commits with the batch's
other writers: its effects, fence and completion in a SAVEPOINT of one shared transaction
(transaction.py), committed once before their acks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

import redis

from antre import Antre, JobContext, JobTimeout, LeaseLost, Permanent, RateLimited, settings
from antre.clock import Clock
from antre.stores.fencing import FenceRejected
from antre.stores.idempotency import Completed, IdempotencyStore
from antre.engine.locks import Lock, Locks
from antre.engine.scripts import Call, direct, direct_ok
from antre.engine.queue import ResultJSON, encode_result
from antre.flows.read import inputs as flow_inputs
from antre.flows.store import result_max
from antre.observe import joblog
from antre.observe.logs import job_fields
from antre.observe.metrics import DurationBuffer
from antre.engine.retry import describe
from antre.observe.tracing import run_in_execution_span

from . import hooked
from .failures import cancelled, failure_outcome
from .held import Running
from .interrupt import HardTimeout, clear_pending
from .leases import Leases, quietly
from .progress import Reporter
from .outcomes import (ACKED, Ack, Bury, Completion, DropStale, HandBack, Outcome, Snooze,
                       jitter_ms, lock_lost)
from .settle import duration_ms
from .transaction import Alone, BatchTransaction, commit_window_ms

log = logging.getLogger("antre.worker")


class Execution:
    """Runs handlers for one ``WorkerProcess``; ``stopping`` is its shutdown flag."""

    def __init__(self, app: Antre, locks: Locks, leases: Leases, clock: Clock,
                 durations: DurationBuffer, *, worker_id: str, stopping: threading.Event,
                 stop_grace_s: float, batching: Callable[[], bool] = lambda: False) -> None:
        self.app = app
        self.locks = locks
        self.leases = leases
        self.clock = clock
        self.durations = durations
        self.worker_id = worker_id
        self.stopping = stopping
        self.stop_grace_s = stop_grace_s
        self.batching = batching  # this thread's acks wait for their batch (Settler.batching)
        # a job's own log: lines and bytes kept per delivery (read once, at start)
        self.log_bounds = (settings.JOB_LOG_LINES.get(), settings.JOB_LOG_BYTES.get())
        self.window_ms = commit_window_ms()  # 0: each ctx.db writer commits on its own
        self.alone = Alone()  # jobs whose batch's commit failed: alone next time
        self._local = threading.local()  # per runner thread: its batch's shared transaction

    # -- the batch's shared transaction (transaction.py) -------------------------------------
    def begin_batch(self, several: bool) -> None:
        """This thread works through a prefetched batch: with ``several`` jobs, their ctx.db
        writers share one transaction, each in a savepoint."""
        self.finish_transaction()
        self._local.shared = several and self.window_ms > 0 and self._sharable()

    def end_batch(self) -> None:
        """The batch's jobs have run: commit their transaction (before their acks)."""
        self.finish_transaction()
        self._local.shared = False

    def finish_transaction(self) -> None:
        """Commit this thread's open transaction now (a no-op when there is none)."""
        tx: BatchTransaction | None = getattr(self._local, "tx", None)
        if tx is not None:
            self._local.tx = None
            tx.finish()

    def holds(self, *, key: str = "", lock_key: str = "") -> bool:
        """Whether this thread's open transaction completed ``key`` or holds ``lock_key``'s lock
        (a job of that key must wait for its commit: ``finish_transaction`` first)."""
        tx: BatchTransaction | None = getattr(self._local, "tx", None)
        return tx is not None and ((bool(key) and key in tx.keys)
                                   or (bool(lock_key) and lock_key in tx.lock_keys))

    def before_own_write(self) -> None:
        """This thread's statements outside its open transaction (a claim, a failure's
        record) go on another connection and may wait for a row another transaction holds;
        its own transaction is committed first, so a thread never waits while it holds one
        (two threads or processes would otherwise wait for each other's transaction, a cycle
        the database cannot see; SQLite, one writer at a time, would wait for this thread's
        own)."""
        if getattr(self._local, "tx", None) is not None:
            self.finish_transaction()

    def _sharable(self) -> bool:
        parts = self.app.session_factory
        if parts is None:
            return False
        engine = parts.kw.get("bind")
        # an in-memory SQLite database is one connection for every thread: no own transaction
        return engine is not None and type(engine.pool).__name__ != "StaticPool"

    def _joins(self, r: Running) -> bool:
        spec = r.spec
        return (bool(getattr(self._local, "shared", False)) and spec is not None
                and not spec.is_async and r.job.id not in self.alone)

    def _savepoint(self, r: Running) -> Any:
        """``ctx.db`` of a job that shares its batch's transaction: the shared session, in a
        savepoint begun for it."""
        tx: BatchTransaction | None = getattr(self._local, "tx", None)
        if tx is None:
            factory = self.app.session_factory
            assert factory is not None
            tx = self._local.tx = BatchTransaction(factory, self._release_locks,
                                                   self._renew_locks, self.clock,
                                                   self.window_ms, self.alone)
        return tx.savepoint(r)

    def _renew_locks(self, locks: list[Lock]) -> None:
        """Compare-and-expire the transaction's locks in one round trip (one at a time on a
        cluster): a lock no longer ours is marked lost, and nothing of the batch commits."""
        try:
            if direct_ok(self.locks.redis):
                calls = [self.locks.renew_call(lock) for lock in locks]
                for lock, ok in zip(locks, direct(self.locks.redis, calls)):
                    if not int(ok):
                        lock.lost = True
                return
            for lock in locks:
                self.locks.renew(lock)
        except redis.RedisError:
            for lock in locks:
                lock.lost = True  # not known to be held: nothing commits

    def _release_locks(self, locks: list[Lock]) -> None:
        """The transaction's locks, released in one round trip after its commit (one at a
        time on a cluster); a lock not released expires by its TTL."""
        calls = [self.locks.release_call(lock) for lock in locks]
        try:
            if direct_ok(self.locks.redis) and all(c is not None for c in calls):
                for lock, held in zip(locks, direct(self.locks.redis, cast(list[Call], calls))):
                    if not int(held):
                        lock.lost = True
                return
            for lock in locks:
                self.locks.release(lock)
        except redis.RedisError:
            for lock in locks:
                lock.lost = True

    def undo(self, r: Running) -> None:
        """Nothing of the run commits: its savepoint, or its own transaction, rolled back."""
        if r.tx is not None:  # its ctx.db is the batch's shared session
            r.tx.rollback(r)
            return
        _rollback(r.ctx.opened_db if r.ctx else None)

    def run(self, r: Running) -> Outcome:
        """Step: run the handler (its timeouts are the heartbeat's, leases.py)."""
        assert r.spec is not None  # set by the envelope step
        ctx = self._start(r)
        try:
            token = joblog.enter(r.own_log)  # its handler's logging records: its own log
            try:
                result = _call(r, ctx)
            finally:
                joblog.leave(token)
        except Exception as exc:
            _last_progress(r)
            self._measure(r)
            _report_flow(r, exc)
            self.undo(r)
            return self._cancelled(r) if r.cancel is not None else self.failed(r, exc)
        _last_progress(r)
        self._measure(r)
        _report_flow(r, None)
        if r.cancel is not None:  # cancelled while it ran: nothing of the run commits
            self.undo(r)
            return self._cancelled(r)
        return self.complete(r, result)

    # -- async handlers (aio.py): the same step, split at the await --------------------------
    def begin(self, r: Running) -> Coroutine[Any, Any, Any]:
        """Step, for an ``async def`` handler: its coroutine, to run on the worker's loop;
        ``end`` turns how it ended into the outcome ``run`` would have returned."""
        assert r.spec is not None  # set by the envelope step
        coro: Coroutine[Any, Any, Any] = r.spec.fn(self._start(r), r.job.payload)
        return coro  # (its task runs with the job's log current: aio.py)

    def end(self, r: Running, result: Any, exc: BaseException | None) -> Outcome:
        _last_progress(r)
        self._measure(r)
        if r.cancel is not None:  # cancelled while it ran (its task too): nothing commits
            _report_flow(r, None if exc is None else _as_failure(r, exc))
            self.undo(r)
            return self._cancelled(r)
        if exc is None:
            _report_flow(r, None)
            return self.complete(r, result)
        failure = _as_failure(r, exc)
        _report_flow(r, failure)
        self.undo(r)
        return self.failed(r, failure)

    def _start(self, r: Running) -> JobContext:
        """The handler's context (``r.ctx``), its start noted, the app's ``before_job`` hooks
        told."""
        r.ctx = ctx = self._context(r)
        if self.app.hooks.before_job:
            hooked.started(self.app.hooks, r)
        r.started_ms, r.started_mono = self.clock(), time.monotonic()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("started job %s", r.job.id, extra=job_fields(r.job, "started"))
        return ctx

    def _context(self, r: Running) -> JobContext:
        job, lock = r.job, r.lock
        r.reporter = Reporter(r)
        r.own_log = joblog.JobLog(job.attempt + 1, self.clock, *self.log_bounds)
        factory = ((lambda: self._savepoint(r)) if self._joins(r)
                   else self.app.session_factory)
        return JobContext(job=job, worker_id=self.worker_id, _db_factory=factory,
                          fence=lock.fence if lock else job.epoch, lock=lock,
                          last_checkpoint=job.checkpoint,
                          _extend=lambda seconds: self.leases.extend_by(r, seconds),
                          _checkpoint=lambda state: r.queue.checkpoint(job, state),
                          _progress=r.reporter.report,
                          _flow_inputs=lambda: flow_inputs(r.queue, job.id),
                          _log=r.own_log)

    def _measure(self, r: Running) -> None:
        self.durations.add(r.job.queue, r.job.type, "processing", duration_ms(r) or 0)

    def _cancelled(self, r: Running) -> Outcome:
        self.before_own_write()
        return cancelled(r)

    def failed(self, r: Running, exc: Exception) -> Outcome:
        self.before_own_write()
        if self.app.hooks.on_retry or self.app.hooks.on_dead:  # they are told of it
            r.error = exc  # (only then: it holds the handler's frames, and they hold ``r``)
        if r.closed or r.lease_lost or isinstance(exc, LeaseLost):
            return DropStale(f"failed after its lease was given up ({describe(exc)})")
        if isinstance(exc, JobTimeout) and self.stopping.is_set() and not r.soft_timed_out:
            return HandBack(time.monotonic() + self.stop_grace_s)  # cancelled by shutdown
        assert r.spec is not None
        return failure_outcome(r, r.spec.retry, exc)

    def complete(self, r: Running, result: Any) -> Outcome:
        """Commit the run's effects (only while its lock is held), then ``Ack``.

        Within a prefetched batch, a job that wrote nothing through ``ctx.db`` leaves its
        idempotency completion to the batch: ``Ack`` with a ``Completion``, recorded for all
        the batch's successes in one commit right before their batched ack, once the release
        of each one's lock said it was still held when the job ended (settle.py)."""
        db = r.ctx.opened_db if r.ctx else None  # None: the handler opened none
        if r.closed or r.lease_lost:
            self.undo(r)
            return DropStale("finished after its lease was given up")
        refused, encoded = self._result_refused(result, flow=bool(r.job.flow))
        if refused is not None:
            self.undo(r)
            return refused
        if db is None and r.store is not None and self.batching() and not r.lock_checked_at_ack:
            # (a hand-over's job commits here, under a renewed lock, and is acked plainly)
            return self._deferred(r, r.store, result)
        # (a job in its batch's transaction: its lock is renewed with the others' before the
        # commit, transaction.py)
        lock_lost = self._lock_lost(r, (db is None and r.store is None and r.lock_checked_at_ack)
                                    or r.savepoint is not None)
        if lock_lost is not None:
            self.undo(r)
            return lock_lost
        if db is None and r.store is None:  # (encoded once: the ack stores that text)
            return ACKED if result is None else Ack(result if encoded is None else encoded)
        if r.savepoint is not None:
            return self._release_savepoint(r, db, result)
        try:
            self._commit(r, db, result)
        except Exception as exc:
            _rollback(db)
            return self._commit_failed(r, exc)
        return Ack(result)

    def _release_savepoint(self, r: Running, db: Any, result: Any) -> Outcome:
        """Fence and completion in the job's savepoint, released into the batch's transaction;
        acked once that commits (``Ack.transaction``: settle.py). The window passed since its
        first write: committed now."""
        tx: BatchTransaction = r.tx
        try:
            # on the session's connection: the same transaction, without the ORM's work per
            # statement (the handler's pending objects are flushed as the savepoint is released)
            self._fence_and_complete(r, db.connection(), result)
            tx.release(r)
        except Exception as exc:
            tx.rollback(r)
            return self._commit_failed(r, exc)
        if tx.due():
            self.finish_transaction()
        return Ack(result, transaction=tx)

    def _result_refused(self, result: Any, flow: bool = False
                        ) -> tuple[Bury | None, ResultJSON | None]:
        """A result is kept like a payload (on the job, in its idempotency record), so it is
        bounded like one: over the payload limit, or nested past what can be encoded, the
        job goes to the DLQ (permanent: every retry would return it again), and nothing of
        the run is committed. A job of a flow hands its result to the jobs after it: at most
        ``ANTRE_FLOW_RESULT_MAX`` (64 KiB) then. Else (None, the result's text as the ack
        stores it when it had to be encoded to be measured: encoded once)."""
        if result is None or type(result) in (bool, int, float):
            return None, None
        limit = self.app.max_payload_bytes
        if flow:
            limit = min(limit, result_max())
        if type(result) is str and len(result) * 6 + 2 <= limit:
            return None, None
        try:
            text = encode_result(result)
            size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        except RecursionError:
            return Bury("handler result is nested too deeply to store; return a flatter "
                        "value", "result_invalid"), None
        except (TypeError, ValueError):
            return None, None  # the store's check_result, or the ack's encoder, says why
        if size <= limit:
            return None, ResultJSON(text)
        raise_ = "ANTRE_FLOW_RESULT_MAX (a job of a flow)" if flow and limit == result_max() \
            else "ANTRE_MAX_PAYLOAD_BYTES"
        return Bury(f"handler result is {size} bytes, over the limit of {limit} bytes; store "
                    f"large data elsewhere and return a reference, or raise {raise_}",
                    "result_too_large"), None

    def _deferred(self, r: Running, store: IdempotencyStore, result: Any) -> Outcome:
        if r.lock is not None and r.lock.lost:  # the heartbeat's renewal found it gone
            return lock_lost(r.job.lock_key)
        try:
            store.check_result(result)
        except Exception as exc:
            return self.failed(r, exc)
        job = r.job
        return Ack(result, completion=Completion(
            store, Completed(job.idempotency_key, job.epoch, job.id, result,
                             r.lock.fence if r.lock is not None else None), r.lock))

    def _lock_lost(self, r: Running, checked_at_ack: bool = False) -> Snooze | None:
        """Compare-and-expire the lock once more: still ours for the commit, or lost.
        ``checked_at_ack``: nothing to commit, and the ack's hand-over checks the lock itself
        (runner.py): no renewal, only what the heartbeat found."""
        lock = r.lock
        if lock is None:
            return None
        if not lock.lost and not checked_at_ack:
            try:
                self.locks.renew(lock)
            except redis.RedisError:
                lock.lost = True
        if not lock.lost:
            return None
        return lock_lost(r.job.lock_key)

    def _commit(self, r: Running, db: Any, result: Any) -> None:
        self._fence_and_complete(r, db, result)
        if db is not None:
            db.commit()

    def _fence_and_complete(self, r: Running, db: Any, result: Any) -> None:
        lock, job = r.lock, r.job
        if db is not None and lock is not None and self.app.fences is not None:
            # SQL effects under a business lock commit only with the newest token
            self.app.fences.advance(db, lock.key, lock.fence)
        if r.store is not None:
            r.store.complete(db, job.idempotency_key, job.epoch, result, job_id=job.id)

    def _commit_failed(self, r: Running, exc: Exception) -> Outcome:
        if isinstance(exc, FenceRejected):
            return self._fence_rejected(exc)
        if isinstance(exc, LeaseLost):
            return DropStale(str(exc), newly_lost=True)
        if getattr(exc, "connection_invalidated", False):
            # the connection died under the commit: nothing of it counts as done (a commit
            # that did land is seen as completed on the next delivery)
            return Snooze(jitter_ms(200, 1000), "database_unavailable", level=logging.ERROR,
                          note=f"database connection lost while committing: {exc}")
        return self.failed(r, exc)

    def _fence_rejected(self, exc: FenceRejected) -> Snooze:
        """A newer holder of the lock committed first: nothing of this run counts. Retried
        without spending an attempt; if the Redis token counter had fallen behind SQL (a lost
        Redis), it is raised first so the next acquire can commit."""
        if exc.current is not None:
            try:
                self.locks.raise_fence(exc.lock_key, exc.current)
            except redis.RedisError:
                pass  # tried again on the next refusal
        return Snooze(jitter_ms(200, 1000), "fence_rejected", counter="fence_rejected",
                      count_as="fence_rejected", level=logging.WARNING, note=str(exc),
                      details={"lock": exc.lock_key, "fence": exc.fence,
                               "committed_fence": exc.current})


def _call(r: Running, ctx: JobContext) -> Any:
    """The sync handler, in this thread; a hard timeout's ``HardTimeout`` raised into it comes
    out as a ``JobTimeout`` saying how long it ran (interrupt.py: the guard's protocol)."""
    r.thread = threading.get_ident()
    try:
        return run_in_execution_span(r.job, _handler, r, ctx)
    except HardTimeout:
        r.in_handler = False
        raise JobTimeout(r.interrupt_error or "hard timeout") from None


def _handler(r: Running, ctx: JobContext) -> Any:
    """The handler itself, the only stretch a ``HardTimeout`` may be raised into: inside the
    execution span, whose trace context is then restored on the way out as after any error
    (raised while the span's context was made current or put back, it would leave the job's
    trace current on this thread for the jobs after it)."""
    assert r.spec is not None
    r.in_handler = True
    try:
        return r.spec.fn(ctx, r.job.payload)
    finally:
        with r.handler_guard:
            r.in_handler = False
            if r.interrupted_ms:
                clear_pending()  # it returned before the exception was raised


def _as_failure(r: Running, exc: BaseException) -> Exception:
    """How an async handler ended, as the exception a sync one would have raised: a task
    cancelled by the soft timeout, a lost lease or shutdown is a ``JobTimeout``."""
    if isinstance(exc, asyncio.CancelledError):
        why = ("it ran past its timeout of %gs" % r.job.timeout_s if r.soft_timed_out
               else "its lease was lost" if r.lease_lost else "the worker is shutting down")
        return JobTimeout(f"the async handler was cancelled: {why}")
    if isinstance(exc, Exception):
        return exc
    return RuntimeError(f"the async handler raised {exc!r}")


def _last_progress(r: Running) -> None:
    """The handler's last ``ctx.progress`` held back by the rate limit, written before its job
    is settled (nothing when it wrote none, or its last one is written)."""
    if r.reporter is not None:
        r.reporter.flush()


def _rollback(db: Any) -> None:
    if db is None:
        return
    try:
        db.rollback()
    except Exception:
        log.exception("rollback failed", extra={"event": "error"})


def _report_flow(r: Running, exc: BaseException | None) -> None:
    """Tell the circuit breaker how the downstream did (rate limits and permanent errors say
    nothing about its health)."""
    adm = r.admission
    if adm is None or adm.breaker is None:
        return
    if exc is None:
        quietly(adm.succeeded)
    elif not isinstance(exc, (Permanent, RateLimited, LeaseLost)):
        quietly(adm.failed)
