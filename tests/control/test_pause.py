"""Pause and resume of a queue or a job type (incident controls), against a real Redis."""

from __future__ import annotations

import pytest

from antre.control.pause import PauseError, Pauses
from antre.observe.readmodels import ReadModels


@pytest.fixture
def pauses(r, clock):
    return Pauses(r, clock)


def enqueue(q, job_type, n, start=0):
    return [q.enqueue(job_type, {"i": i}, idempotency_key=f"{job_type}:{i}")
            for i in range(start, start + n)]


def test_paused_queue_reserves_nothing_and_spends_nothing(q, pauses, clock):
    ids = enqueue(q, "a", 3)
    info = pauses.pause("jobs", None, "alice", "bad deploy")
    assert (info.by, info.reason, info.at_ms, info.job_type) == ("alice", "bad deploy",
                                                                 clock(), None)
    assert q.reserve("w1", 10) == []
    enqueue(q, "a", 2, start=3)  # enqueue goes on
    assert ReadModels(q.redis, clock).queue_info("jobs").ready == 5
    assert all(q.get(i).deliveries == 0 and q.get(i).epoch == 0 for i in ids)
    assert pauses.resume("jobs", None) == 0
    got = q.reserve("w1", 10)
    assert [j.id for j in got][:3] == ids  # oldest first, as before the pause
    assert all(j.deliveries == 1 and j.attempt == 0 for j in got)


def test_paused_type_is_parked_and_does_not_block_other_types(q, pauses, clock):
    slow = enqueue(q, "slow", 5)  # at the oldest end
    fast = enqueue(q, "fast", 3)
    pauses.pause("jobs", "slow", "bob", "downstream is down")
    got = q.reserve("w1", 3)
    assert [j.id for j in got] == fast
    assert q.where(slow[0]) == ["ready"]  # parked, still a ready job
    info = ReadModels(q.redis, clock).queue_info("jobs")
    assert (info.ready, info.parked) == (5, 5)
    assert [p.job_type for p in info.paused] == ["slow"]
    assert all(q.get(i).deliveries == 0 for i in slow)
    enqueue(q, "fast", 1, start=3)
    assert len(q.reserve("w1", 5)) == 1
    assert pauses.resume("jobs", "slow") == 5
    assert [j.id for j in q.reserve("w1", 10)] == slow  # back in their order, oldest first
    assert ReadModels(q.redis, clock).queue_info("jobs").parked == 0


def test_parking_is_bounded_per_reserve(q, pauses):
    enqueue(q, "slow", 1000)
    enqueue(q, "fast", 1)
    pauses.pause("jobs", "slow", "bob", "why")
    assert q.reserve("w1", 1) == []  # 500 parked by this call, nothing else found yet
    assert q.reserve("w1", 1) == []
    assert [j.type for j in q.reserve("w1", 1)] == ["fast"]
    assert pauses.resume("jobs", "slow") == 1000


def test_repeat_and_bad_input_are_refused(q, pauses):
    pauses.pause("jobs", None, "a", "x")
    with pytest.raises(PauseError, match="already paused"):
        pauses.pause("jobs", None, "a", "x")
    with pytest.raises(PauseError, match="not paused"):
        pauses.resume("jobs", "t")
    with pytest.raises(PauseError, match="reason is required"):
        pauses.pause("jobs", "t", "a", "   ")
    with pytest.raises(PauseError, match="bad job type"):
        pauses.pause("jobs", "*", "a", "x")
    assert [p.job_type for p in pauses.of_queue("jobs")] == [None]


def test_interrupted_resume_is_finished_by_unpark_stale(q, pauses, r):
    ids = enqueue(q, "slow", 4)
    pauses.pause("jobs", "slow", "a", "x")
    assert q.reserve("w1", 4) == []
    r.hdel(q.keys.paused, "slow")  # the pause is gone but no one moved the parked jobs back
    assert pauses.unpark_stale("jobs") == 4
    assert [j.id for j in q.reserve("w1", 10)] == ids


def test_type_paused_again_while_parked_keeps_jobs_parked(q, pauses):
    enqueue(q, "slow", 3)
    pauses.pause("jobs", "slow", "a", "x")
    q.reserve("w1", 1)
    assert pauses.unpark("jobs", "slow") == 0  # still paused: nothing moves
    assert q.reserve("w1", 5) == []
