"""``async def`` handlers in the worker: many in flight on the process's event loop, beside sync
handlers, with the guarantees sync handlers have (fenced lease, heartbeat, idempotency, locks,
timeout by cancellation, graceful stop). Real Redis (and SQLite), the clock injected."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import threading
import time
from functools import partial
from pathlib import Path

import helpers
import pytest
from helpers import burst, make_worker, spawn
from sqlalchemy import text

from antre import Antre, Permanent, Retryable
from antre.clock import ManualClock, system_ms
from antre.engine.queue import JobSpec, Queue
from antre.observe.metrics import render
from antre.observe.registry import WorkerInfo, WorkerRegistry
from antre_worker.cli import build_parser
from antre_worker.cli import main as worker_main
from antre_worker.pool import Supervisor


wait_for = partial(helpers.wait_for, timeout=60.0)  # this module's bound: child processes start slowly on a loaded machine


def test_a_thousand_jobs_each_awaiting_50_ms_all_finish(app, clock, q):
    seen: list[int] = []

    @app.handler("fetch")
    async def fetch(ctx, payload):
        await asyncio.sleep(0.05)
        seen.append(payload["i"])
        return {"i": payload["i"]}

    ids = q.enqueue_many([JobSpec("fetch", {"i": i}, f"f:{i}") for i in range(1000)])
    w = make_worker(app, clock, threads=2, concurrency=200)
    counts = w.run_burst()
    assert sorted(seen) == list(range(1000))  # each ran once
    assert counts["succeeded"] == 1000 and q.stats()["acked"] == 1000
    assert all(q.where(i) == ["done"] for i in ids[::97])
    assert q.get(ids[5]).result == {"i": 5}


def test_sync_and_async_handlers_live_in_one_app(app, clock, q):
    threads: dict[str, str] = {}

    @app.handler("sync_one")
    def sync_one(ctx, payload):
        threads["sync"] = threading.current_thread().name
        return "s"

    @app.handler("async_one")
    async def async_one(ctx, payload):
        threads["async"] = threading.current_thread().name
        return "a"

    a = app.enqueue("async_one", {}, idempotency_key="a")
    s = app.enqueue("sync_one", {}, idempotency_key="s")
    burst(app, clock)
    assert (q.get(a).result, q.get(s).result) == ("a", "s")
    assert threads == {"sync": "antre-runner-0", "async": "antre-loop"}


def test_failures_are_classified_as_for_sync_handlers(app, clock, q):
    @app.handler("flaky")
    async def flaky(ctx, payload):
        await asyncio.sleep(0)
        raise Retryable("downstream 503")

    @app.handler("broken")
    async def broken(ctx, payload):
        raise Permanent("card declined")

    f = app.enqueue("flaky", {}, idempotency_key="f")
    b = app.enqueue("broken", {}, idempotency_key="b")
    _, counts = burst(app, clock)
    assert (q.get(f).state, q.get(f).attempt, q.get(f).error_kind) == \
        ("scheduled", 1, "retryable")
    assert "downstream 503" in q.get(f).last_error
    assert (q.get(b).state, q.get(b).reason) == ("dead", "permanent error: Permanent: card declined")
    assert counts["retried"] == 1 and counts["buried"] == 1


def test_timeout_cancels_the_task_and_retries_as_timeout(app, clock, q):
    started, cancelled = threading.Event(), threading.Event()

    @app.handler("hang", timeout_s=5)
    async def hang(ctx, payload):
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = app.enqueue("hang", {}, idempotency_key="h")
    w = make_worker(app, clock)
    t = threading.Thread(target=w.run_burst)
    t.start()
    assert started.wait(5)
    clock.advance(5_000)
    w.heartbeat_once()  # past the timeout: the task is cancelled
    t.join(10)
    assert cancelled.is_set() and not t.is_alive()
    job = q.get(job_id)
    assert (job.state, job.attempt, job.error_kind) == ("scheduled", 1, "timeout")
    assert "cancelled: it ran past its timeout of 5s" in job.last_error
    assert w.exit_code == 0  # a cancelled task needs no recycled process


def test_a_lost_lease_cancels_the_task_and_its_late_result_is_dropped(app, clock, q):
    started, cancelled = threading.Event(), threading.Event()
    other = Queue(app.redis, "default", clock=clock)

    @app.handler("slowpoke", visibility_timeout_s=10)
    async def slowpoke(ctx, payload):
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    job_id = app.enqueue("slowpoke", {}, idempotency_key="sp")
    # one task at a time: busy with slowpoke, this worker cannot take the requeued job itself
    # (with room for more, its idle fetch could reserve it before "w2" below)
    w = make_worker(app, clock, concurrency=1)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert started.wait(5)
        clock.advance(10_001)  # the lease expires ...
        assert other.sweep().requeued == 1  # ... the sweeper returns the job ...
        assert other.reserve("w2")[0].epoch == 2  # ... and another worker takes it
        w.heartbeat_once()  # the extend is refused: lease lost, task cancelled
        assert wait_for(cancelled.is_set)
        assert wait_for(lambda: not w.running_jobs())
    finally:
        w.stop()
        t.join(10)
    job = q.get(job_id)
    assert w.counts["lease_lost"] >= 1 and "succeeded" not in w.counts
    assert (job.state, job.epoch, job.worker_id) == ("inflight", 2, "w2")
    assert "acked" not in q.stats() and "retried" not in q.stats()


def test_the_heartbeat_extends_async_leases(app, clock, q):
    started = threading.Event()

    @app.handler("long", visibility_timeout_s=10)
    async def long(ctx, payload):
        started.set()
        while not ctx.cancelled.is_set() and not app.redis.get("release"):
            await asyncio.sleep(0.01)

    job_id = app.enqueue("long", {}, idempotency_key="l")
    w = make_worker(app, clock, concurrency=10)
    t = threading.Thread(target=w.run_burst)
    t.start()
    try:
        assert started.wait(5)
        clock.advance(8_000)
        w.heartbeat_once()
        assert q.get(job_id).deadline == clock() + 10_000
        info = WorkerRegistry(app.redis, clock).get("w1")
        assert info.current == [job_id] and info.concurrency == 10
    finally:
        app.redis.set("release", "1")
        t.join(10)
    assert q.get(job_id).state == "done"


def test_stop_lets_async_jobs_finish_then_hands_back_the_rest(app, clock, q):
    started = threading.Event()

    @app.handler("quick")
    async def quick(ctx, payload):
        started.set()
        await asyncio.sleep(0.05)
        return "ok"

    @app.handler("stuck")
    async def stuck(ctx, payload):
        started.set()
        await asyncio.sleep(3600)

    quick_id = app.enqueue("quick", {}, idempotency_key="q")
    stuck_id = app.enqueue("stuck", {}, idempotency_key="s")
    w = make_worker(app, clock, stop_grace_s=0.5)
    t = threading.Thread(target=w.run)
    t.start()
    assert wait_for(lambda: len(w.running_jobs()) == 2 or q.get(quick_id).state == "done")
    w.stop()
    t.join(10)
    assert q.get(quick_id).state == "done"
    stuck_job = q.get(stuck_id)
    assert (stuck_job.state, stuck_job.attempt, stuck_job.deliveries) == ("ready", 0, 0)


def test_idempotency_holds_for_async_handlers(redis_url, sqlite_url, clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    runs: list[str] = []

    @app.handler("invoice")
    async def invoice(ctx, payload):
        runs.append(ctx.job.id)
        await asyncio.sleep(0.01)
        return {"invoice": f"INV-{payload['order']}"}

    q = app.queue()
    first = app.enqueue("invoice", {"order": 7}, idempotency_key="order:7")
    second = app.enqueue("invoice", {"order": 7}, idempotency_key="order:7")
    make_worker(app, clock).run_burst()  # the second may meet the first in flight: snoozed
    clock.advance(2_000)
    burst(app, clock)
    assert runs == [first]
    assert q.get(first).result == q.get(second).result == {"invoice": "INV-7"}
    assert q.stats()["deduplicated"] == 1
    assert app.idempotency.lookup("order:7").status == "completed"
    app.engine.dispose()


def test_async_handler_writes_commit_with_the_completion(redis_url, db_url, clock):
    app = Antre(redis_url=redis_url, database_url=db_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k VARCHAR(20) PRIMARY KEY)"))

    @app.handler("effect")
    async def effect(ctx, payload):
        # off the loop: a write that waits for another in-flight job's transaction (SQLite has
        # one writer) must not stall the loop that job needs to finish
        await asyncio.to_thread(ctx.db.execute, text("INSERT INTO effects (k) VALUES (:k)"),
                                {"k": payload["k"]})
        await asyncio.sleep(0.01)
        if payload.get("fail"):
            raise Permanent("no")
        return "written"

    app.enqueue("effect", {"k": "a"}, idempotency_key="eff:a")
    burst(app, clock)
    # one after the other: two SQLite writers in flight at once may refuse each other (BUSY)
    app.enqueue("effect", {"k": "b", "fail": True}, idempotency_key="eff:b")
    burst(app, clock)
    with app.engine.connect() as conn:
        assert [row[0] for row in conn.execute(text("SELECT k FROM effects"))] == ["a"]
    assert app.idempotency.lookup("eff:a").status == "completed"
    assert app.idempotency.lookup("eff:b").status == "failed"
    app.engine.dispose()


def test_locks_hold_for_async_handlers(app, clock, q):
    inside = []

    @app.handler("ledger")
    async def ledger(ctx, payload):
        inside.append(ctx.fence)
        assert len(app.locks.held()) == 1
        await asyncio.sleep(0.02)
        return ctx.fence

    ids = [app.enqueue("ledger", {"i": i}, idempotency_key=f"lg:{i}", lock_key="acct:1")
           for i in range(3)]
    for _ in range(10):  # jobs that met the lock held are snoozed: due again 2 s later
        make_worker(app, clock, concurrency=10).run_burst()
        if all(q.get(i).state == "done" for i in ids):
            break
        clock.advance(2_000)
    assert [q.get(i).state for i in ids] == ["done"] * 3
    assert sorted(inside) == sorted(set(inside)) and len(inside) == 3  # one fence each
    assert app.locks.held() == []


def test_a_handler_that_blocks_the_loop_is_named_in_a_warning(app, clock, q, caplog):
    @app.handler("blocking_report")
    async def blocking_report(ctx, payload):
        time.sleep(0.25)  # a sync call inside async def

    app.enqueue("blocking_report", {}, idempotency_key="br")
    with caplog.at_level(logging.WARNING, logger="antre.worker"):
        _, counts = burst(app, clock)
    assert counts["loop_blocked"] == 1
    [record] = [r for r in caplog.records if r.event == "loop_blocked"]
    assert "job type blocking_report blocked the event loop" in record.getMessage()


# -- real worker processes: kill -9 and SIGTERM ------------------------------------------------
def spawn_child(redis_url: str, log_path: Path, *extra: str) -> subprocess.Popen:
    return spawn(redis_url, ["antre_worker.child", "tests.apps.aio:app", "--threads", "1",
                             "--concurrency", "20", "--heartbeat", "0.2", *extra], log_path)


def test_kill_9_mid_async_job_redelivers_after_the_lease_and_completes(redis_url, r,
                                                                      tmp_path, procs):
    q = Queue(r, "default")
    job_id = q.enqueue("hang_first_async", {}, idempotency_key="hfa", visibility_timeout_s=30)
    p = spawn_child(redis_url, tmp_path / "w.log")
    procs.append(p)
    assert wait_for(lambda: r.llen("test:started") == 1)
    p.kill()
    p.wait(10)
    assert q.get(job_id).state == "inflight"
    later = lambda ms: Queue(r, "default", clock=ManualClock(system_ms() + ms))  # noqa: E731
    assert later(29_000).sweep().requeued == 0  # the lease still holds
    assert later(31_000).sweep().requeued == 1
    p2 = spawn_child(redis_url, tmp_path / "w.log", "--burst")
    procs.append(p2)
    assert p2.wait(20) == 0
    job = q.get(job_id)
    assert (job.state, job.deliveries, job.attempt) == ("done", 2, 0)
    assert job.result == {"deliveries": 2} and r.llen("test:done") == 1


def test_sigterm_mid_async_job_hands_back_without_spending_an_attempt(redis_url, r, tmp_path,
                                                                     procs):
    q = Queue(r, "default")
    job_id = q.enqueue("slow_async", {"seconds": 30}, idempotency_key="sa")
    p = spawn_child(redis_url, tmp_path / "w.log", "--grace", "0.5")
    procs.append(p)
    assert wait_for(lambda: r.llen("test:started") == 1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    job = q.get(job_id)
    assert (job.state, job.attempt, job.deliveries) == ("ready", 0, 0)
    assert q.stats()["handed_back"] == 1 and r.llen("test:done") == 0


def test_no_event_loop_for_an_app_with_async_handlers_is_refused(app, clock):
    @app.handler("fetch")
    async def fetch(ctx, payload):
        return None

    with pytest.raises(ValueError, match=r"async handlers \(fetch\).*--concurrency must be at"):
        make_worker(app, clock, concurrency=0)
    assert make_worker(app, clock).aio.concurrency == 100  # the default with async handlers


def test_a_sync_only_app_gets_no_event_loop(app, clock):
    @app.handler("plain")
    def plain(ctx, payload):
        return None

    assert make_worker(app, clock).aio is None


def test_the_cli_passes_concurrency_to_each_process(app):
    args = build_parser().parse_args(["worker", "tests.apps.aio:app", "--concurrency", "300"])
    assert args.concurrency == 300
    sup = Supervisor("tests.apps.aio:app", 1, 2, ["default"], app=app, concurrency=300)
    cmd = sup._command(sup.slots[0])
    assert cmd[cmd.index("--concurrency") + 1] == "300" and "--threads" in cmd


def test_the_loop_lag_is_a_metric_per_process(app, clock):
    WorkerRegistry(app.redis, clock).beat(WorkerInfo(id="w9", host="h", concurrency=100,
                                                     loop_lag_ms=250))
    body = render(app.redis, clock)[0].decode()
    assert 'antre_worker_loop_lag_seconds{host="h",worker="w9"} 0.25' in body


def test_the_cli_refuses_no_loop_for_async_handlers(redis_url, monkeypatch, capsys,
                                                    antre_logging):  # the CLI configures it
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    assert worker_main(["worker", "tests.apps.aio:app", "--concurrency", "0", "--burst"]) == 2
    assert "--concurrency must be at least 1" in capsys.readouterr().err


def test_a_worker_with_many_threads_gets_a_connection_each(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock)
    seen: set[str] = set()
    lock = threading.Lock()

    @app.handler("wait")
    def wait(ctx, payload):
        time.sleep(0.05)
        with lock:
            seen.add(threading.current_thread().name)

    app.queue().enqueue_many([JobSpec("wait", {"i": i}, f"w:{i}") for i in range(400)])
    counts = make_worker(app, clock, threads=128).run_burst()
    assert counts["succeeded"] == 400 and "lease_lost" not in counts
    assert len(seen) > 100  # redis-py's default pool of 100 connections would have refused
