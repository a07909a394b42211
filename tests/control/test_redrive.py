"""A paced replay that stops itself: the scripts count what the jobs a task
replayed did, the task pauses itself past its threshold and says why; replay to another queue."""

from __future__ import annotations

import json

import pytest
from helpers import burst

from antre import Antre, Permanent
from antre.clock import ManualClock
from antre.control import redrive
from antre.control.bulk import BulkReplays
from antre.engine import keys
from antre.engine.queue import Queue
from antre.observe.readmodels import DeadFilter, ReadModels
from antre.groups.control import GroupControl


def failing_app(app: Antre, mode: dict[str, str]) -> Antre:
    @app.handler("email", max_attempts=3)
    def email(ctx, payload):  # type: ignore[no-untyped-def]
        if mode["now"] == "fail":
            raise Permanent("smtp relay refused the message")
        return {"sent": payload["i"]}
    return app


def dead_group(app: Antre, clock: ManualClock, n: int) -> str:
    """``n`` jobs of type email dead in one error group (run and failed by a real worker)."""
    q = app.queue()
    for i in range(n):
        q.enqueue("email", {"i": i}, idempotency_key=f"email:{i}")
    burst(app, clock)
    groups = ReadModels(app.redis, clock).error_groups("default")
    assert len(groups) == 1 and groups[0].total == n
    return groups[0].group


def drive(app: Antre, clock: ManualClock, bulk: BulkReplays, task_id: str, rounds: int = 30):
    """Step the task once a second with a worker burst after each step, while it runs."""
    for _ in range(rounds):
        clock.advance(1000)
        bulk.step_all()
        burst(app, clock)
        task = bulk.get("default", task_id)
        if task.state != "running":
            return task
    return bulk.get("default", task_id)


def test_redrive_over_a_group_that_fails_again_stops_within_the_threshold(app, clock):
    mode = {"now": "fail"}
    failing_app(app, mode)
    group = dead_group(app, clock, 60)
    bulk = BulkReplays(app.redis, clock)
    task = bulk.start("default", DeadFilter(group=group), rate_per_s=10, maximum=1000,
                      user="op", stop_pct=20, min_sample=20)
    task = drive(app, clock, bulk, task.id)
    assert task.state == "paused"
    # judged after 20 replayed jobs (the sample), at most one step's worth past it
    assert 20 <= task.replayed <= 30
    assert task.paused_reason.startswith(f"paused: {task.replayed} of {task.replayed} "
                                         "replayed jobs failed again (more than 20%)")
    assert ("20 died again in group permanent: Permanent: smtp relay refused the message"
            in task.paused_reason)
    assert task.paused_reason.endswith("resume or cancel")
    assert ReadModels(app.redis, clock).count_dead("default") == 60  # all back in the DLQ
    for _ in range(3):  # paused: nothing more replayed
        clock.advance(1000)
        assert bulk.step_all() == 0
    listed = bulk.list("default")[0]
    assert (listed.failed, listed.died, listed.same) == (task.replayed,) * 3


def test_redrive_whose_replays_succeed_runs_to_the_end(app, clock):
    mode = {"now": "fail"}
    failing_app(app, mode)
    group = dead_group(app, clock, 45)
    mode["now"] = "ok"
    bulk = BulkReplays(app.redis, clock)
    task = bulk.start("default", DeadFilter(group=group), rate_per_s=10, maximum=1000,
                      user="op", stop_pct=20, min_sample=20)
    task = drive(app, clock, bulk, task.id)
    assert task.state == "done" and task.replayed == 45 and not task.paused_reason
    assert ReadModels(app.redis, clock).count_dead("default") == 0
    assert bulk.list("default")[0].failed == 0


def test_resume_judges_only_the_jobs_replayed_after_it(app, clock):
    mode = {"now": "fail"}
    failing_app(app, mode)
    group = dead_group(app, clock, 80)
    bulk = BulkReplays(app.redis, clock)
    task = bulk.start("default", DeadFilter(group=group), rate_per_s=10, maximum=1000,
                      user="op", stop_pct=50, min_sample=10)
    task = drive(app, clock, bulk, task.id)
    assert task.state == "paused" and task.paused_reason
    stopped_at = task.replayed
    mode["now"] = "ok"  # the operator fixed the relay
    resumed = bulk.resume("default", task.id)
    assert resumed.state == "running" and resumed.paused_reason == ""
    assert resumed.base_replayed == stopped_at and resumed.base_failed == stopped_at
    task = drive(app, clock, bulk, task.id)
    assert task.state == "done"  # its earlier failures no longer count against it


def test_a_threshold_of_zero_never_stops(app, clock):
    mode = {"now": "fail"}
    failing_app(app, mode)
    group = dead_group(app, clock, 30)
    bulk = BulkReplays(app.redis, clock)
    task = bulk.start("default", DeadFilter(group=group), rate_per_s=10, maximum=1000,
                      user="op", stop_pct=0)
    task = drive(app, clock, bulk, task.id)
    assert task.state == "done" and task.replayed == 30


def test_only_the_tasks_replays_count_for_it(r):
    clock = ManualClock(1_700_000_000_000)
    q = Queue(r, "default", clock=clock)
    for i in range(3):
        q.enqueue("t", {"i": i}, idempotency_key=f"k{i}")
    jobs = q.reserve("w", 3)
    for job in jobs:
        q.bury(job, reason="permanent", error="boom")
    assert q.replay(jobs[0].id, "op", None, "T1")
    assert q.replay(jobs[1].id, "op")  # by hand: not the task's
    for job in q.reserve("w", 2):
        q.retry(job, delay_ms=0, error="boom", kind="error")  # a first failure: counted
    for job in q.reserve("w", 2):
        q.retry(job, delay_ms=0, error="boom", kind="error")  # a second: not again
    for job in q.reserve("w", 2):
        q.bury(job, reason="permanent", error="boom")
    w = redrive.read_watch(r, "default", "", "T1")
    assert (w.failed, w.died, w.same) == (1, 1, 1)
    assert r.hgetall(keys.QueueKeys("default").replay_watch).keys() == {
        "T1|failed", "T1|died", "T1|same", "T1|last"}


def test_verdict_and_settings():
    assert redrive.verdict(19, 19, 20, 20, 0, "") == ""  # below the sample
    assert redrive.verdict(20, 4, 20, 20, 0, "") == ""  # 20% is not more than 20%
    assert redrive.verdict(20, 5, 20, 20, 0, "") == (
        "paused: 5 of 20 replayed jobs failed again (more than 20%); resume or cancel")
    assert "3 died again in group boom" in redrive.verdict(20, 5, 20, 20, 3, "boom")
    for bad in ((-1, 20), (101, 20), (float("nan"), 20), (20, 0)):
        with pytest.raises(ValueError):
            redrive.check_guard(*bad)


def test_replay_to_another_queue(r):
    clock = ManualClock(1_700_000_000_000)
    src, dst = Queue(r, "default", clock=clock), Queue(r, "slow", clock=clock)
    dst.enqueue("t", {}, idempotency_key="makes-slow-known")
    ids = []
    for i in range(5):
        ids.append(src.enqueue("t", {"i": i}, idempotency_key=f"k{i}", headers={"h": "v"}))
    for job in src.reserve("w", 5):
        src.bury(job, reason="permanent", error="boom")
    bulk, reads = BulkReplays(r, clock), ReadModels(r, clock)
    with pytest.raises(ValueError, match=r"unknown queue 'nope' to replay into: pass one of "
                                         r"default, slow"):
        bulk.start("default", DeadFilter(), 10, 100, "op", target="nope")
    task = bulk.start("default", DeadFilter(), 10, 100, "op", target="slow")
    assert task.target == "slow" and task.description.endswith("→ queue slow")
    clock.advance(1000)
    assert bulk.step_all() == 5
    assert reads.count_dead("default") == 0
    assert reads.queue_info("slow").ready == 6
    moved = dst.get(ids[0])
    assert moved is not None and moved.payload == {"i": 0} and moved.headers == {"h": "v"}
    assert moved.idempotency_key == "k0" and moved.attempt == 0
    assert r.hget(dst.keys.job(ids[0]), "moved_from") == f"default/{ids[0]}"
    events = [json.loads(e) for e in r.lrange(src.keys.timeline(ids[0]), 0, -1)]
    assert events[-1]["k"] == "discarded" and events[-1]["x"]["moved_to"] == "slow"
    # the moved jobs' failures count for the task, in the queue they went to
    for job in dst.reserve("w", 6):
        if job.id in ids:
            dst.bury(job, reason="permanent", error="boom")
    assert bulk.list("default")[0].died == 5
    assert bulk.get("default", task.id).state == "done"


def test_replay_to_another_queue_keeps_the_group_and_its_limit(r):
    clock = ManualClock(1_700_000_000_000)
    src, dst = Queue(r, "default", clock=clock), Queue(r, "slow", clock=clock)
    dst.enqueue("t", {}, idempotency_key="makes-slow-known")
    ids = [src.enqueue("t", {"i": i}, idempotency_key=f"g{i}", group="tenant:7",
                       group_concurrency=2, group_rate="50/s") for i in range(5)]
    for _ in range(5):  # two at a time (each call one): the group's limit in its own queue
        for job in src.reserve("w", 5):
            src.bury(job, reason="permanent", error="boom")
    assert ReadModels(r, clock).count_dead("default") == 5
    # an operator's override of the group in the source queue: it stays there
    GroupControl(r, clock).set_slots("default", "tenant:7", 1, "op", "noisy tenant")
    bulk = BulkReplays(r, clock)
    task = bulk.start("default", DeadFilter(), 10, 100, "op", target="slow")
    clock.advance(1000)
    assert bulk.step_all() == 5
    moved = [dst.get(i) for i in ids]
    assert all(j is not None and j.group == "tenant:7" and j.group_rate == "50/s"
               for j in moved)
    assert {r.hget(dst.keys.job(i), "gconc") for i in ids} == {"2"}
    # in the queue it went to, the group runs two at a time, the others wait their turn
    assert sorted(j.state for j in moved if j is not None) == ["ready"] * 2 + ["waiting"] * 3
    assert r.scard(dst.keys.group_held("tenant:7")) == 2
    # and the move says what did not follow: the source queue's override of the group
    events = [json.loads(e) for e in r.lrange(src.keys.timeline(ids[0]), 0, -1)]
    assert events[-1]["x"]["moved_to"] == "slow"
    assert events[-1]["x"]["group"] == "tenant:7 (2 at a time, 50/s)"
    assert events[-1]["x"]["not_moved"] == (
        "its override of the group's slots stayed in queue default")
