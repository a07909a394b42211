"""Stop a running job (cooperative and abandoned after the grace), max_age_s and the snooze cap,
with the worker in-process on a real Redis and SQLite, the clock injected."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import make_worker, wait_for
from sqlalchemy import text

from antre import Antre
from antre.engine import keys
from antre.control.cancel import CancelError, Cancels
from antre.observe.finder import Finder
from antre_worker.runner import EXIT_RECYCLE


@pytest.fixture
def app(redis_url, sqlite_url, clock):
    return Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)


def kinds(app, clock, job_id):
    return [e.kind for e in Finder(app.redis, clock).timeline("default", job_id).events]


def effects(app):
    with app.engine.connect() as conn:
        return [row[0] for row in conn.execute(text("SELECT k FROM effects"))]


@pytest.fixture
def table(app):
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k TEXT PRIMARY KEY)"))


def test_cooperative_handler_stops_and_goes_to_the_dlq_without_its_sql(app, clock, table):
    started = threading.Event()

    @app.handler("export")
    def export(ctx, payload):
        ctx.db.execute(text("INSERT INTO effects (k) VALUES ('half done')"))
        started.set()
        while not ctx.cancelled.is_set():
            time.sleep(0.01)
        return "stopped early"  # returned, but cancelled: nothing commits

    job_id = app.enqueue("export", {}, idempotency_key="exp:1")
    w = make_worker(app, clock)
    t = threading.Thread(target=w.run_burst)
    t.start()
    assert started.wait(5)
    Cancels(app.redis, clock).request("default", job_id, "alice", "dlq", "wrong tenant")
    w.heartbeat_once()
    t.join(5)
    job = app.queue().get(job_id)
    assert (job.state, job.reason, job.error_kind) == (
        "dead", "cancelled by alice: wrong tenant", "cancelled")
    assert job.attempt == 0 and effects(app) == []
    assert app.idempotency.lookup("exp:1").status == "failed"
    assert w.counts["cancelled"] == 1 and w.exit_code == 0
    assert app.redis.hlen(app.queue().keys.cancels) == 0


def test_non_cooperative_handler_is_abandoned_after_the_grace_and_discarded(app, clock, table):
    started, release = threading.Event(), threading.Event()

    @app.handler("stuck", cancel_grace_s=5)
    def stuck(ctx, payload):
        ctx.db.execute(text("INSERT INTO effects (k) VALUES ('never')"))
        started.set()
        release.wait(10)  # ignores ctx.cancelled
        return "too late"

    job_id = app.enqueue("stuck", {}, idempotency_key="st:1")
    w = make_worker(app, clock)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("code", w.run()))
    t.start()
    try:
        assert started.wait(5)
        Cancels(app.redis, clock).request("default", job_id, "bob", "discard", "")
        w.heartbeat_once()  # seen: ctx.cancelled, the grace starts
        assert app.queue().get(job_id).state == "inflight"
        clock.advance(5_000)
        w.heartbeat_once()  # past the grace: abandoned, discarded, the process recycles
        t.join(5)
        assert not t.is_alive() and out["code"] == EXIT_RECYCLE
        assert app.queue().get(job_id) is None
    finally:
        release.set()
    assert wait_for(lambda: w.counts["dropped"] == 1)  # the abandoned handler returned
    assert effects(app) == [] and "acked" not in app.queue().stats()
    assert app.queue().stats()["cancelled"] == 1


def test_cancel_of_a_job_not_running_is_refused(app, clock):
    q = app.queue()
    job_id = q.enqueue("export", {}, idempotency_key="exp:2")
    with pytest.raises(CancelError, match="it is ready"):
        Cancels(app.redis, clock).request("default", job_id, "alice", "dlq", "")
    with pytest.raises(CancelError, match="it is gone"):
        Cancels(app.redis, clock).request("default", "nope", "alice", "dlq", "")
    with pytest.raises(CancelError, match="to must be one of dlq, discard, not 'trash'"):
        Cancels(app.redis, clock).request("default", job_id, "alice", "trash", "")
    assert app.redis.hlen(q.keys.cancels) == 0 and q.get(job_id).cancel == ""


def test_a_cancelled_job_whose_worker_died_is_not_run_again(app, clock):
    runs = []

    @app.handler("export")
    def export(ctx, payload):
        runs.append(1)

    q = app.queue()
    job_id = q.enqueue("export", {}, idempotency_key="exp:3", visibility_timeout_s=10)
    (job,) = q.reserve("dead-worker")
    Cancels(app.redis, clock).request("default", job_id, "carol", "dlq", "")
    clock.advance(11_000)
    # its worker never came back: the sweep ends it as cancelled, never puts it back
    assert q.sweep().outcomes == {job_id: "cancelled"}
    make_worker(app, clock).run_burst()
    assert runs == [] and q.get(job_id).reason == "cancelled by carol"
    assert kinds(app, clock, job_id)[-3:] == ["cancel_requested", "swept", "cancelled"]


def test_a_job_older_than_max_age_goes_to_the_dlq_without_running(app, clock):
    runs = []

    @app.handler("report", max_age_s=60)
    def report(ctx, payload):
        runs.append(payload)

    q = app.queue()
    old = app.enqueue("report", {"n": 1}, idempotency_key="r:1")
    clock.advance(61_000)
    fresh = app.enqueue("report", {"n": 2}, idempotency_key="r:2")
    w = make_worker(app, clock)
    w.run_burst()
    job = q.get(old)
    assert (job.state, job.error_kind, job.attempt) == ("dead", "expired", 0)
    assert job.reason.startswith("expired: 61.0s old when reserved, over its max_age_s of 60s")
    assert runs == [{"n": 2}] and q.get(fresh).state == "done"
    assert w.counts["max_age"] == 1


def test_app_default_max_age_applies_to_handlers_without_one(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock, max_age_s=30)

    @app.handler("ping")
    def ping(ctx, payload):
        return "pong"

    job_id = app.enqueue("ping", {}, idempotency_key="p:1")
    clock.advance(31_000)
    make_worker(app, clock).run_burst()
    assert app.queue().get(job_id).error_kind == "expired"


def test_a_job_held_back_past_its_snooze_cap_goes_to_the_dlq_with_the_reason(app, clock):
    @app.handler("charge", max_snoozes=3)
    def charge(ctx, payload):
        return "charged"

    q = app.queue()
    job_id = app.enqueue("charge", {}, idempotency_key="c:1", lock_key="customer:7")
    app.locks.acquire("customer:7", 3_600_000, owner="someone else")  # never released
    w = make_worker(app, clock)
    for n in range(1, 4):
        w.run_burst()
        job = q.get(job_id)
        assert (job.state, job.snoozes, job.attempt) == ("scheduled", n, 0)
        clock.advance(2_000)
        q.promote()
    w.run_burst()
    job = q.get(job_id)
    assert (job.state, job.error_kind, job.attempt) == ("dead", "snooze_cap", 0)
    assert job.reason.startswith("held back 3 times without running (last: lock_busy), "
                                 "over its cap of 3")
    assert w.counts["snooze_capped"] == 1


def test_a_burst_worker_ends_while_its_queue_is_paused_and_runs_nothing(app, clock):
    from antre.control.pause import Pauses
    runs = []

    @app.handler("ping")
    def ping(ctx, payload):
        runs.append(payload)

    app.enqueue("ping", {"n": 1}, idempotency_key="p:1")
    Pauses(app.redis, clock).pause("default", None, "alice", "drill")
    counts = make_worker(app, clock).run_burst()
    assert runs == [] and counts.get("processed", 0) == 0
    Pauses(app.redis, clock).resume("default", None)
    make_worker(app, clock).run_burst()
    assert runs == [{"n": 1}]


def test_the_sweeper_forgets_cancel_requests_of_jobs_that_finished_anyway(app, clock):
    from antre_worker.duties import sweep_once
    q = app.queue()
    job_id = q.enqueue("ping", {}, idempotency_key="p:9")
    (job,) = q.reserve("w")
    Cancels(app.redis, clock).request("default", job_id, "alice", "dlq", "")
    assert sweep_once(app)["cancels_pruned"] == 0  # still running: kept
    q.ack(job, "done before the worker noticed")
    assert sweep_once(app)["cancels_pruned"] == 1
    assert app.redis.hlen(q.keys.cancels) == 0


def test_the_bulk_duty_steps_a_paced_purge_and_audits_its_end(app, clock):
    from antre.control.bulk import BulkReplays
    from antre.control.purge import PurgeFilter
    from antre_worker.duties import Duties

    q = app.queue()
    for i in range(4):
        q.enqueue("ping", {"i": i}, idempotency_key=f"p:{i}")
    task = BulkReplays(app.redis, clock).start_purge("default", PurgeFilter("ready"), 2, 10,
                                                     "alice", "flood")
    duties = Duties(app, clock=clock)
    for _ in range(3):
        clock.advance(1_000)
        duties.run("bulk_replays")
        app.redis.delete(keys.maintenance_lock("bulk_replays"))  # the next tick
    assert BulkReplays(app.redis, clock).get("default", task.id).state == "done"
    (entry,) = app.audit.list(action="purge.done")
    assert (entry.user, entry.reason, entry.detail["removed"]) == ("alice", "flood", 4)


# -- cancel keeps its word --------------------------------------------------------------------
def _ends_with_the_cancel(app, clock, job_id, by, reason):
    """The job's timeline records the request (who, why) and ends with the cancel."""
    events = Finder(app.redis, clock).timeline("default", job_id).events
    asked = [e for e in events if e.kind == "cancel_requested"]
    assert len(asked) == 1 and asked[0].actor == by and asked[0].details["reason"] == reason
    assert events[-1].kind == "cancelled" and events[-1].details["by"] == by
    assert [e.kind for e in events].count("reserved") == 1  # never reserved again
    return events


def test_a_sync_handler_that_ignores_the_cancel_ends_within_the_grace_and_never_runs_again(
        app, clock, table):
    runs, release = [], threading.Event()

    @app.handler("slow_report", cancel_grace_s=10)
    def slow_report(ctx, payload):
        runs.append(ctx.job.deliveries)
        ctx.db.execute(text("INSERT INTO effects (k) VALUES ('report')"))
        release.wait(10)  # ignores ctx.cancelled
        return "late"

    q = app.queue()
    job_id = app.enqueue("slow_report", {}, idempotency_key="sr:1")
    w = make_worker(app, clock, heartbeat_s=60)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("code", w.run()))
    t.start()
    try:
        assert wait_for(lambda: runs == [1])
        Cancels(app.redis, clock).request("default", job_id, "alice", "dlq", "wrong month")
        w.heartbeat_once()  # seen: the grace starts
        clock.advance(9_999)
        w.heartbeat_once()
        assert q.get(job_id).state == "inflight"  # within the grace
        clock.advance(1)
        w.heartbeat_once()  # grace over: abandoned, to the DLQ, the process recycles
        t.join(5)
        assert out["code"] == EXIT_RECYCLE
        job = q.get(job_id)
        assert (job.state, job.reason, job.attempt) == (
            "dead", "cancelled by alice: wrong month", 0)
    finally:
        release.set()
    make_worker(app, clock).run_burst()  # another worker: nothing to run
    assert runs == [1] and effects(app) == [] and q.where(job_id) == ["dead"]
    _ends_with_the_cancel(app, clock, job_id, "alice", "wrong month")


def test_a_cancelled_job_handed_back_at_shutdown_ends_as_cancelled(app, clock):
    runs, release = [], threading.Event()

    @app.handler("slow_report", cancel_grace_s=60)
    def slow_report(ctx, payload):
        runs.append(ctx.job.deliveries)
        release.wait(10)
        return "late"

    q = app.queue()
    job_id = app.enqueue("slow_report", {}, idempotency_key="sr:2")
    w = make_worker(app, clock, stop_grace_s=0.2)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert wait_for(lambda: runs == [1])
        Cancels(app.redis, clock).request("default", job_id, "bob", "discard", "dup")
        w.heartbeat_once()  # seen: within a grace of 60 s ...
        w.stop()  # ... the worker stops: the hand-back ends the job instead (retry.lua)
        t.join(10)
        assert not t.is_alive() and q.get(job_id) is None  # discarded, as asked
    finally:
        release.set()
    make_worker(app, clock).run_burst()
    assert runs == [1] and "handed_back" not in q.stats()
    assert q.stats()["discarded"] == 1 and w.counts["cancelled"] == 1
    events = _ends_with_the_cancel(app, clock, job_id, "bob", "dup")
    assert events[-1].details["to"] == "discard"


def test_an_async_handler_that_ignores_cancellation_is_abandoned_and_never_runs_again(
        app, clock):
    import asyncio

    runs, swallowed, release = [], [], threading.Event()

    @app.handler("slow_fetch", cancel_grace_s=5)
    async def slow_fetch(ctx, payload):
        runs.append(ctx.job.deliveries)
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                swallowed.append(1)  # ignores the cancellation
        return "late"

    q = app.queue()
    job_id = app.enqueue("slow_fetch", {}, idempotency_key="sf:1")
    w = make_worker(app, clock)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("code", w.run()))
    t.start()
    try:
        assert wait_for(lambda: runs == [1])
        Cancels(app.redis, clock).request("default", job_id, "carol", "dlq", "stuck api")
        w.heartbeat_once()  # seen: its task is cancelled, it carries on
        assert wait_for(lambda: swallowed)
        assert q.get(job_id).state == "inflight"
        clock.advance(5_000)
        w.heartbeat_once()  # grace over: abandoned, the process recycles
        t.join(10)
        assert out["code"] == EXIT_RECYCLE
        assert (q.get(job_id).state, q.get(job_id).reason) == (
            "dead", "cancelled by carol: stuck api")
    finally:
        release.set()
    make_worker(app, clock).run_burst()
    assert runs == [1] and "acked" not in q.stats()
    _ends_with_the_cancel(app, clock, job_id, "carol", "stuck api")
