"""worker/antre_worker/aio.py on its own: the loop thread, slots, completions, cancellation, and the
detection of a handler that blocks the loop."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from contextlib import nullcontext

import pytest

from antre_worker.aio import AsyncJobs, BlockReporter, Timed


@pytest.fixture
def jobs():
    blocked: list[tuple[str, float]] = []
    aj = AsyncJobs(3, lambda t, s: blocked.append((t, s)), block_warn_s=0.05)
    aj.blocked = blocked
    aj.start_loop()
    yield aj
    aj.stop()


async def _answer(x):
    await asyncio.sleep(0)
    return x * 2


def test_many_coroutines_run_at_once_and_come_back(jobs):
    async def wait(i):
        await asyncio.sleep(0.05)
        return i

    jobs.concurrency = 100
    jobs.start([(f"j{i}", "t", f"held{i}", wait(i), nullcontext()) for i in range(100)])
    assert jobs.in_flight() == 100 and jobs.free() == 0
    ended = []
    started = time.monotonic()
    while len(ended) < 100:
        ended += jobs.completions(5.0)
    assert time.monotonic() - started < 2.0  # 100 x 50 ms, concurrently
    assert sorted(r for _, r, _ in ended) == list(range(100))
    assert {h for h, _, _ in ended} == {f"held{i}" for i in range(100)}
    jobs.release(100)
    assert jobs.free() == 100


def test_an_exception_comes_back_with_its_job(jobs):
    async def boom():
        raise ValueError("nope")

    jobs.start([("j", "t", "held", boom(), nullcontext())])
    [(held, result, exc)] = jobs.completions(5.0)
    assert held == "held" and result is None and isinstance(exc, ValueError)


def test_cancel_ends_the_task_with_cancelled_error(jobs):
    async def forever():
        await asyncio.sleep(3600)

    jobs.start([("j", "t", "held", forever(), nullcontext())])
    jobs.cancel("j")
    [(_, _, exc)] = jobs.completions(5.0)
    assert isinstance(exc, asyncio.CancelledError)


def test_a_blocking_step_is_reported_with_its_job_type(jobs):
    async def blocks():
        time.sleep(0.25)  # a sync call inside async def: the loop stalls
        await asyncio.sleep(0)

    jobs.start([("j", "send_report", "held", blocks(), nullcontext())])
    jobs.completions(5.0)
    [(job_type, spent)] = jobs.blocked
    assert job_type == "send_report" and spent >= 0.25
    time.sleep(0.15)  # the lag probe wakes up after the stall
    assert jobs.loop.take_lag_ms() >= 100  # a 100 ms probe overlaps a 250 ms stall


def test_timed_passes_results_and_cancellation_through():
    async def wrapped_sleep():
        return await Timed(asyncio.sleep(10), "t", 1.0, lambda *a: None)

    async def main():
        assert await Timed(_answer(21), "t", 1.0, lambda *a: None) == 42
        task = asyncio.ensure_future(wrapped_sleep())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    # in a thread of its own: a browser test's Playwright may hold a loop in the main thread
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not errors and not t.is_alive()


def test_the_block_warning_names_the_job_type_once_per_window(caplog):
    counts: Counter[str] = Counter()
    report = BlockReporter(counts, every_s=60)
    with caplog.at_level(logging.WARNING, logger="antre.worker"):
        report("send_report", 0.25)
        report("send_report", 0.3)
    assert counts["loop_blocked"] == 2
    [record] = caplog.records
    assert "job type send_report blocked the event loop for 250 ms" in record.getMessage()
