"""A delivery's routine events are kept in the job's hash. reserve writes no
'reserved' event and a plain ack no 'completed' one; the timeline's reader makes them from the
hash, and anything else that happens to the job writes the pending 'reserved' event out first,
so the stored list stays in the order things happened. Real Redis, the clock injected."""

from __future__ import annotations

import json

import pytest

from antre.engine.queue import JobSpec, Queue
from antre.observe.finder import Finder

W = "host:1:ab"


@pytest.fixture
def q(r, clock):
    return Queue(r, "jobs", clock=clock)


def events(r, clock, job_id):
    return [(e.at_ms, e.kind, e.actor, e.details)
            for e in Finder(r, clock).timeline("jobs", job_id).events]


def stored(q, job_id):
    return [json.loads(e) for e in q.redis.lrange(q.keys.timeline(job_id), 0, -1)]


def test_a_plain_success_stores_no_timeline_and_reads_both_events_from_the_hash(q, r, clock):
    q.enqueue_many([JobSpec("t", {"i": 1}, "k1")])
    t0 = clock()
    clock.advance(40)
    (job,) = q.reserve(W)
    clock.advance(250)
    assert q.ack_many([(job, {"ok": True})], notes=[{"ran_ms": 240}]) == []
    assert not r.exists(q.keys.timeline(job.id))  # no key at all for the usual job
    assert events(r, clock, job.id) == [
        (t0, "enqueued", "producer", {"delay_ms": 0, "trace_id": job.trace_id}),
        (t0 + 40, "reserved", W, {"epoch": 1, "delivery": 1, "deadline": t0 + 40 + 30_000}),
        (t0 + 290, "completed", W, {"result": '{"ok":true}', "since_reserved_ms": 250,
                                    "ran_ms": 240}),
    ]


def test_an_in_flight_job_shows_its_reserved_event_before_anything_is_stored(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    (job,) = q.reserve(W)
    assert not r.exists(q.keys.timeline(job.id))
    assert [e[1] for e in events(r, clock, job.id)] == ["enqueued", "reserved"]


def test_a_failure_writes_the_pending_reserved_event_first_then_its_own(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    t0 = clock()
    (job,) = q.reserve(W)
    clock.advance(100)
    q.retry(job, delay_ms=0, error="boom", kind="error")
    assert [(e["t"], e["k"], e["d"].get("epoch")) for e in stored(q, job.id)] == [
        (t0, "reserved", 1), (t0 + 100, "failed", None)]
    assert r.hget(q.keys.job(job.id), "tlf") == "1"  # epoch 1's event is in the list
    clock.advance(100)
    (again,) = q.reserve("host:2:cd")
    clock.advance(10)
    assert q.ack_many([(again, None)]) == []
    got = events(r, clock, job.id)
    assert [(e[1], e[2], e[3].get("epoch")) for e in got] == [
        ("enqueued", "producer", None), ("reserved", W, 1), ("failed", W, None),
        ("reserved", "host:2:cd", 2), ("completed", "host:2:cd", None)]
    assert got[3][3] == {"epoch": 2, "delivery": 2, "deadline": t0 + 200 + 30_000}
    # nothing written twice: the stored list holds epoch 1's reservation once, 2's not at all
    assert [e["k"] for e in stored(q, job.id)] == ["reserved", "failed"]


def test_a_burial_writes_the_pending_reserved_event_first(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    (job,) = q.reserve(W)
    clock.advance(5)
    q.bury(job, reason="bad", error="ValueError: bad")
    assert [e["k"] for e in stored(q, job.id)] == ["reserved", "buried"]
    assert [e[1] for e in events(r, clock, job.id)] == ["enqueued", "reserved", "buried"]


def test_a_job_put_back_without_an_event_gets_its_last_reservation_written_at_the_next(
        q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    (job,) = q.reserve(W)
    # what no script of this version does: back to ready with nothing written (a path that
    # writes no event, or an older version's): the next reserve writes epoch 1's event out
    r.zrem(q.keys.inflight, job.id)
    r.hset(q.keys.job(job.id), "state", "ready")
    r.rpush(q.keys.ready, job.id)
    clock.advance(50)
    (again,) = q.reserve("host:2:cd")
    assert [(e["k"], e["a"], e["d"]["epoch"]) for e in stored(q, job.id)] == [
        ("reserved", W, 1)]
    assert [(e[1], e[3].get("epoch")) for e in events(r, clock, job.id)] == [
        ("enqueued", None), ("reserved", 1), ("reserved", 2)]


def test_a_reservation_an_older_version_stored_is_shown_once(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    t0 = clock()
    (job,) = q.reserve(W)
    # an older version wrote every delivery's event when it reserved
    r.rpush(q.keys.timeline(job.id), json.dumps(
        {"t": t0, "k": "reserved", "a": W, "d": {"epoch": 1, "delivery": 1,
                                                  "deadline": t0 + 30_000}}))
    assert [e[1] for e in events(r, clock, job.id)] == ["enqueued", "reserved"]
    q.retry(job, delay_ms=0, error="boom", kind="error")  # writes it out again: read once
    assert [e["k"] for e in stored(q, job.id)] == ["reserved", "reserved", "failed"]
    assert [e[1] for e in events(r, clock, job.id)] == ["enqueued", "reserved", "failed"]


def test_a_completion_an_older_version_stored_is_not_made_again(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    (job,) = q.reserve(W)
    clock.advance(7)
    q.ack(job, {"n": 1}, note={"ran_ms": 6})
    # an older version stored the completion (and so the reservation) as it acked
    for e in ({"t": job.reserved_at, "k": "reserved", "a": W,
               "d": {"epoch": 1, "delivery": 1, "deadline": job.deadline}},
              {"t": clock(), "k": "completed", "a": W,
               "d": {"result": '{"n":1}', "since_reserved_ms": 7}, "x": {"ran_ms": 6}}):
        r.rpush(q.keys.timeline(job.id), json.dumps(e))
    got = events(r, clock, job.id)
    assert [(e[1], e[2]) for e in got] == [("enqueued", "producer"), ("reserved", W),
                                           ("completed", W)]
    assert got[-1][3] == {"result": '{"n":1}', "since_reserved_ms": 7, "ran_ms": 6}


def test_a_duplicate_ack_is_written_out_and_no_completion_is_made_for_it(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    (job,) = q.reserve(W)
    q.ack(job, None, counter="deduplicated")
    assert [e["k"] for e in stored(q, job.id)] == ["reserved", "deduplicated"]
    assert [e[1] for e in events(r, clock, job.id)] == ["enqueued", "reserved", "deduplicated"]


def test_damaged_lease_fields_make_no_event_and_break_no_read(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    (job,) = q.reserve(W)
    r.hset(q.keys.job(job.id), mapping={"reserved_at": "1e999"})
    assert [e[1] for e in events(r, clock, job.id)] == ["enqueued"]
    q.retry(job, delay_ms=0, error="boom", kind="error")  # nothing to write out: no event
    assert [e["k"] for e in stored(q, job.id)] == ["failed"]


def test_an_extension_writes_the_reservation_out_with_its_own_deadline_first(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    t0 = clock()
    (job,) = q.reserve(W)
    clock.advance(1_000)
    q.extend(job.id, job.epoch, 60_000, mode="add", actor="alice")
    got = [(e["k"], e["d"].get("deadline")) for e in stored(q, job.id)]
    assert got == [("reserved", t0 + 30_000), ("extended", t0 + 30_000 + 60_000)]


def test_an_expired_lease_writes_the_reservation_out_before_the_sweep(q, r, clock):
    q.enqueue_many([JobSpec("t", {}, "k1")])
    t0 = clock()
    (job,) = q.reserve(W)
    clock.advance(31_000)
    q.sweep()
    assert [(e["k"], e["d"].get("deadline"), e["d"].get("outcome")) for e in stored(q, job.id)] == [
        ("reserved", t0 + 30_000, None), ("swept", None, "ready")]
