"""Flow limits held at reserve, through real workers: jobs over a type's
concurrency limit wait in its line and run as slots free, never more than the limit at once,
with no snooze, no extra delivery and no attempt spent; kill -9 of a slot's holder frees the
slot when the sweeper returns its job; a rate limit gives later starts in scheduled, again
with no snooze. The lease clock is advanced in the test process (``later``), never slept for."""

from __future__ import annotations

import pytest

from antre import Antre, LimitPolicy
from antre.engine.queue import JobSpec, Queue

from helpers import burst, spawn
from test_worker_process import later, wait_for

APP = "tests.apps.flowlimits:app"


@pytest.fixture
def proc_app(redis_url, monkeypatch):
    monkeypatch.setenv("_T_URL", redis_url)
    return Antre(redis_url=redis_url)


def child(redis_url, tmp_path, *extra, threads=6):
    return spawn(redis_url, ["antre_worker.child", APP, "--threads", str(threads),
                             "--heartbeat", "0.2", *extra], tmp_path / "worker.log")


def jobs(q: Queue, job_type: str, n: int, hold_first: bool = False) -> list[str]:
    return q.enqueue_many([JobSpec(job_type, {"i": i, "hold": hold_first and i == 0},
                                   f"{job_type}:{i}") for i in range(n)])


def test_jobs_over_a_limit_of_two_run_with_no_snooze_and_never_three_at_once(
        proc_app, r, tmp_path, procs):
    q = proc_app.queue()
    ids = jobs(q, "limited", 30)
    p = child(proc_app.redis_url, tmp_path, "--burst")
    procs.append(p)
    assert p.wait(60) == 0
    done = [q.get(i) for i in ids]
    assert [j.state for j in done] == ["done"] * 30
    assert int(r.get("flow:peak")) == 2  # six threads, two at once
    assert all(j.deliveries == 1 and j.attempt == 0 and j.snoozes == 0 for j in done)
    stats = r.hgetall(q.keys.stats)
    assert int(stats.get("limit_held", 0)) > 0  # the limit was reached: jobs waited in its line
    assert int(stats.get("concurrency_limited", 0)) == 0
    assert r.scard(q.keys.gate_held("type:limited")) == 0


def test_kill_9_of_a_slots_holder_frees_the_slot_on_the_sweep(proc_app, r, tmp_path, procs):
    q = proc_app.queue()
    ids = jobs(q, "solo", 3, hold_first=True)
    p = child(proc_app.redis_url, tmp_path)
    procs.append(p)
    wait_for(lambda: r.llen("flow:runs") == 1, timeout=60, what="the first job started")
    p.kill()
    p.wait(10)
    assert [q.get(i).state for i in ids] == ["inflight", "waiting", "waiting"]
    assert r.smembers(q.keys.gate_held("type:solo")) == {ids[0]}
    assert later(31_000).sweep().requeued == 1
    assert r.scard(q.keys.gate_held("type:solo")) == 0  # freed with the sweep
    r.set("flow:go", 1)
    r.set("flow:now", 0)  # the killed run never counted itself off
    p2 = child(proc_app.redis_url, tmp_path, "--burst")
    procs.append(p2)
    assert p2.wait(30) == 0
    assert [q.get(i).state for i in ids] == ["done"] * 3
    assert q.get(ids[0]).deliveries == 2 and q.get(ids[1]).deliveries == 1
    assert all(q.get(i).snoozes == 0 for i in ids)


def test_a_limit_of_one_across_threads_is_held_without_snoozes(app, clock, q):
    import threading
    import time
    active, peak, lock = [0], [0], threading.Lock()

    @app.handler("exclusive", flow=LimitPolicy(concurrency=1))
    def exclusive(ctx, payload):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1

    ids = [app.enqueue("exclusive", {"i": i}, idempotency_key=f"ex:{i}") for i in range(8)]
    _, counts = burst(app, clock, threads=4)
    assert [q.get(i).state for i in ids] == ["done"] * 8 and peak[0] == 1
    assert counts.get("concurrency_limited", 0) == 0
    assert all(q.get(i).deliveries == 1 and q.get(i).attempt == 0 for i in ids)


def test_a_rate_limit_is_held_in_scheduled_without_snoozes(app, clock, q):
    ran: list[int] = []

    @app.handler("paced", flow=LimitPolicy(rate_per_s=5))
    def paced(ctx, payload):
        ran.append(payload["i"])

    ids = [app.enqueue("paced", {"i": i}, idempotency_key=f"pace:{i}") for i in range(12)]
    _, counts = burst(app, clock, threads=2)
    assert len(ran) == 5  # five starts in the first second; the rest wait for theirs
    assert sum(q.get(i).state == "scheduled" for i in ids) == 7
    for _ in range(2):
        clock.advance(1000)
        _, more = burst(app, clock, threads=2)
        counts.update(more)
    assert sorted(ran) == list(range(12))
    assert counts.get("rate_limited", 0) == 0 and counts.get("snoozed", 0) == 0
    assert all(q.get(i).deliveries == 1 for i in ids)
