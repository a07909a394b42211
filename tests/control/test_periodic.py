"""Periodic jobs: tick arithmetic (pure), bad input refused at registration, each tick enqueued
once with three schedulers racing, catch-up policies after an outage, pause / resume / run now,
and the worker duty. The clock is injected: nothing sleeps."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from antre import Antre, InvalidJob
from antre.clock import ManualClock
from antre.maintenance.periodic import (Schedules, due_ticks, latest_tick, make_schedule, next_tick,
                            tick_fields, tick_key)
from antre_worker.duties import Duties

MIN_MS = 60_000


def utc_ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


START = utc_ms(2026, 11, 30, 8, 0, 30)  # half a minute past a 5-minute tick


@pytest.fixture
def clock():
    return ManualClock(START)


@pytest.fixture
def app(redis_url, clock):
    a = Antre(redis_url=redis_url, clock=clock)

    @a.periodic("*/5 * * * *", "reconcile_stock", payload={"warehouse": "north"})
    def reconcile_stock(ctx, payload):
        return None

    yield a
    a.redis.close()


def ready_keys(app: Antre, queue: str = "default") -> list[str]:
    q = app.queue(queue)
    ids = q.redis.lrange(q.keys.ready, 0, -1)
    return sorted(q.get(i).idempotency_key for i in ids)


# -- pure tick arithmetic --------------------------------------------------------------------
def test_cron_ticks_in_a_timezone():
    s = make_schedule("daily", "t", cron="0 9 * * *", timezone="Europe/Paris")
    at = utc_ms(2026, 11, 30, 8, 30)  # 09:30 in Paris (UTC+1 in winter)
    assert latest_tick(s, at) == utc_ms(2026, 11, 30, 8, 0)
    assert next_tick(s, at) == utc_ms(2026, 12, 1, 8, 0)
    assert latest_tick(s, utc_ms(2026, 11, 30, 8, 0)) == utc_ms(2026, 11, 30, 8, 0)


def test_interval_ticks_are_aligned():
    s = make_schedule("flush", "t", every_s=30)
    assert latest_tick(s, 1_000_045_000) == 1_000_020_000
    assert next_tick(s, 1_000_020_000) == 1_000_050_000


T0 = utc_ms(2026, 11, 30, 8, 0)


@pytest.mark.parametrize("policy, missed_ticks, expected", [
    # on time: the one due tick runs under every policy
    ("skip", 0, [T0 + 50 * MIN_MS]),
    ("once", 0, [T0 + 50 * MIN_MS]),
    ("all", 0, [T0 + 50 * MIN_MS]),
    # the scheduler was down: ticks 5..45 missed, tick 50 is on time
    ("skip", 9, [T0 + 50 * MIN_MS]),
    ("once", 9, [T0 + 50 * MIN_MS]),
    ("all", 9, [T0 + m * MIN_MS for m in (35, 40, 45, 50)]),
])
def test_catch_up_policies_with_an_on_time_tick(policy, missed_ticks, expected):
    s = make_schedule("s", "t", cron="*/5 * * * *", catch_up=policy, max_catch_up=3)
    last = T0 + (45 - 5 * missed_ticks) * MIN_MS
    assert due_ticks(s, last, T0 + 50 * MIN_MS + 10_000) == expected


@pytest.mark.parametrize("policy, expected", [
    ("skip", []),
    ("once", [T0 + 45 * MIN_MS]),
    ("all", [T0 + m * MIN_MS for m in (35, 40, 45)]),
])
def test_catch_up_policies_when_every_due_tick_is_late(policy, expected):
    s = make_schedule("s", "t", cron="*/5 * * * *", catch_up=policy, max_catch_up=3)
    assert due_ticks(s, T0, T0 + 47 * MIN_MS) == expected  # 47 min: tick 45 is 2 min late


def test_nothing_is_due_before_the_next_tick():
    s = make_schedule("s", "t", cron="*/5 * * * *")
    assert due_ticks(s, T0, T0 + 4 * MIN_MS) == []


def test_tick_key_names_the_schedule_and_the_time():
    assert tick_key("reconcile_stock", T0) == "periodic:reconcile_stock:2026-11-30T08:00:00Z"


# -- bad input at registration ---------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"cron": "61 * * * *"}, "invalid cron expression '61 \\* \\* \\* \\*'"),
    ({"cron": "* * *"}, "invalid cron expression"),
    ({"cron": "*/5 * * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
    ({}, "either a cron expression or every_s"),
    ({"cron": "* * * * *", "every_s": 5}, "either a cron expression or every_s"),
    ({"every_s": 0}, "every_s must be a whole number"),
    ({"every_s": 10, "catch_up": "sometimes"}, "catch_up must be one of skip, once, all"),
    ({"every_s": 10, "max_attempts_typo": 3}, "unknown job options"),
    ({"every_s": 10, "payload": {"when": datetime.now()}}, "not JSON-serialisable"),
])
def test_bad_schedules_fail_at_registration(redis_url, kwargs, message):
    app = Antre(redis_url=redis_url)
    cron = kwargs.pop("cron", None)
    with pytest.raises(InvalidJob, match=message):
        app.periodic(cron, "t", **kwargs)
    assert app.schedules == {}


def test_two_schedules_of_one_name_are_refused(app):
    with pytest.raises(InvalidJob, match="exists already: pass name="):
        app.periodic("0 * * * *", "reconcile_stock")
    app.periodic("0 * * * *", "reconcile_stock", name="reconcile_hourly")
    assert set(app.schedules) == {"reconcile_stock", "reconcile_hourly"}


# -- exactly once cluster-wide ---------------------------------------------------------------
def test_three_schedulers_enqueue_each_of_100_ticks_once(app, clock):
    schedulers = [app.scheduler() for _ in range(3)]
    for s in schedulers:
        s.run_once()  # first sight: starts at the latest tick, runs none of the past
    stored: list[int] = []
    for _ in range(100):
        clock.advance(5 * MIN_MS)
        barrier = threading.Barrier(3)
        results: list = []

        def run(s=None) -> None:
            barrier.wait()
            results.extend(s.run_once())

        threads = [threading.Thread(target=run, kwargs={"s": s}) for s in schedulers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcomes = sorted(r.outcome for r in results)  # a scheduler that read the state
        assert outcomes[0] == "stored" and set(outcomes[1:]) <= {"tick"}  # late sees no tick
        stored.extend(r.tick_ms for r in results if r.outcome == "stored")
    keys = ready_keys(app)
    assert len(keys) == 100 == len(set(keys)) == len(set(stored))
    assert keys[0] == "periodic:reconcile_stock:2026-11-30T08:05:00Z"
    assert app.queue().get(app.redis.lindex(app.queue().keys.ready, 0)).payload == \
        {"warehouse": "north"}


def test_a_late_scheduler_cannot_enqueue_a_tick_again_after_its_job_finished(app, clock):
    one, late = app.scheduler(), app.scheduler()
    one.run_once()
    clock.advance(5 * MIN_MS)
    [first] = one.run_once()
    q = app.queue()
    [job] = q.reserve("w")
    q.ack(job)
    # a scheduler that read the state before the tick was enqueued, sending it only now
    schedule = late.schedules[0]
    fields = tick_fields(q, schedule, first.tick_ms, clock())
    assert q.store([fields], clock()) == [(first.job_id, "tick")]
    assert q.redis.llen(q.keys.ready) == 0
    assert late.run_once() == []


@pytest.mark.parametrize("policy, expected", [("skip", 0), ("once", 1), ("all", 3)])
def test_catch_up_after_a_scheduler_outage(redis_url, clock, policy, expected):
    app = Antre(redis_url=redis_url, clock=clock)
    app.periodic("*/5 * * * *", "report", catch_up=policy, max_catch_up=3)
    app.scheduler().run_once()
    clock.advance(47 * MIN_MS)  # down for 9 ticks; the latest is 2 minutes late
    results = app.scheduler().run_once()
    assert len(results) == expected == len(ready_keys(app))
    assert [r.outcome for r in results] == ["stored"] * expected
    clock.advance(3 * MIN_MS)  # the next tick, on time
    assert [r.outcome for r in app.scheduler().run_once()] == ["stored"]
    app.redis.close()


# -- operators: pause, resume, run now, the listing ------------------------------------------
def test_pause_skips_ticks_and_resume_does_not_catch_up(app, clock):
    scheduler = app.scheduler()
    scheduler.run_once()
    ops = Schedules(app.redis, clock=clock)
    assert ops.set_paused("reconcile_stock", True, "alice").paused
    for _ in range(3):
        clock.advance(5 * MIN_MS)
        assert [r.outcome for r in scheduler.run_once()] == ["paused"]
    assert ready_keys(app) == []
    ops.set_paused("reconcile_stock", False, "alice")
    assert scheduler.run_once() == []  # the paused ticks are not caught up
    clock.advance(5 * MIN_MS)
    assert [r.outcome for r in scheduler.run_once()] == ["stored"]


def test_run_now_enqueues_a_run_and_leaves_the_ticks_alone(app, clock):
    scheduler = app.scheduler()
    scheduler.run_once()
    ops = Schedules(app.redis, clock=clock)
    before = ops.info("reconcile_stock")
    assert before.last_outcome == "never run"
    job_id = ops.run_now("reconcile_stock")
    info = ops.info("reconcile_stock")
    assert info.last_job_id == job_id and info.last_outcome == "ready"
    assert info.last_tick_ms == before.last_tick_ms
    assert info.next_run_ms == utc_ms(2026, 11, 30, 8, 5)
    assert app.queue().get(job_id).idempotency_key.startswith("periodic:reconcile_stock:manual:")
    q = app.queue()
    [job] = q.reserve("w")
    q.bury(job, reason="stock service down")
    info = ops.info("reconcile_stock")
    assert info.last_outcome == "dead" and info.last_error == "stock service down"
    clock.advance(5 * MIN_MS)
    assert [r.outcome for r in scheduler.run_once()] == ["stored"]


def test_unknown_schedule_is_a_clear_error(app):
    app.scheduler().run_once()
    with pytest.raises(KeyError, match="no schedule named 'nope'"):
        Schedules(app.redis).run_now("nope")


def test_the_worker_duty_enqueues_due_ticks(app, clock):
    duties = Duties(app)
    assert duties.run("periodic") == []
    clock.advance(5 * MIN_MS)
    app.redis.delete(*app.redis.keys("antre:{maint}:*"))  # the duty's tick lock expired
    [result] = duties.run("periodic")
    assert result.outcome == "stored"
    assert ready_keys(app) == ["periodic:reconcile_stock:2026-11-30T08:05:00Z"]


def test_a_schedule_no_scheduler_runs_any_more_is_shown_stale(app, clock):
    app.scheduler().run_once()
    ops = Schedules(app.redis, clock=clock)
    assert ops.info("reconcile_stock").stale is False
    clock.advance(6 * MIN_MS)  # removed from the code: no scheduler publishes it any more
    info = ops.info("reconcile_stock")
    assert info.stale is True and info.seen_ms == START
