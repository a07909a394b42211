"""``ctx.progress(fraction, message)``: checked in the handler, stored on the job
fenced by its lease (a stale holder's is refused), rate-limited in the worker (a tight loop
costs a few writes, the last value always lands before the ack), for sync and async handlers,
seen by the producer in ``app.result(key).progress`` while the job runs. Real Redis."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from helpers import make_worker, wait_for

from antre import LeaseLost
from antre.engine import keys
from antre.engine.progress import MAX_MESSAGE, decode
from antre_worker.held import Running
from antre_worker.progress import MIN_INTERVAL_S, Reporter


def stored(app, job_id: str) -> Any:
    return decode(app.redis.hget(keys.QueueKeys("default").job(job_id), "progress"))


class FakeTime:
    """A monotonic clock the test moves (the reporter's rate limit, without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_tight_loop_costs_a_few_writes_and_the_last_value_lands(app, q, clock):
    app.enqueue("work", {}, idempotency_key="p:1")
    (job,) = q.reserve("w1")
    t = FakeTime()
    reporter = Reporter(Running(job, q), monotonic=t)
    def handler() -> None:  # a sync handler runs on a thread of its own, with no event loop
        for i in range(1, 10_001):  # 10,000 calls over one (fake) second
            reporter.report(i / 10_000, f"rows {i}/10000")
            t.now += 0.0001

    # (not on the main thread: the browser tests' Playwright leaves a loop running there)
    thread = threading.Thread(target=handler)
    thread.start()
    thread.join()
    assert reporter.writes == int(1 / MIN_INTERVAL_S)  # one per interval, the first at once
    assert stored(app, job.id).message != "rows 10000/10000"  # held back by the limit...
    reporter.flush()  # ...until the handler returns (Execution writes it before the ack)
    assert (stored(app, job.id).fraction, stored(app, job.id).message) == (1.0,
                                                                           "rows 10000/10000")
    reporter.flush()
    assert reporter.writes == 5  # nothing left to write: nothing sent


def test_a_stale_holders_progress_is_refused(app, q, clock):
    app.enqueue("work", {}, idempotency_key="p:2")
    (old,) = q.reserve("w1")
    clock.advance(old.deadline - clock() + 1)
    q.sweep()  # its lease expired: back to ready, then another worker holds it
    (new,) = q.reserve("w2")
    q.progress(new, 0.7, "the new holder")
    with pytest.raises(LeaseLost, match="lease epoch"):
        q.progress(old, 0.1, "the old holder")
    Reporter(Running(old, q)).report(0.2, "the old holder again")  # dropped, never raised
    assert stored(app, new.id).message == "the new holder"


@pytest.mark.parametrize("fraction, message, error", [
    (1.5, "", "from 0 to 1"), (-0.1, "", "from 0 to 1"), (float("nan"), "", "from 0 to 1"),
    ("0.4", "", "a number from 0 to 1"), (True, "", "a number"), (0.5, 42, "must be text")])
def test_bad_progress_says_what_to_pass(app, q, fraction, message, error):
    app.enqueue("work", {}, idempotency_key="p:3")
    (job,) = q.reserve("w1")
    with pytest.raises(ValueError, match=error):
        q.progress(job, fraction, message)
    with pytest.raises(ValueError, match=error):
        Reporter(Running(job, q)).report(fraction, message)
    assert stored(app, job.id) is None


def test_a_long_message_is_cut_and_stored_as_text(app, q):
    app.enqueue("work", {}, idempotency_key="p:4")
    (job,) = q.reserve("w1")
    q.progress(job, 0.5, "<b>" + "x" * 500)
    got = stored(app, job.id)
    assert len(got.message) == MAX_MESSAGE and got.message.startswith("<b>xxx")
    assert got.message.endswith("…")


def test_the_producer_sees_a_running_sync_handlers_progress(app, clock):
    go_on = threading.Event()

    @app.handler("import_rows")
    def import_rows(ctx, payload):
        for i in range(4000):
            ctx.progress(i / 10_000, f"rows {i + 1:,}/10,000")
        go_on.wait(20)
        ctx.progress(1.0, "rows 10,000/10,000")
        return {"rows": 10_000}

    app.enqueue("import_rows", {}, idempotency_key="import:1")
    w = make_worker(app, clock)
    runner = threading.Thread(target=w.run_burst, daemon=True)
    runner.start()
    try:
        def beat_and_look() -> bool:  # the heartbeat writes what the rate limit held back
            w.heartbeat_once()
            seen = app.result("import:1").progress
            return seen is not None and seen.message == "rows 4,000/10,000"
        wait_for(beat_and_look, what="the handler's last progress", poll_s=0.05)
        answer = app.result("import:1")
        assert answer.status == "pending"
        assert (answer.progress.fraction, answer.progress.message) == (0.3999,
                                                                        "rows 4,000/10,000")
    finally:
        go_on.set()
        runner.join(20)
    done = app.result("import:1")
    assert (done.status, done.result) == ("completed", {"rows": 10_000})
    assert (done.progress.fraction, done.progress.message) == (1.0, "rows 10,000/10,000")


def test_an_async_handlers_progress_lands_before_its_ack(app, clock, q):
    @app.handler("fetch_all")
    async def fetch_all(ctx, payload):
        for i in range(1, 101):
            ctx.progress(i / 100, f"page {i}/100")
            await asyncio.sleep(0)
        return "ok"

    (job_id,) = [app.enqueue("fetch_all", {}, idempotency_key="fetch:1")]
    make_worker(app, clock, concurrency=4).run_burst()
    assert q.where(job_id) == ["done"]
    got = stored(app, job_id)
    assert (got.fraction, got.message) == (1.0, "page 100/100")
    timeline = [e.kind for e in app.finder.timeline("default", job_id).events]
    assert "progress" not in timeline  # progress adds no timeline events
