"""``async def`` handlers: one event loop per worker process, in a thread of its own.

A runner thread takes an async job through the pipeline's steps up to the handler (envelope,
lock, flow control, idempotency claim: the same steps, the same guarantees as a sync job), then
``AsyncJobs.start`` puts the handler's coroutine on the loop without waiting for it; up to
``concurrency`` run at once. When one ends, its result or exception goes to a completer thread
(``AsyncJobs.completions``) that commits and settles it exactly as a sync job's end is (the
lease is fenced, acks of a batch go together). Timeouts, lease loss and shutdown cancel the
task (``cancel``); the heartbeat keeps every lease as for sync jobs.

A handler that blocks the loop (a sync call inside ``async def``) stalls every async job of the
process: each step of a handler's coroutine is timed and a step longer than ``block_warn_s``
is logged as a warning naming the job type; the loop's lag is measured every 100 ms and
reported with the worker's heartbeat (``antre_worker_loop_lag_seconds``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from contextlib import AbstractContextManager
from typing import Any

from antre.observe import joblog

log = logging.getLogger("antre.worker")

LAG_PROBE_S = 0.1  # how often the loop's lag is measured
BLOCK_WARN_S = 0.1  # a coroutine step longer than this blocked the loop: warn
WARN_EVERY_S = 10.0  # at most one blocking warning per job type in this span
LINGER_S = 0.003  # how long the completer waits for more ended jobs to settle together
MAX_SETTLE_BATCH = 256

OnBlock = Callable[[str, float], None]


class Timed:
    """Awaits ``coro`` step by step, timing each step (the time the loop spent in it); a step
    longer than ``warn_s`` is reported to ``on_block(job_type, seconds)``."""

    __slots__ = ("coro", "job_type", "warn_s", "on_block")

    def __init__(self, coro: Coroutine[Any, Any, Any], job_type: str, warn_s: float,
                 on_block: OnBlock) -> None:
        self.coro = coro
        self.job_type = job_type
        self.warn_s = warn_s
        self.on_block = on_block

    def _spent(self, started: float) -> None:
        spent = time.perf_counter() - started
        if spent > self.warn_s:
            self.on_block(self.job_type, spent)

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        send: Callable[[Any], Any] = coro.send
        arg: Any = None
        while True:
            started = time.perf_counter()
            try:
                step = send(arg)
            except StopIteration as stop:
                self._spent(started)
                return stop.value
            except BaseException:
                self._spent(started)
                raise
            self._spent(started)
            try:
                arg = yield step
                send = coro.send
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and errors go into the handler
                arg, send = exc, coro.throw


class BlockReporter:
    """Logs a handler that blocked the loop (at most once per job type per ``every_s``) and
    counts it."""

    def __init__(self, counts: Any, every_s: float = WARN_EVERY_S) -> None:
        self.counts = counts
        self.every_s = every_s
        self._last: dict[str, float] = {}

    def __call__(self, job_type: str, spent_s: float) -> None:
        self.counts["loop_blocked"] += 1
        now = time.monotonic()
        if now - self._last.get(job_type, -self.every_s) < self.every_s:
            return
        self._last[job_type] = now
        log.warning("async handler of job type %s blocked the event loop for %d ms: every async "
                    "job of this process waited; await non-blocking calls, or run blocking code "
                    "with asyncio.to_thread", job_type, spent_s * 1000,
                    extra={"event": "loop_blocked", "job_type": job_type,
                           "duration_ms": int(spent_s * 1000)})


class LoopThread:
    """An event loop running in a daemon thread, with its lag measured."""

    def __init__(self, name: str = "antre-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._lag_max_s = 0.0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.create_task(self._probe_lag())
        try:
            self.loop.run_forever()
        finally:  # stopped: whatever still runs is cancelled, then the loop is closed
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    async def _probe_lag(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(LAG_PROBE_S)
            lag = time.monotonic() - started - LAG_PROBE_S
            self._lag_max_s = max(self._lag_max_s, lag)

    def take_lag_ms(self) -> int:
        """The worst lag since the last call (the heartbeat reports it)."""
        lag, self._lag_max_s = self._lag_max_s, 0.0
        return int(lag * 1000)

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(2.0)


Ended = tuple[Any, Any, BaseException | None]  # (the job held, result, exception)
AsyncStart = tuple[str, str, Any, Coroutine[Any, Any, Any], AbstractContextManager[Any]]


class AsyncJobs:
    """The async jobs of one worker process: at most ``concurrency`` on the loop at once.

    ``start`` (runner threads) takes a slot per job and schedules its coroutine; the task's end
    is queued for ``completions`` (the completer thread), which gives the slot back with
    ``release`` once the job is settled. ``cancel`` cancels a job's task (timeout, lease lost,
    shutdown)."""

    def __init__(self, concurrency: int, on_block: OnBlock,
                 block_warn_s: float = BLOCK_WARN_S) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.on_block = on_block
        self.block_warn_s = block_warn_s
        self.loop = LoopThread()
        self._used = 0
        self._cond = threading.Condition()
        self._ended: queue.SimpleQueue[Ended] = queue.SimpleQueue()
        self._tasks: dict[str, asyncio.Task[Any]] = {}  # job id -> task (loop thread only)
        self._starts: list[AsyncStart] = []  # waiting for the loop to take them
        self._wake_pending = False

    def start_loop(self) -> None:
        self.loop.start()

    # -- slots ---------------------------------------------------------------------------------
    def free(self) -> int:
        with self._cond:
            return self.concurrency - self._used

    def in_flight(self) -> int:
        with self._cond:
            return self._used

    def wait_free(self, timeout_s: float, at_least: int = 1) -> bool:
        """Block until ``at_least`` slots are free (or ``timeout_s``); True when they are."""
        need = min(at_least, self.concurrency)
        with self._cond:
            return self._cond.wait_for(lambda: self.concurrency - self._used >= need,
                                       timeout_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no async job is in flight (or ``timeout_s``)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._used == 0, max(0.0, timeout_s))

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._used -= n
            self._cond.notify_all()

    # -- tasks ---------------------------------------------------------------------------------
    def start(self, jobs: list[AsyncStart]) -> None:
        """Schedule ``(job id, job type, held, coroutine, span)`` items on the loop, a slot
        each (the caller checked ``free()``: slots may go over by the few a racing runner
        took); ``span`` is a context manager entered around the coroutine (tracing). Starts
        that come while the loop has not yet taken the previous ones ride with them (one
        wake-up of the loop, not one per batch)."""
        if not jobs:
            return
        with self._cond:
            self._used += len(jobs)
            self._starts.extend(jobs)
            if self._wake_pending:
                return
            self._wake_pending = True
        self.loop.call(self._take_starts)

    def _take_starts(self) -> None:
        with self._cond:
            jobs, self._starts = self._starts, []
            self._wake_pending = False
        self._create_tasks(jobs)

    def _create_tasks(self, jobs: list[AsyncStart]) -> None:
        for job_id, job_type, held, coro, span in jobs:
            task = self.loop.loop.create_task(self._run(job_type, coro, span, held))
            self._tasks[job_id] = task
            task.add_done_callback(functools.partial(self._ended_task, job_id, held, coro))

    async def _run(self, job_type: str, coro: Coroutine[Any, Any, Any],
                   span: AbstractContextManager[Any], held: Any = None) -> Any:
        # the job's own log is current in its task alone
        with span, joblog.capturing(getattr(held, "own_log", None)):  # only the handler's own steps are timed, not the span's set-up
            return await Timed(coro, job_type, self.block_warn_s, self.on_block)

    def _ended_task(self, job_id: str, held: Any, coro: Coroutine[Any, Any, Any],
                    task: asyncio.Task[Any]) -> None:
        self._tasks.pop(job_id, None)
        if task.cancelled():
            coro.close()  # cancelled before it started: nothing ran
            self._ended.put((held, None, asyncio.CancelledError()))
        elif task.exception() is not None:
            self._ended.put((held, None, task.exception()))
        else:
            self._ended.put((held, task.result(), None))

    def cancel(self, job_id: str) -> None:
        self.loop.call(self._cancel, job_id)

    def _cancel(self, job_id: str) -> None:
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()

    def completions(self, timeout_s: float, linger_s: float = LINGER_S) -> list[Ended]:
        """The jobs that ended: waits up to ``timeout_s`` for the first, then ``linger_s``
        for others, so that their acks share a round trip."""
        try:
            out = [self._ended.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        time.sleep(linger_s)
        while len(out) < MAX_SETTLE_BATCH:
            try:
                out.append(self._ended.get_nowait())
            except queue.Empty:
                break
        return out

    def stop(self) -> None:
        self.loop.stop()
