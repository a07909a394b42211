"""BulkReplays: paced, tracked replays of a filtered DLQ set; filtered discard."""

from __future__ import annotations

import pytest

from antre.control.bulk import BulkReplays, BulkResult, TaskNotFound, TaskStateError
from antre.clock import ManualClock
from antre.engine.queue import Queue
from antre.observe.readmodels import DeadFilter, ReadModels


def bury_jobs(q: Queue, clock: ManualClock, n: int, job_type: str = "email",
              error: str = "smtp down", step_ms: int = 10) -> list[str]:
    ids = []
    for i in range(n):
        q.enqueue(job_type, {"i": i}, idempotency_key=f"{job_type}:{i}:{clock()}")
        (job,) = q.reserve("w1")
        q.bury(job, reason="permanent", error=error)
        ids.append(job.id)
        clock.advance(step_ms)
    return ids


@pytest.fixture
def env(r):
    clock = ManualClock()
    q = Queue(r, "default", clock=clock)
    return clock, q, BulkReplays(r, clock), ReadModels(r, clock)


def test_rate_holds_over_steps_and_finishes(env):
    clock, q, bulk, reads = env
    bury_jobs(q, clock, 30)
    task = bulk.start("default", DeadFilter(), rate_per_s=5, maximum=100, user="op", reason="r")
    assert task.total == 30 and task.state == "running"
    assert bulk.step_all() == 0  # no time elapsed yet
    counts = []
    for _ in range(4):
        clock.advance(1000)
        counts.append(bulk.step_all())
    assert counts == [5, 5, 5, 5]
    clock.advance(500)
    assert bulk.step_all() == 2  # half a second: 2.5 -> 2, the rest carried
    clock.advance(500)
    assert bulk.step_all() == 3
    t = bulk.get("default", task.id)
    assert t.replayed == 25 and t.state == "running"
    assert reads.queue_info("default").ready == 25
    clock.advance(10_000)  # long gap: bursts are capped at BURST_S seconds' worth
    assert bulk.step_all() == 5
    clock.advance(1000)
    bulk.step_all()
    t = bulk.get("default", task.id)
    assert t.state == "done" and t.replayed == 30 and t.finished_at


def test_burst_is_capped(env):
    clock, q, bulk, _ = env
    bury_jobs(q, clock, 50)
    bulk.start("default", DeadFilter(), rate_per_s=4, maximum=100, user="op")
    clock.advance(60_000)
    assert bulk.step_all() == 8  # 2 s worth


def test_pause_stops_progress_and_resume_restarts(env):
    clock, q, bulk, _ = env
    bury_jobs(q, clock, 20)
    task = bulk.start("default", DeadFilter(), rate_per_s=2, maximum=100, user="op")
    clock.advance(1000)
    assert bulk.step_all() == 2
    bulk.pause("default", task.id)
    for _ in range(3):
        clock.advance(1000)
        assert bulk.step_all() == 0
    assert bulk.get("default", task.id).replayed == 2
    with pytest.raises(TaskStateError):
        bulk.pause("default", task.id)
    bulk.resume("default", task.id)
    assert bulk.step_all() == 0  # no credit for the paused time
    clock.advance(1000)
    assert bulk.step_all() == 2


def test_cancel_ends_task(env):
    clock, q, bulk, reads = env
    bury_jobs(q, clock, 10)
    task = bulk.start("default", DeadFilter(), rate_per_s=3, maximum=100, user="op")
    clock.advance(1000)
    bulk.step_all()
    t = bulk.cancel("default", task.id)
    assert t.state == "cancelled" and t.finished_at
    clock.advance(5000)
    assert bulk.step_all() == 0
    assert reads.count_dead("default") == 7
    with pytest.raises(TaskStateError):
        bulk.resume("default", task.id)
    with pytest.raises(TaskNotFound):
        bulk.cancel("default", "nope")


def test_maximum_respected(env):
    clock, q, bulk, reads = env
    bury_jobs(q, clock, 20)
    task = bulk.start("default", DeadFilter(), rate_per_s=100, maximum=7, user="op")
    for _ in range(3):
        clock.advance(1000)
        bulk.step_all()
    t = bulk.get("default", task.id)
    assert t.replayed == 7 and t.state == "done"
    assert reads.count_dead("default") == 13


def test_filter_by_type_and_group_and_oldest_first(env):
    clock, q, bulk, reads = env
    a = bury_jobs(q, clock, 4, job_type="email", error="smtp down")
    bury_jobs(q, clock, 3, job_type="sms", error="smtp down")
    bury_jobs(q, clock, 2, job_type="email", error="bad address")
    group = next(g.group for g in reads.error_groups("default")
                 if "smtp" in g.signature and g.job_type == "email")
    both = DeadFilter(job_type="email", group=group)
    assert bulk.dry_run("default", both) == 4
    assert bulk.dry_run("default", DeadFilter(job_type="email")) == 6
    task = bulk.start("default", both, rate_per_s=2, maximum=100, user="op")
    clock.advance(1000)
    assert bulk.step_all() == 2
    assert [r.id for r in reads.ready("default").rows] == a[:2]  # oldest first
    clock.advance(2000)
    bulk.step_all()
    t = bulk.get("default", task.id)
    assert t.replayed == 4 and t.state == "done"
    assert reads.count_dead("default", DeadFilter(job_type="sms")) == 3


def test_jobs_dying_after_start_are_not_replayed_by_the_task(env):
    clock, q, bulk, reads = env
    bury_jobs(q, clock, 2)
    task = bulk.start("default", DeadFilter(), rate_per_s=10, maximum=100, user="op")
    clock.advance(1)
    late = bury_jobs(q, clock, 1)
    clock.advance(1000)
    bulk.step_all()
    assert bulk.get("default", task.id).state == "done"
    assert [r.id for r in reads.dead("default").rows] == late


def test_replay_filtered_now_and_discard_filtered(env):
    clock, q, bulk, reads = env
    bury_jobs(q, clock, 5, job_type="email")
    bury_jobs(q, clock, 3, job_type="sms")
    out = bulk.replay_filtered_now("default", DeadFilter(job_type="email"), maximum=3)
    assert out.done == 3 and out.dead_before == 8 and out.dead_after == 5
    out = bulk.discard_filtered("default", DeadFilter(job_type="sms"), maximum=100)
    assert out == BulkResult(done=3, skipped=0, dead_before=5, dead_after=2)
    assert reads.count_dead("default") == 2


def test_list_and_validation(env, r):
    clock, q, bulk, _ = env
    bury_jobs(q, clock, 1)
    Queue(r, "other", clock=clock).enqueue("x", {}, idempotency_key="k")
    t1 = bulk.start("default", DeadFilter(), rate_per_s=1, maximum=1, user="op")
    clock.advance(5)
    t2 = bulk.start("other", DeadFilter(), rate_per_s=1, maximum=1, user="op")
    assert [t.id for t in bulk.list()] == [t2.id, t1.id]
    assert [t.id for t in bulk.list("default")] == [t1.id]
    with pytest.raises(ValueError):
        bulk.start("default", DeadFilter(), rate_per_s=0, maximum=1, user="op")
    with pytest.raises(ValueError):
        bulk.start("default", DeadFilter(), rate_per_s=1, maximum=0, user="op")
