"""Per-key turns and fair-share groups through a real in-process worker: a hot key
runs in enqueue order with no snooze; a handler's ``ordered=False`` lets the key's next job go
first; a handler's default group comes from the payload; a small group finishes long before a
big group's backlog; burst mode drains what waits on a key or a group; a group's rate starts
its jobs window by window while other jobs run at once."""

from __future__ import annotations

import pytest
from helpers import burst

from antre import InvalidJob, Retryable
from antre.engine.queue import JobSpec


def test_a_hot_key_runs_in_order_without_snoozes_and_burst_drains_it(app, clock, q):
    ran = []

    @app.handler("step")
    def step(ctx, payload):
        ran.append(payload["i"])

    app.enqueue_many([app.spec("step", {"i": i}, idempotency_key=f"s{i}", lock_key="order:42")
                      for i in range(60)])
    _, counts = burst(app, clock, threads=3, prefetch=8)
    assert ran == list(range(60))
    stats = q.stats()
    assert stats.get("lock_busy", 0) == 0 and stats.get("snoozed", 0) == 0
    assert q.redis.zcard(q.keys.waiting) == 0 and q.redis.hlen(q.keys.turns) == 0


def test_ordered_false_lets_the_next_job_of_the_key_go_first(app, clock, q):
    ran = []

    @app.handler("flaky", ordered=False)
    def flaky(ctx, payload):
        ran.append((payload["i"], ctx.job.attempt))
        if payload["i"] == 0 and ctx.job.attempt == 0:
            raise Retryable("not yet", retry_after_s=0)

    ids = [app.enqueue("flaky", {"i": i}, idempotency_key=f"f{i}", lock_key="k")
           for i in range(3)]
    burst(app, clock)
    # the retried job waited at the end of the line; its turn came before its backoff ended
    assert ran == [(0, 0), (1, 0), (2, 0)] and q.get(ids[0]).state == "scheduled"
    clock.advance(60_000)
    burst(app, clock)
    assert ran[-1] == (0, 1) and q.get(ids[0]).state == "done"


def test_ordered_true_keeps_the_retried_job_at_the_head(app, clock, q):
    ran = []

    @app.handler("flaky2")
    def flaky2(ctx, payload):
        ran.append((payload["i"], ctx.job.attempt))
        if payload["i"] == 0 and ctx.job.attempt == 0:
            raise Retryable("not yet", retry_after_s=0)

    ids = [app.enqueue("flaky2", {"i": i}, idempotency_key=f"g{i}", lock_key="k")
           for i in range(3)]
    burst(app, clock)  # the head is in its backoff: the others wait behind it, undelivered
    assert ran == [(0, 0)] and [q.get(i).state for i in ids] == ["scheduled", "waiting", "waiting"]
    clock.advance(60_000)
    burst(app, clock)
    assert ran == [(0, 0), (0, 1), (1, 0), (2, 0)]


def test_a_handlers_default_group_comes_from_the_payload(app, clock, q):
    @app.handler("tenant_job", group=lambda payload: f"tenant:{payload['tenant']}",
                 group_concurrency=1)
    def tenant_job(ctx, payload):
        pass

    ids = [app.enqueue("tenant_job", {"tenant": 7, "i": i}, idempotency_key=f"t{i}")
           for i in range(3)]
    assert [q.get(i).group for i in ids] == ["tenant:7"] * 3
    assert [q.get(i).state for i in ids] == ["ready", "waiting", "waiting"]
    other = app.enqueue("tenant_job", {"tenant": 7}, idempotency_key="o", group="vip")
    assert q.get(other).group == "vip" and q.get(other).state == "ready"
    burst(app, clock)
    assert all(q.get(i).state == "done" for i in ids)
    with pytest.raises(InvalidJob, match="group function"):
        app.enqueue("tenant_job", {"no_tenant": 1}, idempotency_key="bad")


def test_a_small_group_finishes_early_behind_a_big_backlog(app, clock, q):
    order = []

    @app.handler("work")
    def work(ctx, payload):
        order.append(payload["g"])

    app.enqueue_many([JobSpec("work", {"g": "A"}, f"a{i}", group="A") for i in range(1000)])
    app.enqueue_many([JobSpec("work", {"g": "B"}, f"b{i}", group="B") for i in range(20)])
    burst(app, clock, prefetch=8)
    last_b = max(i for i, g in enumerate(order) if g == "B")
    assert len(order) == 1020 and last_b < 200  # without groups it would be 1019



def test_a_groups_rate_through_a_real_worker_starts_its_jobs_per_window_only(app, clock, q):
    ran = []

    @app.handler("call_api", group=lambda payload: f"tenant:{payload['t']}", group_rate="3/s")
    def call_api(ctx, payload):
        ran.append((payload["t"], payload["i"], clock()))

    ids = [app.enqueue("call_api", {"t": 1, "i": i}, idempotency_key=f"r{i}") for i in range(8)]
    others = [app.enqueue("call_api", {"t": 2, "i": i}, idempotency_key=f"o{i}")
              for i in range(3)]

    @app.handler("step_plain")
    def step_plain(ctx, payload):
        ran.append((0, 0, clock()))

    plain = app.enqueue("step_plain", {}, idempotency_key="p")

    t0 = clock()
    windows = []
    for _ in range(4):
        before = len(ran)
        burst(app, clock, threads=3, prefetch=8)
        windows.append(sorted((t, i) for t, i, _ in ran[before:] if t == 1))
        clock.advance(1000)
    # tenant 1: three starts a second, in windows; tenant 2 and the plain job ran at once
    assert [len(w) for w in windows] == [3, 3, 2, 0]
    assert {(t, i) for t, i, at in ran if at == t0} >= {(2, 0), (2, 1), (2, 2), (0, 0)}
    for job_id in ids + others + [plain]:
        job = q.get(job_id)
        assert (job.state, job.deliveries, job.attempt, job.snoozes) == ("done", 1, 0, 0)
    assert q.stats().get("snoozed", 0) == 0 and q.stats().get("retried", 0) == 0


@pytest.mark.parametrize("lowered", [False, True], ids=["its_own_slots", "an_operators_override"])
def test_a_group_with_four_slots_runs_four_jobs_at_once_on_four_runners(app, clock, q, lowered):
    """One runner's batch takes its share of a group's slots, not all of them: the group's four
    ready jobs go to four runners and run together (each waits until four run, or gives up)."""
    import threading

    from antre.groups.control import GroupControl

    cond, running, peak = threading.Condition(), [0], [0]

    @app.handler("tenant_job")
    def tenant_job(ctx, payload):
        with cond:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            cond.notify_all()
            cond.wait_for(lambda: peak[0] >= 4, timeout=5)  # (a bound for a failing run)
            running[0] -= 1

    @app.handler("noop")
    def noop(ctx, payload):
        pass

    # ungrouped jobs first: fast, so each runner's batch grows to its prefetch of 16
    app.enqueue_many([app.spec("noop", {}, idempotency_key=f"n{i}") for i in range(400)])
    slots = {} if lowered else {"group_concurrency": 4}
    app.enqueue_many([app.spec("tenant_job", {"i": i}, idempotency_key=f"t{i}", group="acme",
                               **slots) for i in range(12)])
    if lowered:
        GroupControl(app.redis, clock).set_slots("default", "acme", 4, "ops", "noisy tenant")
    burst(app, clock, threads=4, prefetch=16)
    assert peak[0] == 4  # four at once, never more than its slots
    assert q.stats()["acked"] == 412
