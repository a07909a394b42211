"""antre.testing's helpers on their own: drain's rounds and clock, assert_enqueued's matching
and messages, inline mode, bind, and the fixtures (``pytest_plugins = ["antre.testing"]`` in
the suite's conftest)."""

from __future__ import annotations

import asyncio

import pytest

from antre import Antre, Permanent, Retryable
from antre.clock import ManualClock
from antre.testing import (assert_enqueued, assert_not_enqueued, bind, drain, embedded_app,
                           enqueued, inline)


def test_the_fixture_gives_a_flushed_app_on_a_manual_clock(antre_app, antre_server):
    assert isinstance(antre_app.clock, ManualClock)
    assert antre_app.redis_url == antre_server.url
    assert antre_app.redis.dbsize() == 0


def test_drain_moves_the_clock_to_each_retry_until_the_job_dies(antre_app):
    @antre_app.handler("flaky", max_attempts=4)
    def flaky(ctx, payload):
        raise Retryable("still down")

    before = antre_app.clock()
    job_id = antre_app.enqueue("flaky", {}, idempotency_key="f")
    done = drain(antre_app)
    assert antre_app.job(job_id).state == "dead"
    assert [e.attempt for e in done.retried] == [1, 2, 3] and done.dead[0].attempt == 4
    assert done.advanced_ms > 0 and antre_app.clock() - before == done.advanced_ms
    with pytest.raises(AssertionError, match="still down"):
        done.raise_dead()


def test_drain_without_advance_leaves_the_retry_scheduled(antre_app):
    @antre_app.handler("flaky")
    def flaky(ctx, payload):
        raise Retryable("later")

    job_id = antre_app.enqueue("flaky", {}, idempotency_key="f")
    done = drain(antre_app, advance=False)
    assert antre_app.job(job_id).state == "scheduled" and done.advanced_ms == 0
    assert len(done.retried) == 1


def test_a_delayed_job_runs_once_its_time_comes(antre_app):
    antre_app.handler("later")(lambda ctx, payload: "ran")
    job_id = antre_app.enqueue("later", {}, idempotency_key="l", delay_s=3600)
    assert drain(antre_app, advance=False).rounds == 0
    done = drain(antre_app)
    assert antre_app.job(job_id).state == "done" and done.advanced_ms >= 3_600_000


def test_a_groups_limit_lets_one_run_at_a_time_and_all_finish(antre_app):
    seen: list[int] = []
    antre_app.handler("t", group=lambda p: p["tenant"], group_concurrency=1)(
        lambda ctx, payload: seen.append(payload["i"]))
    ids = [antre_app.enqueue("t", {"tenant": "a", "i": i}, idempotency_key=f"t{i}")
           for i in range(5)]
    drain(antre_app)
    assert sorted(seen) == list(range(5))
    assert all(antre_app.job(i).state == "done" for i in ids)


def test_async_handlers_run_too(antre_app):
    @antre_app.handler("aio")
    async def aio(ctx, payload):
        await asyncio.sleep(0)
        return payload["n"] * 2

    antre_app.enqueue("aio", {"n": 21}, idempotency_key="aio")
    assert [e.result for e in drain(antre_app).succeeded] == [42]


def test_assert_enqueued_matches_given_fields_and_says_what_was_there(antre_app):
    @antre_app.handler("order")
    def order(ctx, payload):
        ctx_app = antre_app
        ctx_app.enqueue("email", {"to": payload["email"], "order": payload["id"]},
                        idempotency_key=f"email:{payload['id']}", queue="mail")

    antre_app.handler("email", queue="mail")(lambda ctx, payload: None)
    antre_app.enqueue("order", {"id": 7, "email": "a@example.org"}, idempotency_key="order:7")
    drain(antre_app)
    [job] = assert_enqueued(antre_app, type="email", payload={"order": 7}, queue="mail")
    assert job.idempotency_key == "email:7"
    assert_enqueued(antre_app, type="order", count=1, idempotency_key="order:7")
    assert_not_enqueued(antre_app, type="email", payload={"order": 8})
    with pytest.raises(AssertionError, match=r"found none; enqueued:\n- order on default"):
        assert_enqueued(antre_app, type="sms")
    with pytest.raises(AssertionError, match="expected 2 job"):
        assert_enqueued(antre_app, type="email", count=2)
    with pytest.raises(TypeError, match="unknown field"):
        assert_enqueued(antre_app, type="email", colour="red")
    assert [e.job_type for e in enqueued(antre_app)] == ["order", "email"]


def test_inline_runs_each_job_at_enqueue_and_what_it_enqueues(antre_app):
    ran: list[str] = []

    @antre_app.handler("parent")
    def parent(ctx, payload):
        ran.append("parent")
        antre_app.enqueue("child", {}, idempotency_key="child")
        ran.append("parent done")

    antre_app.handler("child")(lambda ctx, payload: ran.append("child"))
    with inline(antre_app) as report:
        job_id = antre_app.enqueue("parent", {}, idempotency_key="parent")
        assert antre_app.job(job_id).state == "done"  # before the next line
        assert ran == ["parent", "parent done", "child"]
    assert len(report.succeeded) == 2
    antre_app.enqueue("parent", {}, idempotency_key="parent-2")  # not inline any more
    assert antre_app.job(enqueued(antre_app)[-1].job_id).state == "ready"


def test_inline_raises_at_the_end_for_a_dead_job_unless_allowed(antre_app):
    @antre_app.handler("bad")
    def bad(ctx, payload):
        raise Permanent("no such order")

    with pytest.raises(AssertionError, match="no such order"):
        with inline(antre_app):
            antre_app.enqueue("bad", {}, idempotency_key="b1")
    with inline(antre_app, allow_dead=True) as report:
        antre_app.enqueue("bad", {}, idempotency_key="b2")
    assert [e.error_kind for e in report.dead] == ["permanent"]


def test_bind_points_an_apps_own_instance_at_the_server(antre_server):
    app = Antre()  # as a project builds it at import, with its handlers
    app.handler("x")(lambda ctx, payload: "x")
    bind(app, antre_server.url)
    app.redis.flushall()
    job_id = app.enqueue("x", {}, idempotency_key="x")
    drain(app)
    assert app.job(job_id).state == "done"
    with pytest.raises(RuntimeError, match="connected already"):
        bind(app, antre_server.url)


def test_drain_refuses_an_app_on_the_wall_clock(antre_server):
    with pytest.raises(RuntimeError, match="ManualClock"):
        drain(Antre(redis_url=antre_server.url))


def test_embedded_app_with_a_database_records_idempotency():
    with embedded_app(database=True) as app:
        app.handler("x")(lambda ctx, payload: {"ok": True})
        app.enqueue("x", {}, idempotency_key="x:1")
        drain(app)
        assert app.result("x:1").status == "completed"
        assert app.result("x:1").result == {"ok": True}
