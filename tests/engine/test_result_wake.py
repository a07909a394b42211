"""The scripts behind ``app.result(key).wait()``: ``result_wait.lua`` counts a waiter
on a job not yet ended and nothing on one that ended or does not exist; every script that ends
a job (ack, ack_many, bury, a sweep to the DLQ, a cancel's end, a purge) pushes one token per
waiter to the job's wake list, which expires, and clears the count; the scripts that put a job
back (retry, snooze, hand-back, a sweep back to ready) push none. ``progress.lua`` is fenced.
Real Redis, the clock injected."""

from __future__ import annotations

import pytest

from antre import LeaseLost
from antre.control.cancel import Cancels
from antre.control.purge import Purger
from antre.engine.queue import JobSpec, Queue


def waited(q: Queue, n: int = 2):
    """A reserved job with ``n`` waiters counted on it."""
    q.enqueue("t", {}, idempotency_key=f"k:{q.clock()}")
    (job,) = q.reserve("w1")
    for _ in range(n):
        assert q.wait_start(job.id) == "inflight"
    return job


def tokens(q: Queue, job_id: str) -> int:
    return int(q.redis.llen(q.keys.result_wake(job_id)))


def assert_woken(q: Queue, job_id: str, n: int = 2) -> None:
    assert tokens(q, job_id) == n
    ttl = q.redis.pttl(q.keys.result_wake(job_id))
    assert 0 < ttl <= 60_000  # the list does not outlive its waiters
    assert q.redis.hget(q.keys.job(job_id), "waiters") is None


def test_result_wait_counts_only_on_a_job_not_yet_ended(q):
    job = waited(q, 1)
    assert q.redis.hget(q.keys.job(job.id), "waiters") == "1"
    q.ack(job, "ok")
    assert q.wait_start(job.id) == "done"  # ended: nothing counted
    assert q.redis.hget(q.keys.job(job.id), "waiters") is None
    assert q.wait_start("no-such-job") == ""
    assert not q.redis.exists(q.keys.job("no-such-job"))  # no hash made for it
    q.redis.set(q.keys.job("broken"), "not a hash")
    assert q.wait_start("broken") == ""


def test_ack_and_ack_many_wake_every_waiter(q):
    one = waited(q, 3)
    q.ack(one, 1)
    assert_woken(q, one.id, 3)
    two, three = waited(q), waited(q, 1)
    assert q.ack_many([(two, 2), (three, 3)]) == []
    assert_woken(q, two.id, 2)
    assert_woken(q, three.id, 1)


def test_a_deduplicated_ack_wakes(q):
    job = waited(q)
    q.ack(job, "stored", counter="deduplicated")
    assert_woken(q, job.id)


def test_a_bury_and_a_sweep_to_the_dlq_wake(q, clock):
    job = waited(q)
    q.bury(job, reason="boom")
    assert_woken(q, job.id)
    q.enqueue("t", {}, idempotency_key="poison", max_deliveries=1)
    (poison,) = q.reserve("w1")
    q.wait_start(poison.id)
    clock.advance(poison.deadline - clock() + 1)
    assert q.sweep().buried == 1  # delivered too often: dead (bury_job)
    assert_woken(q, poison.id, 1)


@pytest.mark.parametrize("to", ["dlq", "discard"])
def test_the_end_of_a_cancelled_job_wakes(q, clock, to):
    job = waited(q)
    Cancels(q.redis, clock, q.scripts).request(q.name, job.id, "alice", to, "why")
    q.finish_cancelled(job, to=to, reason="cancelled by alice: why")
    assert tokens(q, job.id) == 2


def test_a_purge_wakes(q, clock):
    q.enqueue("t", {}, idempotency_key="purged")
    job_id = q.redis.lindex(q.keys.ready, 0)
    assert q.wait_start(job_id) == "ready"
    Purger(q.redis, clock, q.scripts).delete(q.name, job_id)
    assert tokens(q, job_id) == 1


def test_putting_a_job_back_wakes_nobody(q, clock):
    job = waited(q)
    q.retry(job, delay_ms=1000, error="later")
    clock.advance(2000)
    q.promote()
    (job,) = q.reserve("w1")
    q.snooze(job, 10, "lock_busy")
    clock.advance(20)
    q.promote()
    (job,) = q.reserve("w1")
    q.hand_back(job)
    (job,) = q.reserve("w1")
    clock.advance(job.deadline - clock() + 1)
    assert q.sweep().requeued == 1
    assert tokens(q, job.id) == 0
    assert q.redis.hget(q.keys.job(job.id), "waiters") == "2"  # still waiting for its end
    (job,) = q.reserve("w1")
    q.ack(job, "at last")
    assert_woken(q, job.id)


def test_progress_is_fenced_and_adds_no_event(q, clock):
    q.enqueue("t", {}, idempotency_key="p")
    (job,) = q.reserve("w1")
    events = q.redis.llen(q.keys.timeline(job.id))
    q.progress(job, 0.5, "half")
    assert q.redis.llen(q.keys.timeline(job.id)) == events
    clock.advance(job.deadline - clock() + 1)
    q.sweep()
    with pytest.raises(LeaseLost):
        q.progress(job, 0.9, "stale")  # the job is ready again: no holder may write
    assert '"m":"half"' in q.redis.hget(q.keys.job(job.id), "progress")


def test_many_jobs_nobody_waits_for_get_no_wake_lists(q):
    q.enqueue_many([JobSpec("t", {}, f"m{i}") for i in range(20)])
    jobs = q.reserve("w1", count=20)
    q.ack_many([(j, None) for j in jobs[:10]])
    for j in jobs[10:]:
        q.bury(j, reason="x")
    assert not q.redis.keys(q.keys.result_wake("*"))
