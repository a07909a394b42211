"""Job execution in one process: M threads reserve, run and settle jobs; a heartbeat thread
extends leases, enforces timeouts and reports the process to the worker registry.

Every settlement (ack, retry, bury, snooze, hand-back) is one fenced Lua script in ``Queue``;
this module only decides which one. A job is never held only in memory: until its settlement
lands in Redis it stays in flight under its lease, and the sweeper returns it if we vanish.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from antre import (
    Antre,
    HandlerSpec,
    InvalidJob,
    JobContext,
    Permanent,
    RateLimited,
    JobTimeout,
    LeaseLost,
    LockBusy,
    Queue,
)
from antre.clock import Clock
from antre.envelope import Job
from antre.fencing import FenceRejected
from antre.flow import Admission, FlowControl, FlowPolicy
from antre.idempotency import fingerprint
from antre.locks import Lock, Locks
from antre.logs import job_fields
from antre.metrics import DurationBuffer
from antre.registry import WorkerInfo, WorkerRegistry
from antre.retry import Decision, classify, describe, format_traceback
from antre.tracing import execution_span

from .health import REDIS_DOWN, RedisHealth

log = logging.getLogger("antre.worker")

EXIT_RECYCLE = 3  # the process abandoned a hung handler; the supervisor starts a fresh one
PROMOTE_EVERY_S = 0.5
FAST_BATCH_S = 0.05  # a batch done this fast: reserve twice as many next time
SLOW_BATCH_S = 0.5  # a batch this slow: half as many
DEFAULT_PREFETCH = 16
IDLE_WAIT_S = 0.25  # longest an idle runner blocks on the wake list before looking again


def default_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:60]
    return f"{host or 'host'}:{os.getpid()}:{os.urandom(2).hex()}"


@dataclass
class Running:
    """A job this process holds a lease on (reserved, possibly not started yet)."""

    job: Job
    queue: Queue
    spec: HandlerSpec | None = None
    ctx: JobContext | None = None
    started_ms: int = 0  # 0 until the handler starts
    started_mono: float = 0.0
    thread: int = 0
    owns_idempotency: bool = False
    soft_timed_out: bool = False
    closed: bool = False  # settled, handed back or given up: nothing more may touch the lease
    lease_lost: bool = False
    admission: Admission | None = None  # flow-control slots held while the handler runs
    settle_lock: threading.Lock = field(default_factory=threading.Lock)
    lock: Lock | None = None  # the business lock held while the handler runs
    lock_renewed: float = 0.0  # monotonic time of the last renewal (the heartbeat renews)


class WorkerProcess:
    """Runs jobs of ``queues`` in ``threads`` threads of this process.

    ``run()`` blocks until ``stop()`` (or a hard timeout recycles the process) and returns the
    exit code (0, or ``EXIT_RECYCLE``). ``run_burst()`` returns once nothing is ready or in
    flight in its queues, with counts of what happened.
    """

    def __init__(self, app: Antre, *, queues: list[str] | None = None, threads: int = 1,
                 worker_id: str | None = None, supervisor_id: str = "",
                 clock: Clock | None = None, prefetch: int = DEFAULT_PREFETCH,
                 heartbeat_s: float = 1.0,
                 stop_grace_s: float = 30.0, hard_grace_s: float = 5.0) -> None:
        if threads < 1 or prefetch < 1:
            raise ValueError("threads and prefetch must be at least 1")
        self.app = app
        self.clock: Clock = clock or app.clock
        self.queue_names = list(queues or app.queues())
        self.queues = [Queue(app.redis, name, clock=self.clock, scripts=app.scripts,
                             max_payload_bytes=app.max_payload_bytes)
                       for name in self.queue_names]
        self.locks = Locks(app.redis, clock=self.clock, scripts=app.scripts)
        self.flow = FlowControl(app.redis, clock=self.clock)
        self.durations = DurationBuffer()  # written to Redis on each heartbeat
        self.registry = WorkerRegistry(app.redis, clock=self.clock)
        self.threads = threads
        self.worker_id = worker_id or default_worker_id()
        self.supervisor_id = supervisor_id
        self.prefetch = prefetch
        self.heartbeat_s = heartbeat_s
        self.stop_grace_s = stop_grace_s
        self.hard_grace_s = hard_grace_s
        self.exit_code = 0
        self.counts: Counter[str] = Counter()
        self.health = RedisHealth(app.redis_url)
        self._running: dict[str, Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._hb_stop = threading.Event()
        self._burst = False
        self._stop_requested = False
        self._stuck: set[int] = set()
        self._last_promote = 0.0
        self._runners: list[threading.Thread] = []
        self._local = threading.local()  # per runner thread: acks waiting for their batch
        self._info = WorkerInfo(id=self.worker_id, host=socket.gethostname(), pid=os.getpid(),
                                supervisor=supervisor_id, queues=self.queue_names,
                                threads=threads, kind="process")

    # -- lifecycle ---------------------------------------------------------------------------
    def run(self) -> int:
        self._start()
        while not self._stopping.is_set():
            self._poll_stop_request()
            time.sleep(0.05)
        self._finish()
        return self.exit_code

    def run_burst(self) -> dict[str, int]:
        self._burst = True
        self._start()
        for t in self._runners:
            while t.is_alive() and not self._stopping.is_set():
                self._poll_stop_request()
                t.join(0.05)
        self._finish()
        return dict(self.counts)

    def request_stop(self) -> None:
        """``stop()`` for signal handlers: only sets a flag that ``run()`` acts on (setting an
        ``Event`` inside a handler can deadlock with the interrupted thread's own wait)."""
        self._stop_requested = True

    def _poll_stop_request(self) -> None:
        if self._stop_requested:
            self.stop()

    def stop(self) -> None:
        """Graceful: stop reserving; running jobs get ``stop_grace_s`` to finish."""
        if not self._stopping.is_set():
            log.info("stopping: no new jobs; running jobs get %gs to finish", self.stop_grace_s,
                     extra={"event": "stopping", "worker_id": self.worker_id})
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def running_jobs(self) -> list[Job]:
        with self._lock:
            return [r.job for r in self._running.values()]

    def _start(self) -> None:
        self._info.started_at = self.clock()
        try:  # connect the SQL parts once, before the threads race to do it
            _ = self.app.idempotency
        except Exception as exc:
            log.error("database unavailable at start: %s; jobs wait until it is back", exc,
                      extra={"event": "database_down"})
        self._beat_quietly()
        self._runners = [threading.Thread(target=self._runner, args=(n,), daemon=True,
                                          name=f"antre-runner-{n}") for n in range(self.threads)]
        for t in self._runners:
            t.start()
        threading.Thread(target=self._heartbeat_loop, daemon=True, name="antre-heartbeat").start()

    def _finish(self) -> None:
        deadline = time.monotonic() + self.stop_grace_s
        for t in self._runners:
            if t.ident not in self._stuck:
                t.join(max(0.0, deadline - time.monotonic()))
        for r in self._held():
            self._hand_back(r, deadline + 5.0)
        self._hb_stop.set()
        self._info.state = "stopped"
        self._beat_quietly()
        log.info("worker stopped", extra={"event": "stopped", "worker_id": self.worker_id})

    def _held(self) -> list[Running]:
        with self._lock:
            return [r for r in self._running.values() if not r.closed and not r.lease_lost]

    def _hand_back(self, r: Running, give_up_at: float) -> None:
        with r.settle_lock:
            if r.closed or r.lease_lost:
                return
            r.closed = True  # whatever the handler does later is dropped
            if r.ctx is not None:
                r.ctx.cancelled.set()
            try:
                self.health.call(r.queue.hand_back, r.job, give_up_at=give_up_at)
            except LeaseLost as exc:
                self._lease_lost(r.job, exc)
                return
            except REDIS_DOWN:
                log.error("could not hand back job %s (redis unreachable); its lease will expire "
                          "and the sweeper returns it", r.job.id, extra=job_fields(r.job, "expired"))
                return
        self.counts["handed_back"] += 1
        log.info("handed back job %s (no attempt spent)", r.job.id,
                 extra=job_fields(r.job, "handed_back"))

    # -- the runner threads --------------------------------------------------------------------
    def _runner(self, n: int) -> None:
        rr, batch = n, 1
        while not self._stopping.is_set():
            try:
                got = self.health.call(self._reserve, rr, batch, stop=self._stopping)
            except REDIS_DOWN:
                return
            except Exception:
                log.exception("reserve failed", extra={"event": "error"})
                self._stopping.wait(1.0)
                continue
            rr += 1
            if got:
                started = time.monotonic()
                self._work(got)
                batch = self._next_batch(batch, len(got), time.monotonic() - started)
            elif self._burst and self._drained():
                return
            else:
                self._idle()

    def _next_batch(self, batch: int, got: int, took_s: float) -> int:
        """Adaptive prefetch: short jobs are reserved (and acked) in growing batches, up to
        ``prefetch``; slow ones one at a time, so a runner does not sit on jobs that idle
        workers elsewhere could start."""
        if got == batch and took_s < FAST_BATCH_S:
            return min(batch * 2, self.prefetch)
        if took_s > SLOW_BATCH_S:
            return max(1, batch // 2)
        return batch

    def _reserve(self, rr: int, batch: int = 1) -> list[Running]:
        n = len(self.queues)
        for i in range(n):
            q = self.queues[(rr + i) % n]
            jobs = q.reserve(self.worker_id, count=batch)
            if jobs:
                held = [Running(job, q) for job in jobs]
                with self._lock:
                    for r in held:
                        self._running[r.job.id] = r
                return held
        return []

    def _work(self, held: list[Running]) -> None:
        # a prefetched batch's successes are acked together when the batch is done
        self._local.acks = [] if len(held) > 1 else None
        try:
            self._work_each(held)
        finally:
            self._flush_release()
            self._flush_acks()

    def _work_each(self, held: list[Running]) -> None:
        for r in held:
            try:
                if self._stopping.is_set():
                    self._hand_back(r, time.monotonic() + self.stop_grace_s)
                else:
                    self._process(r)
            except Exception:
                log.exception("unexpected error while processing job %s; its lease will expire "
                              "and it will be delivered again", r.job.id,
                              extra=job_fields(r.job, "error"))
            finally:
                with self._lock:
                    self._running.pop(r.job.id, None)

    def _idle(self) -> None:
        now = time.monotonic()
        if now - self._last_promote >= PROMOTE_EVERY_S:
            self._last_promote = now
            try:
                for q in self.queues:
                    q.promote()
            except REDIS_DOWN as exc:
                self.health.failed(exc)
        try:  # woken by the enqueue or promote script's token, at once
            self.queues[0].wait_for_work(IDLE_WAIT_S, self.queues[1:])
        except REDIS_DOWN as exc:
            self.health.failed(exc)
            self._stopping.wait(IDLE_WAIT_S)

    def _drained(self) -> bool:
        """Burst mode's end: nothing ready (after promoting what is due) or in flight."""
        with self._lock:
            if self._running:
                return False
        try:
            for q in self.queues:
                q.promote()
            pipe = self.app.redis.pipeline(transaction=False)
            for q in self.queues:
                pipe.llen(q.keys.ready)
                pipe.zcard(q.keys.inflight)
            return not any(pipe.execute())
        except REDIS_DOWN as exc:
            self.health.failed(exc)
            return False

    # -- one job -------------------------------------------------------------------------------
    def _process(self, r: Running) -> None:
        job = r.job
        r.thread = threading.get_ident()
        log.info("received job %s", job.id, extra=job_fields(job, "received"))
        if not job.lock_key or job.payload_error or job.type not in self.app.handlers:
            self._flush_release()  # the previous job's lock goes now, not with a next acquire
        if job.payload_error:
            self._bury(r, f"payload cannot be decoded: {job.payload_error}", "malformed")
            return
        spec = self.app.handlers.get(job.type)
        if spec is None:
            names = ", ".join(sorted(self.app.handlers)) or "none"
            self._bury(r, f"no handler for job type {job.type!r} in this worker (registered: "
                          f"{names}); deploy a worker that has it, then replay", "unknown_type")
            return
        r.spec = spec
        if job.lock_key and self._already_completed(r):
            return
        lock = self._take_lock(r, spec) if job.lock_key else None
        if job.lock_key and lock is None:
            return
        try:
            if not self._admit(r, spec):
                return
            r.lock, r.lock_renewed = lock, time.monotonic()  # renewed by the heartbeat
            self._with_idempotency(r, spec, lock)
        finally:
            r.lock = None
            if r.admission is not None:
                self._quietly(r.admission.release)
            if lock is not None:
                self._release(lock)

    def _admit(self, r: Running, spec: HandlerSpec) -> bool:
        """Circuit breaker, concurrency slots and rate limit of the job type and its downstream.
        Held back: snoozed without spending an attempt."""
        downstream = self.app.downstreams.get(spec.downstream or "")
        if spec.flow is None and downstream is None:
            return True
        adm = self.health.call(self.flow.admit, f"{r.job.id}:{r.job.epoch}", r.job.deadline,
                               job_type=r.job.type, type_policy=spec.flow,
                               downstream=spec.downstream, downstream_policy=downstream)
        if adm.allowed:
            r.admission = adm
            return True
        self.counts[adm.reason] += 1
        log.info("held back: %s for %.2fs", adm.reason, adm.wait_s,
                 extra=job_fields(r.job, "held_back", error_kind=adm.reason))
        self._settle(r, "snoozed", r.queue.snooze, r.job, self._hold_ms(r, adm, downstream),
                     adm.reason, counter=adm.reason)
        return False

    def _hold_ms(self, r: Running, adm: Admission, downstream: FlowPolicy | None) -> int:
        """How long a held-back job waits. A slot usually frees when its job ends, not at its
        deadline. Behind a rate limit or an open breaker the waiting jobs are spread over the
        time the backlog needs at that rate (or over the cool-down), so they do not all come
        back at once and spin through reserve and snooze."""
        wait_s, spread_s = adm.wait_s, 0.25
        if adm.reason == "concurrency_limited":
            wait_s = min(wait_s, 1.0)
        elif downstream is not None:
            backlog = self.health.call(r.queue.redis.zcard, r.queue.keys.scheduled)
            spread_s = (backlog / downstream.rate_per_s if downstream.rate_per_s
                        else downstream.cooldown_s)
        return int((wait_s + random.uniform(0, min(max(spread_s, 0.25), 600.0))) * 1000)

    @staticmethod
    def _quietly(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except redis.RedisError as exc:  # slots and probes expire by themselves
            log.debug("flow control bookkeeping failed: %s", exc, extra={"event": "error"})

    @staticmethod
    def _report_flow(r: Running, exc: BaseException | None) -> None:
        """Tell the circuit breaker how the downstream did (rate limits and permanent errors
        say nothing about its health)."""
        adm = r.admission
        if adm is None or adm.breaker is None:
            return
        if exc is None:
            WorkerProcess._quietly(adm.succeeded)
        elif not isinstance(exc, (Permanent, RateLimited, LeaseLost)):
            WorkerProcess._quietly(adm.failed)

    def _already_completed(self, r: Running) -> bool:
        """A duplicate of work this process saw complete needs no business lock: answer it
        from the in-process cache before queueing up for the lock (everything else, duplicates
        completed elsewhere included, is decided by the store under the lock)."""
        store = self.app.idempotency
        if store is None or store.cache is None or not r.job.idempotency_key:
            return False
        record = store.cache.get(r.job.idempotency_key)
        if (record is None or record.status != "completed"
                or record.fingerprint != fingerprint(r.job.type, r.job.payload)):
            return False
        self._settle(r, "deduplicated", r.queue.ack, r.job, record.result, counter="deduplicated")
        return True

    def _take_lock(self, r: Running, spec: HandlerSpec) -> Lock | None:
        done, self._local.release = getattr(self._local, "release", None), None
        try:
            return self.health.call(self.locks.acquire, r.job.lock_key,
                                    ttl_ms=int(spec.lock_ttl_s * 1000), owner=self.worker_id,
                                    release=done)
        except LockBusy as exc:
            self.counts["lock_busy"] += 1
            log.info("lock busy: %s", exc, extra=job_fields(r.job, "lock_conflict"))
            self._settle(r, "snoozed", r.queue.snooze, r.job, random.randint(200, 1000),
                         "lock_busy", counter="lock_busy")
            return None

    def _release(self, lock: Lock) -> None:
        """Within a prefetched batch the release rides with the next job's acquire (one round
        trip for both); whatever is not taken that way goes before anything else runs."""
        if getattr(self._local, "acks", None) is not None:
            self._flush_release()
            self._local.release = lock
        else:
            self._release_now(lock)

    def _flush_release(self) -> None:
        lock, self._local.release = getattr(self._local, "release", None), None
        if lock is not None:
            self._release_now(lock)

    def _release_now(self, lock: Lock) -> None:
        try:
            self.locks.release(lock)
        except redis.RedisError:
            pass  # it expires by its TTL

    def _with_idempotency(self, r: Running, spec: HandlerSpec, lock: Lock | None) -> None:
        job = r.job
        try:
            store = self.app.idempotency
            begin = None
            if store is not None and job.idempotency_key:
                begin = store.begin(job.idempotency_key, fingerprint(job.type, job.payload),
                                    job.type, job.id, job.epoch, self.worker_id, job.deadline,
                                    lock_fence=lock.fence if lock else None)
        except InvalidJob as exc:
            self._bury(r, f"bad idempotency key: {exc}", "invalid")
            return
        except Exception as exc:  # the database is unreachable: wait, spend nothing
            log.error("idempotency store unavailable: %s; job snoozed", exc,
                      extra=job_fields(job, "snoozed", error_kind="database_unavailable"))
            self._settle(r, "snoozed", r.queue.snooze, job, random.randint(1000, 5000),
                         "database_unavailable")
            return
        if begin is None:
            self._run(r, spec, lock, None)
        else:
            self._on_begin(r, spec, lock, store, begin)

    def _on_begin(self, r: Running, spec: HandlerSpec, lock: Lock | None, store: Any,
                  begin: Any) -> None:
        job, outcome = r.job, begin.outcome
        if outcome in ("acquired", "taken_over"):
            if outcome == "taken_over":
                log.warning("took over idempotency key from a previous owner that did not finish",
                            extra=job_fields(job, "taken_over"))
            r.owns_idempotency = True
            self._run(r, spec, lock, store)
        elif outcome == "completed":
            result = begin.record.result if begin.record is not None else None
            self._settle(r, "deduplicated", r.queue.ack, job, result, counter="deduplicated")
        elif outcome == "busy":
            self._settle(r, "snoozed", r.queue.snooze, job, random.randint(800, 1200),
                         "idempotency_busy", counter="idempotency_busy")
        elif outcome == "mismatch":
            self._bury(r, "idempotency key reused with a different payload",
                       "idempotency_mismatch", spend_attempt=True)
        elif self._replayed_after_failure(job, begin.record) and store.reset(job.idempotency_key):
            log.info("replayed on purpose: the failed idempotency key was reset",
                     extra=job_fields(job, "replay_reset"))
            self._with_idempotency(r, spec, lock)
        else:
            self._bury(r, "idempotency key already failed permanently; replay the job from "
                          "the dead-letter queue to run it again", "idempotency_failed",
                       spend_attempt=True)

    @staticmethod
    def _replayed_after_failure(job: Job, record: Any) -> bool:
        """An operator replayed this job after its key failed: that is the on-purpose reset
        (DESIGN: 'failed permanently stays failed until a replay resets it')."""
        if not job.replayed_at or record is None or record.status != "failed":
            return False
        return job.replayed_at >= int(record.updated_at.timestamp() * 1000)

    def _run(self, r: Running, spec: HandlerSpec, lock: Lock | None, store: Any) -> None:
        job = r.job
        r.ctx = JobContext(job=job, worker_id=self.worker_id,
                           _db_factory=self.app.session_factory,
                           fence=lock.fence if lock else job.epoch, lock=lock,
                           last_checkpoint=job.checkpoint,
                           _extend=lambda seconds: self._extend_by(r, seconds),
                           _checkpoint=lambda state: r.queue.checkpoint(job, state))
        r.started_ms, r.started_mono = self.clock(), time.monotonic()
        log.info("started job %s", job.id, extra=job_fields(job, "started"))
        try:
            try:
                with execution_span(job):
                    result = spec.fn(r.ctx, job.payload)
            except Exception as exc:
                self._measure(r)
                self._report_flow(r, exc)
                self._rollback(r.ctx.opened_db)
                self._failed(r, spec, store, exc)
                return
            self._measure(r)
            self._report_flow(r, None)
            self._succeeded(r, spec, lock, store, result)
        finally:
            if r.ctx.opened_db is not None:
                r.ctx.opened_db.close()

    def _succeeded(self, r: Running, spec: HandlerSpec, lock: Lock | None, store: Any,
                   result: Any) -> None:
        job, db = r.job, r.ctx.opened_db if r.ctx else None  # None: the handler opened none
        if r.closed or r.lease_lost:
            self._rollback(db)
            log.warning("job %s finished after its lease was given up; outcome dropped", job.id,
                        extra=job_fields(job, "lease_lost", duration_ms=self._duration(r)))
            return
        if lock is not None and not lock.lost:
            try:
                self.locks.renew(lock)  # compare-and-expire: still ours for the commit, or lost
            except redis.RedisError:
                lock.lost = True
        if lock is not None and lock.lost:
            self._rollback(db)
            log.warning("lock %s was lost while the job ran; not committing", job.lock_key,
                        extra=job_fields(job, "lock_conflict"))
            self._settle(r, "snoozed", r.queue.snooze, job, random.randint(200, 1000), "lock_lost")
            return
        if db is not None or (store is not None and r.owns_idempotency):
            try:
                if db is not None and lock is not None and self.app.fences is not None:
                    # SQL effects under a business lock commit only with the newest token
                    self.app.fences.advance(db, lock.key, lock.fence)
                if store is not None and r.owns_idempotency:
                    store.complete(db, job.idempotency_key, job.epoch, result, job_id=job.id)
                if db is not None:
                    db.commit()
            except FenceRejected as exc:
                self._rollback(db)
                self._fence_rejected(r, exc)
                return
            except LeaseLost as exc:
                self._rollback(db)
                self._lease_lost(job, exc)
                return
            except Exception as exc:
                self._rollback(db)
                if getattr(exc, "connection_invalidated", False):
                    # the connection died under the commit: nothing of it counts as done (a
                    # commit that did land is seen as completed on the next delivery)
                    log.error("database connection lost while committing: %s; job snoozed",
                              exc, extra=job_fields(job, "snoozed",
                                                    error_kind="database_unavailable"))
                    self._settle(r, "snoozed", r.queue.snooze, job, random.randint(200, 1000),
                                 "database_unavailable")
                    return
                self._failed(r, spec, store, exc)
                return
        self._settle(r, "succeeded", r.queue.ack, job, result)

    def _fence_rejected(self, r: Running, exc: FenceRejected) -> None:
        """A newer holder of the lock committed first: nothing of this run counts. Retried
        without spending an attempt; if the Redis token counter had fallen behind SQL (a lost
        Redis), it is raised first so the next acquire can commit."""
        log.warning("%s; job snoozed", exc, extra=job_fields(r.job, "lock_conflict"))
        if exc.current is not None:
            try:
                self.locks.raise_fence(exc.lock_key, exc.current)
            except redis.RedisError:
                pass  # tried again on the next refusal
        self.counts["fence_rejected"] += 1
        self._settle(r, "snoozed", r.queue.snooze, r.job, random.randint(200, 1000),
                     "fence_rejected")

    def _failed(self, r: Running, spec: HandlerSpec, store: Any, exc: Exception) -> None:
        job = r.job
        if r.closed or r.lease_lost or isinstance(exc, LeaseLost):
            log.warning("job %s failed after its lease was given up (%s); outcome dropped",
                        job.id, describe(exc), extra=job_fields(job, "lease_lost"))
            return
        if isinstance(exc, JobTimeout) and self._stopping.is_set() and not r.soft_timed_out:
            self._hand_back(r, time.monotonic() + self.stop_grace_s)  # cancelled by shutdown
            return
        decision = classify(exc, attempt=job.attempt + 1, max_attempts=job.max_attempts,
                            policy=spec.retry)
        self._record_failure(r, store, describe(exc), decision.action == "dead")
        self._apply(r, decision, exc)

    def _apply(self, r: Running, decision: Decision, exc: BaseException) -> None:
        job, q = r.job, r.queue
        if decision.action == "snooze":
            self._settle(r, "snoozed", q.snooze, job, decision.delay_ms, decision.kind,
                         error_kind=decision.kind)
        elif decision.action == "retry":
            self._settle(r, "retried", q.retry, job, delay_ms=decision.delay_ms,
                         error=describe(exc), kind=decision.kind,
                         traceback=format_traceback(exc), error_kind=decision.kind)
        else:
            self._bury(r, decision.reason, decision.kind, error=describe(exc),
                       traceback=format_traceback(exc), spend_attempt=True)

    def _record_failure(self, r: Running, store: Any, error: str, permanent: bool) -> None:
        if store is None or not r.owns_idempotency:
            return
        try:
            store.fail(r.job.idempotency_key, r.job.epoch, error, permanent, job_id=r.job.id)
        except Exception as exc:
            log.error("could not record the failure in the idempotency store: %s", exc,
                      extra=job_fields(r.job, "error"))

    def _bury(self, r: Running, reason: str, kind: str, *, error: str = "", traceback: str = "",
              spend_attempt: bool = False) -> None:
        self._settle(r, "buried", r.queue.bury, r.job, reason=reason, error=error or reason,
                     kind=kind, traceback=traceback, spend_attempt=spend_attempt, error_kind=kind)

    def _settle(self, r: Running, event: str, fn: Callable[..., Any], *args: Any,
                error_kind: str = "", **kwargs: Any) -> bool:
        """One fenced transition, retried through a Redis outage (never given up: an outcome
        that did not land would be redone, never acked falsely)."""
        with r.settle_lock:
            if r.closed:
                return False
            acks = getattr(self._local, "acks", None)
            if acks is not None and event == "succeeded" and not kwargs:
                acks.append((r, args[1] if len(args) > 1 else None))  # acked with its batch
                r.closed = True
                return True
            try:
                self.health.call(fn, *args, **kwargs)
            except LeaseLost as exc:
                self._lease_lost(r.job, exc)
                return False
            r.closed = True  # settled: nothing else may touch this lease
        self._settled(r, event, error_kind)
        return True

    def _flush_acks(self) -> None:
        """Ack the successes of a prefetched batch in one round trip (each ack is still its own
        fenced script; a lease lost meanwhile is refused and logged, nothing else changes)."""
        pending, self._local.acks = getattr(self._local, "acks", None), None
        by_queue: dict[str, list[tuple[Running, Any]]] = {}
        for r, result in pending or ():
            by_queue.setdefault(r.queue.name, []).append((r, result))
        for done in by_queue.values():
            q = done[0][0].queue
            lost = {j.id for j in self.health.call(q.ack_many, [(r.job, res) for r, res in done])}
            for r, _ in done:
                if r.job.id in lost:
                    self._lease_lost(r.job, LeaseLost(f"job {r.job.id}: the lease changed before "
                                                      "its batched ack; nothing was changed"))
                else:
                    self._settled(r, "succeeded", "")

    def _settled(self, r: Running, event: str, error_kind: str) -> None:
        if event in ("succeeded", "deduplicated", "buried"):
            self.durations.add(r.job.queue, r.job.type, "latency",
                               self.clock() - r.job.created_at)
        self.counts[event] += 1
        if event in ("succeeded", "deduplicated"):
            self.counts["processed"] += 1
        elif event in ("retried", "buried"):
            self.counts["failed"] += 1
        level = logging.WARNING if event in ("retried", "buried") else logging.INFO
        log.log(level, "%s job %s", event, r.job.id,
                extra=job_fields(r.job, event, duration_ms=self._duration(r), error_kind=error_kind))

    def _lease_lost(self, job: Job, exc: BaseException) -> None:
        self.counts["lease_lost"] += 1
        log.warning("lease lost: %s", exc, extra=job_fields(job, "lease_lost"))

    @staticmethod
    def _rollback(db: Any) -> None:
        if db is None:
            return
        try:
            db.rollback()
        except Exception:
            log.exception("rollback failed", extra={"event": "error"})

    def _measure(self, r: Running) -> None:
        self.durations.add(r.job.queue, r.job.type, "processing", self._duration(r) or 0)

    @staticmethod
    def _duration(r: Running) -> int | None:
        return int((time.monotonic() - r.started_mono) * 1000) if r.started_mono else None

    # -- heartbeat: leases, timeouts, registry ---------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._hb_stop.wait(self.heartbeat_s):
            try:
                self.heartbeat_once()
            except REDIS_DOWN as exc:
                self.health.failed(exc)
            except Exception:
                log.exception("heartbeat failed", extra={"event": "error"})

    def heartbeat_once(self) -> None:
        """Enforce timeouts, extend every held lease, report to the registry."""
        now = self.clock()
        with self._lock:
            held = list(self._running.values())
        for r in held:
            if r.started_ms and not r.closed:
                self._check_timeout(r, now)
            if not r.closed and not r.lease_lost:
                self._extend(r)
            self._renew_lock(r)
        self._beat()

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

    def _check_timeout(self, r: Running, now: int) -> None:
        timeout_ms = int(r.job.timeout_s * 1000)
        ran_ms = now - r.started_ms
        if ran_ms >= timeout_ms and not r.soft_timed_out and r.ctx is not None:
            r.soft_timed_out = True
            r.ctx.cancelled.set()
            log.warning("job %s passed its timeout of %gs; cancelled", r.job.id, r.job.timeout_s,
                        extra=job_fields(r.job, "soft_timeout", duration_ms=ran_ms))
        if ran_ms >= timeout_ms + int(min(self.hard_grace_s, r.job.timeout_s) * 1000):
            self._abandon(r, ran_ms)

    def _abandon(self, r: Running, ran_ms: int) -> None:
        """Hard timeout: settle the job as a timeout (fenced, spends an attempt), drop whatever
        its thread does later, and recycle this process."""
        exc = JobTimeout(f"ran {ran_ms} ms, past its timeout of {r.job.timeout_s:g}s; "
                         "the handler was abandoned and its process recycled")
        spec = r.spec or self.app.handlers.get(r.job.type)
        policy = spec.retry if spec else None
        decision = classify(exc, attempt=r.job.attempt + 1, max_attempts=r.job.max_attempts,
                            policy=policy) if policy else Decision("retry", 0, True, "timeout", "")
        self._stuck.add(r.thread)
        self.exit_code = EXIT_RECYCLE
        self._record_failure(r, self.app.idempotency, describe(exc),
                             decision.action == "dead")
        self._apply(r, decision, exc)
        r.closed = True
        log.error("hard timeout: job %s abandoned; recycling this process", r.job.id,
                  extra=job_fields(r.job, "expired", duration_ms=ran_ms, error_kind="timeout"))
        self.stop()

    def _extend(self, r: Running) -> None:
        spec = r.spec or self.app.handlers.get(r.job.type)
        max_runtime_ms = int((spec.max_runtime_s if spec else 3600.0) * 1000)
        try:
            deadline = r.queue.extend(r.job.id, r.job.epoch, r.job.visibility_timeout_ms,
                                      mode="at_least", cap_ms=r.job.reserved_at + max_runtime_ms)
        except LeaseLost as exc:
            r.lease_lost = True
            if r.ctx is not None:
                r.ctx.cancelled.set()
            self._lease_lost(r.job, exc)
            return
        r.job.deadline = deadline
        if r.admission is not None:
            self._quietly(lambda: r.admission.renew(deadline) if r.admission else None)
        log.debug("lease extended to %d", deadline, extra=job_fields(r.job, "lease_extended"))
        self._extend_idempotency(r, deadline)

    def _extend_idempotency(self, r: Running, deadline: int) -> None:
        """The idempotency record's owner lease follows the Redis lease."""
        store = self.app.idempotency
        if store is not None and r.owns_idempotency:
            try:
                store.extend_lease(r.job.idempotency_key, r.job.epoch, deadline, job_id=r.job.id)
            except Exception as exc:
                log.error("could not extend the idempotency lease: %s", exc,
                          extra=job_fields(r.job, "error"))

    def _extend_by(self, r: Running, seconds: float) -> int:
        """``ctx.extend_lease``: now + seconds, capped by the handler's max runtime."""
        spec = r.spec or self.app.handlers.get(r.job.type)
        cap = r.job.reserved_at + int((spec.max_runtime_s if spec else 3600.0) * 1000)
        deadline = r.queue.extend(r.job.id, r.job.epoch, int(seconds * 1000), mode="from_now",
                                  cap_ms=cap)
        r.job.deadline = deadline
        if r.admission is not None:
            self._quietly(lambda: r.admission.renew(deadline) if r.admission else None)
        self._extend_idempotency(r, deadline)
        return deadline

    def _beat(self) -> None:
        info = self._info
        info.current = [j.id for j in self.running_jobs()]
        info.processed = self.counts["processed"]
        info.failed = self.counts["failed"]
        if self._stopping.is_set() and info.state == "running":
            info.state = "stopping"
        self.registry.beat(info)
        self.durations.flush(self.app.redis)
        self.health.ok()

    def _beat_quietly(self) -> None:
        try:
            self._beat()
        except REDIS_DOWN as exc:
            self.health.failed(exc)
