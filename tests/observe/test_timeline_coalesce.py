"""The timeline keeps every transition: checkpoints and a worker's lease
extensions in a row are one event with their count and first and last time; past the cap the
first events stay and the ones between them and the newest are dropped, counted."""

from __future__ import annotations

import pytest

from antre.engine.queue import Queue
from antre.observe.finder import TIMELINE_CAP, Finder


@pytest.fixture
def q(r, clock):
    return Queue(r, "jobs", clock=clock)


def one(q):
    (job,) = q.reserve("host:1:a")
    return job


def test_a_job_checkpointing_every_half_second_keeps_its_first_reserve_and_hand_back(
        q, r, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    job = one(q)
    q.hand_back(job)
    job = one(q)
    first_checkpoint = clock()
    for step in range(400):  # 200 s of a checkpoint every 0.5 s, a heartbeat every 10 s
        clock.advance(500)
        q.checkpoint(job, {"step": step})
        if step % 20 == 0:
            q.extend(job.id, job.epoch, 30_000, mode="at_least")
    q.extend(job.id, job.epoch, 60_000, mode="add", actor="alice")  # an operator's: its own
    q.checkpoint(job, {"step": "last"})
    q.ack(job, {"ok": True})
    tl = Finder(r, clock).timeline("jobs", job_id)
    assert [e.kind for e in tl.events] == [
        "enqueued", "reserved", "handed_back", "reserved", "checkpoint", "extended",
        "extended", "checkpoint", "completed"]
    assert not tl.capped
    ckpt, beat = tl.events[4], tl.events[5]
    assert ckpt.count == 400 and ckpt.at_ms == first_checkpoint + 500
    assert ckpt.last_ms == first_checkpoint + 200_000
    assert ckpt.details["preview"] == '{"step":399}'  # the newest one's details
    assert beat.count == 20 and beat.details["by"] == "heartbeat"
    assert tl.events[6].actor == "alice" and tl.events[6].count == 1
    assert tl.events[7].count == 1  # after the operator's extension: a new row
    # (enqueued and the completion are read from the job's hash)
    assert r.llen(q.keys.timeline(job_id)) == 7


def test_coalescing_never_passes_over_a_transition(q, r, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    job = one(q)
    q.checkpoint(job, {"a": 1})
    q.snooze(job, 0, "lock_busy")
    job = one(q)
    q.checkpoint(job, {"a": 2})
    tl = Finder(r, clock).timeline("jobs", job_id)
    assert [(e.kind, e.count) for e in tl.events] == [
        ("enqueued", 1), ("reserved", 1), ("checkpoint", 1), ("snoozed", 1), ("reserved", 1),
        ("checkpoint", 1)]


def test_past_the_cap_the_first_events_stay_and_the_dropped_are_counted(q, r, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    snoozes = 150
    for _ in range(snoozes):
        job = one(q)
        clock.advance(10)
        q.snooze(job, 0, "rate_limited")
    tl = Finder(r, clock).timeline("jobs", job_id)
    stored = 2 * snoozes  # reserved + snoozed each
    assert r.llen(q.keys.timeline(job_id)) == TIMELINE_CAP
    assert tl.capped
    kinds = [e.kind for e in tl.events]
    assert kinds[:11] == ["enqueued"] + ["reserved", "snoozed"] * 5  # the first ten stored
    marker = tl.events[11]
    assert marker.kind == "elided" and marker.count == stored - TIMELINE_CAP + 1
    assert marker.at_ms < marker.last_ms
    newest = TIMELINE_CAP - 11  # the list keeps the ten first, the marker and these
    assert kinds[12:] == (["reserved", "snoozed"] * snoozes)[-newest:]
    assert tl.events[-1].at_ms == clock()
