"""A worker's batch of failures in one script call (``Queue.fail_many``,
fail_many.lua). Each job is applied exactly as retry.lua / bury.lua apply it alone (compared
field by field and event by event with the single-job scripts on a twin queue), fenced on its
own lease; a stale epoch, a record that is not a hash and a record that breaks the script
part-way are each dealt with alone, and no job leaves every list."""

from __future__ import annotations

import dataclasses
import json

from antre.control.cancel import Cancels
from antre.engine.failing import Failure
from antre.engine.queue import JobSpec, Queue
from antre.observe.finder import Finder

VOLATILE = {"id", "queue", "trace_id", "enqueued_at", "created_at", "reserved_at", "idem_key",
            "entropy"}


def _jobs(q: Queue, n: int, **kw) -> list:
    q.enqueue_many([JobSpec("charge", {"i": i}, f"k{i}", **kw) for i in range(n)])
    return sorted(q.reserve("w1", count=n), key=lambda j: j.payload["i"])


def _retry(job, **kw) -> Failure:
    return Failure(job, "retry", "TimeoutError: upstream 504", "retryable", "Traceback (most "
                   "recent call last):\n  boom\n", {"ran_ms": 3}, delay_ms=5000, **kw)


def _bury(job) -> Failure:
    return Failure(job, "bury", "Declined: card 4242", "permanent", "Traceback ...\n",
                   {"ran_ms": 4}, reason="permanent error: card declined")


def _fields(q: Queue, job_id: str) -> dict[str, str]:
    got = q.redis.hgetall(q.keys.job(job_id))
    errors = json.loads(got.pop("errors", "[]"))
    return {**{k: v for k, v in got.items() if k not in VOLATILE},
            "errors": json.dumps([{k: v for k, v in e.items() if k != "at"} for e in errors])}


def _events(r, clock, q: Queue, job_id: str) -> list[tuple[str, str, dict]]:
    return [(e.kind, e.actor, {k: v for k, v in e.details.items() if k != "trace_id"})
            for e in Finder(r, clock).timeline(q.name, job_id).events]


def test_a_batch_ends_each_job_as_the_single_job_scripts_do(r, clock):
    one, many = Queue(r, "one", clock=clock), Queue(r, "many", clock=clock)
    a1, b1 = _jobs(one, 2)
    a2, b2 = _jobs(many, 2)
    one.retry(a1, delay_ms=5000, error="TimeoutError: upstream 504", kind="retryable",
              traceback="Traceback (most recent call last):\n  boom\n", note={"ran_ms": 3})
    group = one.bury(b1, reason="permanent error: card declined", error="Declined: card 4242",
                     kind="permanent", traceback="Traceback ...\n", note={"ran_ms": 4})
    assert many.fail_many([_retry(a2), _bury(b2)]) == ["OK", f"OK:{group}"]
    for single, batched in ((a1, a2), (b1, b2)):
        assert _fields(many, batched.id) == _fields(one, single.id)
        assert _events(r, clock, many, batched.id) == _events(r, clock, one, single.id)
        assert many.where(batched.id) == one.where(single.id)
    assert {k: v for k, v in many.stats().items()} == {k: v for k, v in one.stats().items()}
    assert r.zscore(many.keys.scheduled, a2.id) == clock() + 5000
    assert json.loads(r.hget(many.keys.error_groups, group))["total"] == 1


def test_a_mixed_batch_with_a_stale_lease_and_broken_records_loses_no_job(q, r, clock):
    retried, buried, stale, not_hash, broken, cancelled = _jobs(q, 6)
    # a record of another type where the job hash should be; a dead-by-type index that is not a
    # ZSET (bury_job's ZADD fails after the job left inflight); an operator's cancel request
    r.delete(q.keys.job(not_hash.id))
    r.set(q.keys.job(not_hash.id), "garbage")
    r.hset(q.keys.job(broken.id), "type", "odd")
    r.set(q.keys.dead_by_type("odd"), "not a zset")
    Cancels(r, clock).request("jobs", cancelled.id, "alice", "dlq", "wrong month")
    replies = q.fail_many([_retry(retried), _bury(buried),
                           _retry(dataclasses.replace(stale, epoch=stale.epoch + 1)),
                           _bury(not_hash), _bury(broken), _retry(cancelled)])
    assert replies[0] == "OK" and replies[1].startswith("OK:") and replies[5] == "CANCELLED"
    assert replies[2].startswith("LOST:lease epoch") and replies[3].startswith("LOST:job record")
    assert replies[4].startswith("LOST:")
    assert q.where(retried.id) == ["scheduled"] and q.get(retried.id).attempt == 1
    assert q.where(buried.id) == ["dead"] and q.get(buried.id).reason.startswith("permanent")
    assert q.where(stale.id) == ["inflight"] and q.get(stale.id).state == "inflight"
    assert q.where(not_hash.id) == ["inflight"]  # the sweeper buries it as corrupt
    assert "inflight" in q.where(broken.id)  # put back: its lease expiry deals with it
    got = q.get(cancelled.id)
    assert (got.state, got.reason) == ("dead", "cancelled by alice: wrong month")
    assert [e[0] for e in _events(r, clock, q, cancelled.id)][-1] == "cancelled"


def test_an_unordered_retry_in_a_batch_passes_its_turn_and_its_group_slot(q, clock):
    q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}", lock_key="order:1", group="g",
                            group_concurrency=1) for i in range(2)])
    (head,) = q.reserve("w1", count=5)
    assert q.fail_many([_retry(head, keep_turn=False)]) == ["OK"]
    (nxt,) = q.reserve("w1", count=5)
    assert nxt.id != head.id and q.get(head.id).state == "waiting"
    assert q.fail_many([_bury(nxt)])[0].startswith("OK:")
    assert q.get(head.id).state == "scheduled"  # its turn came back: waits out its backoff
    clock.advance(5001)
    q.promote()
    assert [j.id for j in q.reserve("w1", count=5)] == [head.id]


def test_an_ordered_retry_keeps_its_turn(q):
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}", lock_key="order:1")
                          for i in range(2)])
    (head,) = q.reserve("w1", count=5)
    assert q.fail_many([_retry(head)]) == ["OK"]
    assert q.get(head.id).state == "scheduled" and q.get(ids[1]).state == "waiting"
    assert q.reserve("w1", count=5) == []


def test_a_dead_job_keeps_one_copy_of_its_traceback_and_older_ones_bounded(q, r):
    (job,) = _jobs(q, 1)
    long_tb = "Traceback (most recent call last):\n" + "  frame\n" * 700
    q.retry(job, delay_ms=0, error="E: one", kind="retryable", traceback=long_tb + "E: one\n")
    (job,) = q.reserve("w1")
    q.fail_many([Failure(job, "bury", "E: two", "permanent", long_tb + "E: two\n",
                         reason="permanent error: E: two")])
    assert not r.hexists(q.keys.job(job.id), "traceback")  # the entry holds it, once
    got = q.get(job.id)
    assert got.traceback == long_tb + "E: two\n" == got.errors[-1]["traceback"]
    older = got.errors[0]["traceback"]
    assert len(older) == 2000 and older.endswith("E: one\n")


def test_an_error_group_index_of_another_type_fails_each_burial_alone(q, r, clock):
    buried, retried, also_buried = _jobs(q, 3)
    r.set(q.keys.error_groups, "not a hash")
    replies = q.fail_many([_bury(buried), _retry(retried), _bury(also_buried)])
    assert replies[0].startswith("LOST:WRONGTYPE") and replies[2].startswith("LOST:WRONGTYPE")
    assert replies[1] == "OK" and q.where(retried.id) == ["scheduled"]
    for job in (buried, also_buried):  # back in flight: its lease's expiry deals with it
        assert "inflight" in q.where(job.id)
