"""Lifecycle hooks (antre.hooks): each event told once with what it says, sync and async
methods, and a hook that raises changes nothing of any job (in-process WorkerProcess on the
test Redis, the clock driven by hand)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from antre import Permanent, Retryable
from antre.hooks import Enqueued, Hook, Hooks, JobEvent, Tick
from helpers import burst, run_async

BACKOFF_MS = 3_600_000  # past any retry's backoff


class Recorder(Hook):
    """Every event, as (method, event)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def on_enqueue(self, event: Enqueued) -> None:
        self.seen.append(("on_enqueue", event))

    def before_job(self, event: JobEvent) -> None:
        self.seen.append(("before_job", event))

    def after_job(self, event: JobEvent) -> None:
        self.seen.append(("after_job", event))

    def on_retry(self, event: JobEvent) -> None:
        self.seen.append(("on_retry", event))

    def on_dead(self, event: JobEvent) -> None:
        self.seen.append(("on_dead", event))

    def on_tick(self, event: Tick) -> None:
        self.seen.append(("on_tick", event))

    def names(self) -> list[str]:
        return [name for name, _ in self.seen]

    def of(self, name: str) -> list:
        return [e for n, e in self.seen if n == name]


class Raising(Hook):
    """Every method raises."""

    def __init__(self) -> None:
        self.calls = 0

    def _boom(self, event: object) -> None:
        self.calls += 1
        raise RuntimeError("the hook's own bug")

    on_enqueue = before_job = after_job = on_retry = on_dead = on_tick = _boom  # type: ignore


def test_a_success_is_enqueue_before_after(app, clock):
    rec = app.add_hook(Recorder())
    app.handler("ok")(lambda ctx, payload: {"n": payload["n"] + 1})
    job_id = app.enqueue("ok", {"n": 1}, idempotency_key="ok:1", lock_key="k1")
    burst(app, clock)
    assert rec.names() == ["on_enqueue", "before_job", "after_job"]
    enq = rec.of("on_enqueue")[0]
    assert (enq.job_id, enq.job_type, enq.queue, enq.idempotency_key, enq.payload,
            enq.lock_key) == (job_id, "ok", "default", "ok:1", {"n": 1}, "k1")
    before, after = rec.of("before_job")[0], rec.of("after_job")[0]
    assert before.job_id == after.job_id == job_id and before.attempt == 1
    assert after.result == {"n": 2} and after.duration_ms is not None


def test_a_retry_then_death_carry_the_error_and_the_dashboards_group(app, clock, q):
    rec = app.add_hook(Recorder())

    @app.handler("flaky", max_attempts=2)
    def flaky(ctx, payload):
        raise Retryable(f"order {payload['order']} timed out")

    job_id = app.enqueue("flaky", {"order": 42}, idempotency_key="flaky:42")
    burst(app, clock)
    clock.advance(BACKOFF_MS)
    burst(app, clock)
    assert rec.names() == ["on_enqueue", "before_job", "on_retry", "before_job", "on_dead"]
    retry, dead = rec.of("on_retry")[0], rec.of("on_dead")[0]
    assert (retry.attempt, dead.attempt) == (1, 2)
    assert retry.delay_ms > 0 and retry.error_kind == "retryable"
    assert isinstance(dead.exception, Retryable) and "order 42 timed out" in dead.error
    assert "Retryable" in dead.traceback
    groups = [json.loads(v)["signature"] for v in q.redis.hgetall(q.keys.error_groups).values()]
    assert groups == [dead.signature]  # the dead job's group, as the dashboard shows it
    assert dead.signature == retry.signature == "retryable: Retryable: order <n> timed out"
    assert q.get(job_id).state == "dead"


def test_a_permanent_error_is_dead_at_once(app, clock):
    rec = app.add_hook(Recorder())

    @app.handler("bad")
    def bad(ctx, payload):
        raise Permanent("no such customer")

    app.enqueue("bad", {}, idempotency_key="bad:1")
    burst(app, clock)
    [dead] = rec.of("on_dead")
    assert (dead.error_kind, dead.signature) == ("permanent", "permanent: Permanent: no such customer")
    assert not rec.of("on_retry")


def test_a_tick_is_told_once_with_its_schedule(app, clock):
    rec = app.add_hook(Recorder())
    app.periodic(job_type="flush", every_s=60)(lambda ctx, payload: None)
    app.scheduler().run_once()  # first sight: starts at the latest tick, enqueues none
    clock.advance(60_000)
    [stored] = [t for t in app.scheduler().run_once() if t.outcome == "stored"]
    app.scheduler().run_once()  # nothing new: nothing told
    [tick] = rec.of("on_tick")
    assert (tick.schedule.name, tick.job_id, tick.tick_ms) == ("flush", stored.job_id,
                                                                stored.tick_ms)
    assert tick.idempotency_key.startswith("periodic:flush:") and tick.queue == "default"
    assert not rec.of("on_enqueue")  # a tick is not an enqueue of the app's own


def test_enqueue_many_and_a_flows_jobs_are_told(app):
    rec = app.add_hook(Recorder())
    for name in ("a", "b", "c"):
        app.handler(name)(lambda ctx, payload: None)
    ids = app.enqueue_many([app.spec("a", {"i": i}, idempotency_key=f"a{i}") for i in range(3)])
    flow = app.chord([app.spec("a", {}, idempotency_key="h1"),
                      app.spec("b", {}, idempotency_key="h2")],
                     app.spec("c", {}, idempotency_key="cb")).enqueue()
    told = rec.of("on_enqueue")
    assert [e.job_id for e in told[:3]] == ids
    assert [(e.job_type, e.flow_id) for e in told[3:]] == [("a", flow.id), ("b", flow.id),
                                                          ("c", flow.id)]


def test_async_methods_run_from_the_worker_and_from_aenqueue(app, clock):
    told: list[tuple[str, str]] = []

    class Async(Hook):
        async def on_enqueue(self, event: Enqueued) -> None:
            await asyncio.sleep(0)
            told.append(("on_enqueue", event.job_id))

        async def after_job(self, event: JobEvent) -> None:
            await asyncio.sleep(0)
            told.append(("after_job", event.job_id))

    app.add_hook(Async())
    app.handler("ok")(lambda ctx, payload: None)
    first = app.enqueue("ok", {}, idempotency_key="ok:1")  # from a thread: the hooks' loop

    async def produce() -> str:
        return await app.aenqueue("ok", {}, idempotency_key="ok:2")

    second = run_async(produce())  # a fresh event loop, as a web request's
    burst(app, clock)
    assert told[:2] == [("on_enqueue", first), ("on_enqueue", second)]
    assert sorted(told[2:]) == sorted([("after_job", first), ("after_job", second)])


def test_a_raising_hook_loses_no_job_and_changes_no_outcome(app, clock, q, caplog):
    raising = app.add_hook(Raising())
    rec = app.add_hook(Recorder())  # added after it: still told of everything
    app.handler("ok")(lambda ctx, payload: "done")

    @app.handler("flaky", max_attempts=2)
    def flaky(ctx, payload):
        raise Retryable("down")

    app.periodic(job_type="ok", every_s=60, name="tick")
    with caplog.at_level(logging.ERROR, logger="antre.hooks"):
        ok = [app.enqueue("ok", {"i": i}, idempotency_key=f"ok{i}") for i in range(20)]
        bad = app.enqueue("flaky", {}, idempotency_key="flaky")
        app.scheduler().run_once()
        clock.advance(60_000)
        app.scheduler().run_once()
        burst(app, clock)
        clock.advance(BACKOFF_MS)
        _, counts = burst(app, clock)
    assert all(q.get(i).state == "done" and q.get(i).result == "done" for i in ok)
    assert q.get(bad).state == "dead" and q.get(bad).attempt == 2
    assert counts.get("buried") == 1
    assert rec.names().count("after_job") == 21 and rec.names().count("on_dead") == 1
    # 20 + 1 enqueues, 1 tick, 22 + 1 starts, 21 successes, a retry and a death
    assert raising.calls == 21 + 1 + 23 + 21 + 1 + 1
    lines = [r for r in caplog.records if getattr(r, "event", "") == "hook_failed"]
    # once per hook method a minute, naming the hook and the method
    assert sorted(r.hook for r in lines) == [
        f"Raising.{m}" for m in ("after_job", "before_job", "on_dead", "on_enqueue",
                                 "on_retry", "on_tick")]
    assert all(r.hook in r.getMessage() for r in lines)


def test_a_failing_method_is_logged_once_a_minute_with_the_count(caplog):
    now = [100.0]
    hooks = Hooks(monotonic=lambda: now[0])

    class Fails(Hook):
        def on_dead(self, event: JobEvent) -> None:
            raise ValueError("nope")

    hooks.add(Fails())
    with caplog.at_level(logging.ERROR, logger="antre.hooks"):
        for _ in range(3):
            hooks.emit(hooks.on_dead, object())
        now[0] += 61
        hooks.emit(hooks.on_dead, object())
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("Fails.on_dead" in m for m in messages)
    assert "(2 more since the last line)" in messages[1]
    assert hooks.errors["Fails.on_dead"] == 4


def test_an_async_method_past_its_timeout_is_a_logged_failure(caplog):
    hooks = Hooks(timeout_s=0.01)

    class Hangs(Hook):
        async def on_enqueue(self, event: Enqueued) -> None:
            await asyncio.Event().wait()  # never set: only the timeout ends it

    hooks.add(Hangs())
    with caplog.at_level(logging.ERROR, logger="antre.hooks"):
        hooks.emit(hooks.on_enqueue, object())
    assert hooks.errors["Hangs.on_enqueue"] == 1
    assert "TimeoutError" in caplog.records[0].getMessage()


def test_only_overridden_methods_are_called_and_remove_takes_a_hook_out():
    hooks = Hooks()

    class OnlyDead(Hook):
        def on_dead(self, event: JobEvent) -> None:
            pass

    hook = hooks.add(OnlyDead())
    assert len(hooks.on_dead) == 1 and not hooks.after_job and not hooks.on_enqueue
    hooks.remove(hook)
    assert not hooks and not hooks.on_dead


def test_a_hook_must_be_a_hook():
    with pytest.raises(TypeError, match="antre.hooks.Hook"):
        Hooks().add(object())  # type: ignore[arg-type]


def test_a_hook_added_after_the_worker_was_made_is_told(app, clock):
    from helpers import make_worker
    app.handler("ok")(lambda ctx, payload: None)
    worker = make_worker(app, clock)  # the app has no hook yet
    rec = app.add_hook(Recorder())
    app.enqueue("ok", {}, idempotency_key="ok:1")
    worker.run_burst()
    assert rec.names() == ["on_enqueue", "before_job", "after_job"]


def test_an_async_handlers_job_is_not_lost_to_a_raising_hook(app, clock, q):
    raising = app.add_hook(Raising())

    @app.handler("aio")
    async def aio(ctx, payload):
        await asyncio.sleep(0)
        return payload["i"]

    ids = [app.enqueue("aio", {"i": i}, idempotency_key=f"aio{i}") for i in range(5)]
    burst(app, clock)
    assert [q.get(i).result for i in ids] == [0, 1, 2, 3, 4]
    assert raising.calls == 5 * 3  # enqueue, start, success
