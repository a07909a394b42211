"""A job an operator cancelled is never put back where a worker could run it again.
The scripts decide, whatever the worker does: a hand-back, retry or snooze (retry.lua), a lease
expiry (sweep_expired.lua) and a reserve of one put back before (reserve.lua) end it as
cancelled, to the DLQ or discarded as requested, and its timeline ends with the cancel."""

from __future__ import annotations

import pytest

from antre.control.cancel import Cancels
from antre.observe.finder import Finder


def _cancelled(q, r, clock, to="dlq"):
    job_id = q.enqueue("report", {}, idempotency_key="k:1", visibility_timeout_s=10)
    (job,) = q.reserve("w1")
    Cancels(r, clock).request("jobs", job_id, "alice", to, "wrong month")
    return job


def _timeline(r, clock, job_id):
    return Finder(r, clock).timeline("jobs", job_id).events


@pytest.mark.parametrize("put_back", [
    lambda q, job: q.hand_back(job),
    lambda q, job: q.retry(job, delay_ms=5_000, error="boom"),
    lambda q, job: q.snooze(job, 1_000, "lock_busy"),
])
def test_a_cancelled_job_is_never_put_back(q, r, clock, put_back):
    job = _cancelled(q, r, clock)
    assert put_back(q, job) is True  # ended as cancelled instead
    got = q.get(job.id)
    assert (got.state, got.reason, got.attempt, got.cancel) == (
        "dead", "cancelled by alice: wrong month", 0, "")
    assert q.where(job.id) == ["dead"] and q.reserve("w2") == []
    assert r.hlen(q.keys.cancels) == 0 and q.stats()["cancelled"] == 1
    events = _timeline(r, clock, job.id)
    assert [e.kind for e in events][-2:] == ["cancel_requested", "cancelled"]
    assert events[-2].actor == "alice" and events[-2].details["reason"] == "wrong month"
    assert events[-1].details["to"] == "dlq"


def test_an_uncancelled_job_is_still_handed_back(q, r, clock):
    job_id = q.enqueue("report", {}, idempotency_key="k:2")
    (job,) = q.reserve("w1")
    assert q.hand_back(job) is False and q.get(job_id).state == "ready"


def test_the_sweeper_ends_a_cancelled_job_it_finds_expired_and_discards_it_as_asked(q, r, clock):
    job = _cancelled(q, r, clock, to="discard")
    clock.advance(10_001)
    assert q.sweep().outcomes == {job.id: "discarded"}
    assert q.get(job.id) is None and q.reserve("w2") == []
    assert q.stats()["discarded"] == 1
    events = _timeline(r, clock, job.id)  # kept after the discard, to say who did it
    assert [e.kind for e in events][-3:] == ["cancel_requested", "swept", "cancelled"]
    assert r.pttl(q.keys.timeline(job.id)) > 0


def test_reserve_ends_a_ready_job_that_holds_a_cancel_request(q, r, clock):
    """A job put back by a version that did not end it (its request still on it)."""
    job = _cancelled(q, r, clock)
    # as the old retry.lua left it: back in ready, the request kept
    r.zrem(q.keys.inflight, job.id)
    r.hset(q.keys.job(job.id), mapping={"state": "ready", "deadline": 0})
    r.rpush(q.keys.ready, job.id)
    assert q.reserve("w2") == []
    got = q.get(job.id)
    assert (got.state, got.reason) == ("dead", "cancelled by alice: wrong month")
    assert _timeline(r, clock, job.id)[-1].kind == "cancelled"


def test_finish_cancelled_records_the_end_on_the_timeline(q, r, clock):
    job = _cancelled(q, r, clock)
    q.finish_cancelled(job, to="dlq", reason="cancelled by alice: wrong month")
    events = _timeline(r, clock, job.id)
    assert events[-1].kind == "cancelled" and events[-1].actor == "w1"
    assert events[-1].details["reason_text"] == "cancelled by alice: wrong month"
