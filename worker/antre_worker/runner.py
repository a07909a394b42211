"""``WorkerProcess``: job execution in one process. M runner threads reserve jobs (in adaptive
batches), hand each to the per-job pipeline (pipeline.py) and ack a batch's successes together;
a heartbeat thread keeps the leases (leases.py) and reports the process to the worker registry.

Every settlement (ack, retry, bury, snooze, hand-back) is one fenced Lua script in ``Queue``,
applied by ``Settler.settle`` (settle.py). A job is never held only in memory: until its
settlement lands in Redis it stays in flight under its lease, and the sweeper returns it if we
vanish. Due scheduled jobs (delayed, retried, snoozed) are promoted by the runners
(promotion.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from typing import Any

import redis

from antre import Antre, Queue, settings
from antre.clock import Clock
from antre.engine.envelope import Job
from antre.limits.admission import Limits
from antre.limits.gates import Declaration, Gates, plan
from antre.engine.locks import Lock, Locks
from antre.observe.logs import job_fields
from antre.observe import otel_metrics
from antre.observe.metrics import DurationBuffer
from antre.observe.registry import WorkerInfo, WorkerRegistry
from antre.observe.tracing import execution_span

from .aio import AsyncJobs, AsyncStart, BlockReporter
from .execution import Execution
from .health import EXIT_REDIS_GONE, REDIS_DOWN, RedisHealth
from .held import Running
from .leases import Leases
from .outcomes import HandBack
from .pipeline import Pipeline
from .promotion import Promoter
from .settle import Settler, timeline_note

log = logging.getLogger("antre.worker")

EXIT_RECYCLE = 3  # the process retired after abandoning a hung handler; the supervisor starts
#                  a fresh one
FAST_BATCH_S = 0.05  # a batch done this fast: reserve twice as many next time
SLOW_BATCH_S = 0.5  # a batch this slow: half as many
DEFAULT_PREFETCH = 16
IDLE_WAIT_S = 0.25  # longest an idle runner blocks on the wake list before looking again
DEFAULT_CONCURRENCY = 100  # async jobs at once per process when the app has async handlers
ASYNC_BATCH = 64  # a runner with async slots free reserves up to this many at once
ASYNC_MIN_BATCH = 16  # ... and waits until at least this many are free
DECLARE_EVERY_MS = 10_000  # how often a process writes its queues' flow gates again
BURST_REDIS_WAIT_S = settings.BURST_REDIS_WAIT_S.default  # --burst gives up after this outage


def default_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:60]
    return f"{host or 'host'}:{os.getpid()}:{os.urandom(2).hex()}"


class WorkerProcess:
    """Runs jobs of ``queues`` in ``threads`` threads of this process.

    ``run()`` blocks until ``stop()`` (or the process retires: a handler it could not stop,
    ``_abandoned``) and returns the exit code (0, or ``EXIT_RECYCLE``). ``run_burst()`` returns once nothing is ready or in
    flight in its queues, with counts of what happened.
    """

    def __init__(self, app: Antre, *, queues: list[str] | None = None, threads: int = 1,
                 worker_id: str | None = None, supervisor_id: str = "",
                 clock: Clock | None = None, prefetch: int = DEFAULT_PREFETCH,
                 heartbeat_s: float = 1.0,
                 stop_grace_s: float = 30.0, hard_grace_s: float = 5.0,
                 concurrency: int | None = None,
                 burst_redis_wait_s: float | None = None) -> None:
        if threads < 1 or prefetch < 1:
            raise ValueError("threads and prefetch must be at least 1")
        self.app = app
        self.clock: Clock = clock or app.clock
        self.queue_names = list(queues or app.queues())
        # every partition of every queue served: read again at each heartbeat,
        # so a grown queue's new partitions are served from the next one
        self._made: dict[tuple[str, int], Queue] = {}
        try:
            self.queues: list[Queue] = self._partition_queues()
        except REDIS_DOWN:  # the first heartbeat reads the partitions
            self.queues = [self._queue(name, 0) for name in self.queue_names]
        self.threads = threads
        self.worker_id = worker_id or default_worker_id()
        self.prefetch = prefetch
        self.heartbeat_s = heartbeat_s
        self.stop_grace_s = stop_grace_s
        self.burst_redis_wait_s = (burst_redis_wait_s if burst_redis_wait_s is not None
                                   else settings.BURST_REDIS_WAIT_S.get())
        self.exit_code = 0
        self.counts: Counter[str] = Counter()
        # written to Redis on each heartbeat; also OpenTelemetry histograms when configured
        self.durations = DurationBuffer(also=otel_metrics.record_duration
                                        if otel_metrics.AVAILABLE else None)
        self.registry = WorkerRegistry(app.redis, clock=self.clock)
        self.health = RedisHealth(app.redis_url)
        self.promoter = Promoter(self.queues, self.health)
        self._running: dict[str, Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._retiring = threading.Event()  # no more reserves; exit once the others are done
        self.retired_for: tuple[str, str] | None = None  # (cause, job type) of the retirement
        self._hb_stop = threading.Event()
        self._burst = False
        self._stop_requested = False
        self._stuck: set[int] = set()  # runner threads of handlers abandoned
        self._stuck_tasks = 0  # async jobs abandoned
        self._flushers: list[threading.Thread] = []  # sending the stuck threads' batches
        self._runners: list[threading.Thread] = []
        self._async_done = threading.Event()
        self.aio = _async_jobs(app, concurrency, self.counts)
        self._completer: threading.Thread | None = None
        self._declared_at = -DECLARE_EVERY_MS
        self._info = WorkerInfo(id=self.worker_id, host=socket.gethostname(), pid=os.getpid(),
                                supervisor=supervisor_id, queues=self.queue_names,
                                threads=threads, kind="process",
                                concurrency=self.aio.concurrency if self.aio else 0)
        self._assemble(hard_grace_s)

    def _queue(self, name: str, partition: int) -> Queue:
        q = self._made.get((name, partition))
        if q is None:
            app = self.app
            q = self._made[(name, partition)] = Queue(
                app.redis, name, clock=self.clock, scripts=app.scripts,
                max_payload_bytes=app.max_payload_bytes,
                done_retention_ms=app.done_retention_ms(name), partition=partition)
        return q

    def _partition_queues(self) -> list[Queue]:
        """Partition p of every queue, then p + 1 of every queue..., so the runners' rotation
        (``_reserve``) takes each queue's partitions in turn."""
        counts = {name: self.app.partitions_of(name).count() for name in self.queue_names}
        return [self._queue(name, p) for p in range(max(counts.values(), default=1))
                for name in self.queue_names if p < counts[name]]

    def _refresh_partitions(self) -> None:
        """Serve partitions published since (a grown queue); the list is replaced whole, so a
        runner reads either the old one or the new one."""
        queues = self._partition_queues()
        if len(queues) != len(self.queues):
            self.queues = queues
            self.promoter.queues = list(queues)
            log.info("serving %d partitions of %s", len(queues), ",".join(self.queue_names),
                     extra={"event": "partitions", "worker_id": self.worker_id})

    def _assemble(self, hard_grace_s: float) -> None:
        """The rooms: settling, leases, the handler's execution, the per-job pipeline."""
        self.locks = locks = Locks(self.app.redis, clock=self.clock, scripts=self.app.scripts)
        self.settler = Settler(self.health, self.clock, self.counts, self.durations,
                               self.app.hooks)
        self.leases = Leases(self.app, locks, self.clock, self.settler,
                             hard_grace_s=hard_grace_s, on_abandon=self._abandoned)
        execution = Execution(self.app, locks, self.leases, self.clock, self.durations,
                              worker_id=self.worker_id, stopping=self._stopping,
                              stop_grace_s=self.stop_grace_s, batching=self.settler.batching)
        self.pipeline = Pipeline(self.app, locks, Limits(self.app.redis, clock=self.clock),
                                 self.health, self.settler, execution,
                                 worker_id=self.worker_id, stopping=self._stopping,
                                 stop_grace_s=self.stop_grace_s)

    # -- lifecycle ---------------------------------------------------------------------------
    def run(self) -> int:
        self._start()
        while not self._stopping.is_set():
            self._poll_stop_request()
            time.sleep(0.05)
        self._finish()
        return self.exit_code

    def run_burst(self) -> dict[str, int]:
        """Until nothing is ready or in flight; gives up (``exit_code`` 4) once Redis was
        unreachable for ``burst_redis_wait_s`` (``ANTRE_BURST_REDIS_WAIT_S``, default 30)."""
        self._burst = True
        self.health.give_up_after_s = self.burst_redis_wait_s
        self._start()
        for t in self._runners:
            while t.is_alive() and not self._stopping.is_set():
                self._poll_stop_request()
                t.join(0.05)
        if self.health.gave_up:
            log.error("burst: redis unreachable at %s for %gs (ANTRE_BURST_REDIS_WAIT_S); "
                      "giving up, jobs may be left in the queue", self.health.url,
                      self.burst_redis_wait_s,
                      extra={"event": "redis_gave_up", "worker_id": self.worker_id})
        self._finish()
        return dict(self.counts)

    def request_stop(self) -> None:
        """``stop()`` for signal handlers: only sets a flag that ``run()`` acts on (setting an
        ``Event`` inside a handler can deadlock with the interrupted thread's own wait)."""
        self._stop_requested = True

    def _poll_stop_request(self) -> None:
        """Act on a signal's stop request, or stop a retiring process once it is done."""
        if self._stop_requested or (self._retiring.is_set() and self._retired()):
            self.stop()

    def stop(self) -> None:
        """Graceful: stop reserving; running jobs get ``stop_grace_s`` to finish."""
        if not self._stopping.is_set():
            log.info("stopping: no new jobs; running jobs get %gs to finish", self.stop_grace_s,
                     extra={"event": "stopping", "worker_id": self.worker_id})
            # past the grace no Redis call retries an outage: what is still held comes back
            # through its lease, and the process exits
            self.health.give_up_at = time.monotonic() + self.stop_grace_s
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
        self._record_start()
        self._runners = [threading.Thread(target=self._runner, args=(n,), daemon=True,
                                          name=f"antre-runner-{n}") for n in range(self.threads)]
        if self.aio is not None:
            self.aio.start_loop()
            self._completer = threading.Thread(target=self._complete_async, daemon=True,
                                               name="antre-async-completer")
            self._completer.start()
        for t in self._runners:
            t.start()
        threading.Thread(target=self._heartbeat_loop, daemon=True, name="antre-heartbeat").start()

    def _finish(self) -> None:
        deadline = time.monotonic() + self.stop_grace_s
        for t in self._runners:
            if t.ident not in self._stuck:
                t.join(max(0.0, deadline - time.monotonic()))
        if self.aio is not None:  # running async jobs get the rest of the grace period
            self.aio.wait_idle(deadline - time.monotonic())
        if self.health.give_up_at is None:
            self.health.give_up_at = deadline + 5.0
        left = [r for r in self._held() if not self.settler.settle(r, HandBack(deadline + 5.0))]
        self._stop_async()
        self._hb_stop.set()
        self._info.state = "stopped"
        self._beat_quietly()
        self._last_line(len(left))

    def _last_line(self, left: int) -> None:
        if not (self.health.down or self.health.gave_up):
            log.info("worker stopped", extra={"event": "stopped", "worker_id": self.worker_id})
            return
        if self.exit_code == 0:
            self.exit_code = EXIT_REDIS_GONE
        log.error("worker stopped with redis unreachable at %s: %d jobs not handed back (their "
                  "leases expire and the sweeper returns them); exit code %d", self.health.url,
                  left, self.exit_code, extra={"event": "stopped", "worker_id": self.worker_id})

    def _held(self) -> list[Running]:
        with self._lock:
            return [r for r in self._running.values() if not r.closed and not r.lease_lost]

    def _abandoned(self, r: Running, cause: str) -> None:
        """The heartbeat settled ``r`` while its thread still runs (a hard timeout the thread
        did not see, a cancel it ignored): the process retires. It reserves nothing more, the
        jobs of its other threads (and of its loop) finish and are acked as usual, then it
        exits with ``EXIT_RECYCLE`` for its supervisor to start a fresh one (``run``)."""
        if r.cancel_task is not None:
            self._stuck_tasks += 1  # an async job's task: its slot on the loop stays taken
        elif r.thread:
            self._stuck.add(r.thread)
            # the jobs its batch ran before it, waiting for their batched ack: sent now (off
            # the heartbeat: completions may commit to SQL)
            flusher = threading.Thread(target=self._flush_abandoned, args=(r.thread,),
                                       daemon=True, name="antre-abandoned-batch")
            self._flushers.append(flusher)
            flusher.start()
        self.exit_code = EXIT_RECYCLE
        if self.retired_for is None:
            self.retired_for = (cause, r.job.type)
            self._record_retirement(cause, r.job)
        self._retiring.set()

    def _flush_abandoned(self, thread: int) -> None:
        try:
            self.settler.flush_abandoned(thread)
        except Exception:
            log.exception("could not settle the batch of an abandoned handler; its jobs' "
                          "leases will expire and they will be delivered again",
                          extra={"event": "error"})

    def _retired(self) -> bool:
        """Whether a retiring process is done: every runner thread ended or stuck (the
        batches of the stuck ones sent), and no async job still running."""
        if any(t.is_alive() for t in self._flushers):
            return False
        if any(t.is_alive() and t.ident not in self._stuck for t in self._runners):
            return False
        return self.aio is None or self.aio.free() + self._stuck_tasks >= self.aio.concurrency

    def _record_retirement(self, cause: str, job: Job) -> None:
        """The restart about to happen, by cause, for the metric and the incident view."""
        try:
            self.registry.record_restart(self.worker_id, self._info.host, cause,
                                         job_type=job.type, timeout_s=job.timeout_s)
        except redis.RedisError as exc:
            log.warning("could not record this process's restart: %s", exc,
                        extra={"event": "error", "worker_id": self.worker_id})

    # -- the runner threads --------------------------------------------------------------------
    def _runner(self, n: int) -> None:
        rr, batch = n, 1
        got: list[Running] | None = None  # None: reserve next; []: the wait's reserve got none
        while not self._stopping.is_set():
            if not got and self._retiring.is_set():
                return  # retiring: what this runner held is done, nothing more is reserved
            self.promoter.when_due()
            if got is None:
                try:
                    got = self.health.call(self._reserve, rr, batch, stop=self._stopping)
                except REDIS_DOWN:
                    return
                except Exception:
                    log.exception("reserve failed", extra={"event": "error"})
                    self._stopping.wait(1.0)
                    continue
                rr += 1
                if got is None:  # too few async slots were free: waited for some, reserve again
                    continue
            if got:
                started = time.monotonic()
                try:
                    after = self._work(got, batch)
                except REDIS_DOWN:  # a give-up (stopping, or burst): the leases bring them back
                    return
                except Exception:  # a bug in settling must not end the runner thread
                    log.exception("unexpected error while settling %d job(s); their leases "
                                  "will expire and they will be delivered again", len(got),
                                  extra={"event": "error"})
                    got = None
                    self._stopping.wait(1.0)
                    continue
                batch = self._next_batch(batch, len(got), time.monotonic() - started)
                got = after  # None: reserve next; else what the hand-over reserved
            elif self._burst and self._drained():
                return
            else:
                got = self._idle(batch)

    def _next_batch(self, batch: int, got: int, took_s: float) -> int:
        """Adaptive prefetch: short jobs are reserved (and acked) in growing batches, up to
        ``prefetch``; slow ones one at a time, so a runner does not sit on jobs that idle
        workers elsewhere could start."""
        if got == batch and took_s < FAST_BATCH_S:
            return min(batch * 2, self.prefetch)
        if took_s > SLOW_BATCH_S:
            return max(1, batch // 2)
        return batch

    def _reserve(self, rr: int, batch: int = 1) -> list[Running] | None:
        if self.aio is not None:  # no more async jobs than free slots (None: too few free)
            free, least = self.aio.free(), min(ASYNC_MIN_BATCH, self.aio.concurrency)
            if free < least:  # a few slots at a time would cost a reserve and a wake-up each
                self.aio.wait_free(IDLE_WAIT_S, least)
                return None
            batch = min(max(batch, ASYNC_BATCH), free)
        queues = self.queues
        n = len(queues)
        for i in range(n):
            q = queues[(rr + i) % n]
            held = self._hold(q, q.reserve(self.worker_id, count=batch))
            if held:
                return held
        return []

    def _hold(self, q: Queue, jobs: list[Job]) -> list[Running]:
        held = [Running(job, q) for job in jobs]
        with self._lock:
            for r in held:
                self._running[r.job.id] = r
        return held

    def _work(self, held: list[Running], batch: int = 1) -> list[Running] | None:
        """Process ``held``; returns the jobs its hand-over reserved (None: none was made).

        A prefetched batch's successes are acked together when the batch is done; its async
        jobs go to the loop together. A job with a lock_key is acked that way even alone: its
        lock is released before its ack passes the key's turn to the next job (which would
        find the lock still held otherwise, and snooze). Alone in its batch, on one server
        (``Queue.handover_ok``), its ack is a hand-over instead: lock checked and released,
        ack, the key's next head's lock taken and the next jobs reserved, in one round trip."""
        hand = self._hands_over(held)
        if hand:
            held[0].lock_checked_at_ack = True
        self.settler.begin_batch(len(held) > 1 or any(r.job.lock_key for r in held))
        self.pipeline.begin_batch(held)
        to_loop: list[AsyncStart] = []
        after = None
        try:
            for r in held:
                self._work_one(r, to_loop)
        finally:
            self.pipeline.end_batch()
            if hand:
                after = self._hand_over(held[0], batch)
            self.pipeline.flush_release()
            self.settler.flush_acks()
            if self.aio is not None:
                self.aio.start(to_loop)
        return after

    def _hands_over(self, held: list[Running]) -> bool:
        """Whether ``held`` ends in a hand-over (``_work``): one sync job with a lock_key, in
        a process serving one queue (a runner that kept reserving from the queue it just
        acked in would never turn to the others), on one server."""
        return (len(held) == 1 and bool(held[0].job.lock_key) and self.aio is None
                and len(self.queues) == 1 and held[0].queue.handover_ok()
                and not self._stopping.is_set())

    def _hand_over(self, r: Running, batch: int) -> list[Running] | None:
        """``r``'s ack as a hand-over (``Queue.handover``) when its outcome is a plain ack
        waiting with its lock's release; returns the jobs reserved behind it, the key's next
        head holding the lock taken for it (None: nothing was sent, the batch's ordinary
        flush settles ``r``)."""
        ack = self.settler.take_ack(r)
        if ack is None:
            return None
        lock = self.pipeline.take_release(r.job.lock_key)
        if lock is None:
            self.settler.put_back(r, ack)
            return None
        spec = r.spec
        ttl_ms = int(spec.lock_ttl_s * 1000) if spec is not None else 0
        token = f"{self.worker_id}:{os.urandom(8).hex()}" if ttl_ms > 0 else ""
        note = dict(timeline_note(r, ack) or {}, lock=lock.key, lock_fence=lock.fence)
        h = self.health.call(r.queue.handover, r.job, ack.result, lock_key=lock.key,
                             token=lock.token, worker_id=self.worker_id,
                             count=0 if self._stopping.is_set() or self._retiring.is_set()
                             else batch,
                             next_token=token, ttl_ms=ttl_ms, note=note)
        self.settler.handed_over(r, ack, h.status)
        if h.status == "LOCK":
            lock.lost = True
        after = self._hold(r.queue, h.jobs)
        if h.next_id:
            taken = Lock(lock.key, f"{token}.{h.next_epoch}", h.fence, ttl_ms)
            for x in after:
                if x.job.id == h.next_id and x.job.epoch == h.next_epoch:
                    x.prelock = taken
                    break
            else:  # another reserve took that delivery (or a pause parked it): not ours
                self.pipeline.release_quietly(taken)
        return after

    def _work_one(self, r: Running, to_loop: list[AsyncStart]) -> None:
        on_loop = False
        try:
            if self.aio is not None and self._is_async(r):
                on_loop = self._start_async(r, to_loop)
            else:
                self.pipeline.process(r)
        except REDIS_DOWN as exc:  # a give-up (stopping, or burst): the lease brings it back
            log.warning("job %s not settled, redis unreachable: %s; its lease will expire and "
                        "it will be delivered again", r.job.id, exc,
                        extra=job_fields(r.job, "redis_down"))
        except Exception:
            log.exception("unexpected error while processing job %s; its lease will expire "
                          "and it will be delivered again", r.job.id,
                          extra=job_fields(r.job, "error"))
        finally:
            if not on_loop:  # an async job stays held until the completer settled it
                self._forget(r)

    def _forget(self, r: Running) -> None:
        with self._lock:
            self._running.pop(r.job.id, None)

    # -- async handlers: the loop runs them, the completer settles them (aio.py) ---------------
    def _is_async(self, r: Running) -> bool:
        spec = self.app.handlers.get(r.job.type)
        return spec is not None and spec.is_async

    def _start_async(self, r: Running, to_loop: list[AsyncStart]) -> bool:
        """The steps up to the handler here; the handler for the loop. True when it runs."""
        assert self.aio is not None
        coro = self.pipeline.start(r)
        if coro is None:
            return False
        aio, job_id = self.aio, r.job.id
        r.cancel_task = lambda: aio.cancel(job_id)
        to_loop.append((job_id, r.job.type, r, coro, execution_span(r.job)))
        return True

    def _complete_async(self) -> None:
        assert self.aio is not None
        while not self._async_done.is_set():
            ended = self.aio.completions(0.1)
            if ended:
                self._settle_async(ended)

    def _settle_async(self, ended: list[tuple[Any, Any, BaseException | None]]) -> None:
        """Settle the async jobs that ended (their acks in one round trip), then free their
        slots."""
        assert self.aio is not None
        self.settler.begin_batch(len(ended) > 1 or any(r.job.lock_key for r, _, _ in ended))
        try:
            for r, result, exc in ended:
                self._finish_async(r, result, exc)
        finally:
            self.pipeline.flush_release()
            self.settler.flush_acks()
            self.aio.release(len(ended))

    def _finish_async(self, r: Running, result: Any, exc: BaseException | None) -> None:
        try:
            self.pipeline.finish(r, result, exc)
        except Exception:
            log.exception("unexpected error while settling job %s; its lease will expire and "
                          "it will be delivered again", r.job.id,
                          extra=job_fields(r.job, "error"))
        finally:
            self._forget(r)

    def _stop_async(self) -> None:
        if self.aio is None:
            return
        self._async_done.set()
        if self._completer is not None:
            self._completer.join(2.0)
        self.aio.stop()

    def _idle(self, batch: int, rr: int = 0) -> list[Running] | None:
        """Wait to be woken by the enqueue or promote script's token. With one queue the
        reserve rides behind the wait (``Queue.wait_and_reserve``) and its jobs (maybe none)
        are returned; ``None`` when the runner still has to reserve. Several queues (or
        partitions) on one server: one BLPOP on all their wake lists. On a Redis Cluster a
        BLPOP watches one slot: each idle wait watches the next list in the rotation (``rr``),
        so the runners watch different partitions and each partition is looked at by a
        reserve within ``IDLE_WAIT_S`` of its job's arrival, never a busy poll."""
        if self.aio is not None:  # the reserve behind the wait takes no more than free slots
            batch = min(batch, self.aio.free())
        queues = self.queues
        try:
            if len(queues) == 1 and batch > 0:
                q = queues[0]
                return self._hold(q, q.wait_and_reserve(self.worker_id, batch, IDLE_WAIT_S))
            first = rr % len(queues)
            queues[first].wait_for_work(IDLE_WAIT_S, queues[:first] + queues[first + 1:])
        except REDIS_DOWN as exc:
            self.health.failed(exc)
            self._stopping.wait(IDLE_WAIT_S)
        except Exception:
            log.exception("reserve failed", extra={"event": "error"})
            self._stopping.wait(1.0)
        return None

    def promote_due(self) -> int:
        """Move every due scheduled job of this process's queues to ready; returns how many."""
        return self.promoter.promote_due()

    def _drained(self) -> bool:
        """Burst mode's end: nothing ready (after promoting what is due) or in flight. The
        ready jobs of a paused queue do not count: nothing of them may start. Jobs waiting
        behind a lock_key's head, for a group's slot or in a limit's line need no check of
        their own: their turn comes in the script that ends the job ahead (ready or in flight,
        so counted here), and a head that is scheduled (its retry's backoff) is left for a
        later run, as any scheduled job is."""
        with self._lock:
            if self._running:
                return False
        try:
            self.promote_due()
            pipe = self.app.redis.pipeline(transaction=False)
            for q in self.queues:
                pipe.llen(q.keys.ready)
                pipe.zcard(q.keys.inflight)
                pipe.hexists(q.keys.paused, "*")
            replies = pipe.execute()
            return not any(inflight or (ready and not paused) for ready, inflight, paused
                           in zip(replies[0::3], replies[1::3], replies[2::3]))
        except REDIS_DOWN as exc:
            self.health.failed(exc)
            return False

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
        with self._lock:
            held = list(self._running.values())
        self.leases.beat(held)
        self._beat()

    def _beat(self) -> None:
        info = self._info
        info.current = [j.id for j in self.running_jobs()]
        if self.aio is not None:
            info.loop_lag_ms = self.aio.loop.take_lag_ms()
        info.processed = self.counts["processed"]
        info.failed = self.counts["failed"]
        cache = self.app.idempotency.cache if self.app.idempotency is not None else None
        if cache is not None:  # the completed-key cache's hit rate, for /metrics and status
            info.cache_hits, info.cache_misses = cache.hits, cache.misses
        if (self._stopping.is_set() or self._retiring.is_set()) and info.state == "running":
            info.state = "stopping"
        self.registry.beat(info)
        self.durations.flush(self.app.redis)
        self._refresh_partitions()
        self._declare_gates()
        self.health.ok()

    def _record_start(self) -> None:
        """This process's start and code version, for the performance page's deploy markers."""
        try:
            self.registry.record_start(self.worker_id, self._info.host, code_version(self.app))
        except REDIS_DOWN as exc:
            self.health.failed(exc)

    def _declare_gates(self) -> None:
        """This process's queues' flow gates: the limits reserve holds. Written at
        start, before the first reserve, and again every ``DECLARE_EVERY_MS`` (a Redis that
        lost them gets them back); until a queue's are written, its jobs' limits are taken
        as before (semaphore and token bucket: ``Pipeline.held_queues``)."""
        now = self.clock()
        if now - self._declared_at < DECLARE_EVERY_MS:
            return
        gates = Gates(self.app.redis, self.clock, self.app.scripts)
        plans = plan(self.app.handlers, self.app.downstreams)
        for name in self.queue_names:
            gates.declare(name, plans.get(name, Declaration()),
                          self.app.partitions_of(name).count())
            self.pipeline.held_queues.add(name)
        self._declared_at = now

    def _beat_quietly(self) -> None:
        try:
            self._beat()
        except REDIS_DOWN as exc:
            self.health.failed(exc)


def code_version(app: Antre) -> str:
    """``ANTRE_CODE_VERSION`` when set (e.g. the deployed commit), else a digest of the
    handlers' names and compiled code: a deploy that changes a handler reads as a new version."""
    given = settings.CODE_VERSION.get().strip()
    if given:
        return given[:100]
    digest = hashlib.sha1()
    for name in sorted(app.handlers):
        code = getattr(app.handlers[name].fn, "__code__", None)
        digest.update(name.encode() + b"\0" + (code.co_code if code is not None else b""))
    return "code " + digest.hexdigest()[:10]


def async_concurrency(app: Antre, concurrency: int | None) -> int:
    """How many async jobs a process runs at once: ``concurrency``, by default
    ``DEFAULT_CONCURRENCY`` when the app has an async handler, else 0 (no event loop). Raises
    ``ValueError`` saying what to pass for 0 (or less) with async handlers."""
    async_types = sorted(name for name, spec in app.handlers.items() if spec.is_async)
    if concurrency is None:
        return DEFAULT_CONCURRENCY if async_types else 0
    if concurrency < 0 or (concurrency == 0 and async_types):
        raise ValueError(f"the app has async handlers ({', '.join(async_types)}): their jobs "
                         "run on an event loop, so --concurrency must be at least 1"
                         if async_types else "--concurrency must be 0 or more")
    return concurrency


def _async_jobs(app: Antre, concurrency: int | None, counts: Counter[str]) -> AsyncJobs | None:
    """The process's event loop for ``async def`` handlers (None: no loop)."""
    n = async_concurrency(app, concurrency)
    return AsyncJobs(n, BlockReporter(counts)) if n else None
