"""A job whose hash holds only what every job has (``PLAIN_FIELDS`` and its state) is
reserved "plain": one HMGET of those fields and HLEN, no lookups of the optional ones, a row
that stops before them, and an ack that reads four fields instead of eleven. Any other job
(a field the plain read did not ask for) is read whole, as before. Against a real Redis;
the commands the scripts run are read off ``MONITOR`` and ``INFO commandstats``."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
import redis

from antre.engine.envelope import (PLAIN_FIELDS, PLAIN_ROW, RESERVE_FIELDS, JobSpec, from_fields,
                                   from_row)
from antre.engine.queue import Queue
from antre.engine.scripts import script_raw
from antre.observe.finder import Finder

NOT_UTF8 = b"\xff\xfe\xc3("
# what a reserved job's row gives (errors, results, its group: read elsewhere)
ROW_ATTRS = ("id", "type", "queue", "idempotency_key", "payload", "attempt", "max_attempts",
             "visible_at", "created_at", "trace_id", "lock_key", "headers", "timeout_s",
             "visibility_timeout_ms", "epoch", "deliveries", "max_deliveries", "state",
             "deadline", "reserved_at", "worker_id", "checkpoint", "first_failed_at",
             "replayed_at", "payload_error", "snoozes", "cancel", "flow", "flow_inputs")


def raw_reserve(q: Queue, count: int = 10) -> list[list[bytes | None]]:
    """reserve.lua's reply as Queue.reserve reads it (undecoded rows)."""
    k = q.keys
    return script_raw(q.redis, q.scripts.reserve, q._reserve_keys,
                      [k.job_prefix, q.clock(), count, "w1", k.parked_prefix,
                       k.dead_type_prefix, k.dead_group_prefix])


def calls(r: Any) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in r.info("commandstats").items()}


class Monitor:
    """The commands the server runs (scripts' own included, MONITOR shows them), up to a
    marker command sent after the ones watched: no waiting on time."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.m = self.client.monitor()
        self.m.__enter__()

    def until(self, marker: str) -> list[list[str]]:
        self.client.echo(marker)
        seen: list[list[str]] = []
        while True:
            cmd = self.m.next_command()["command"]
            if cmd == f"ECHO {marker}":
                return seen
            seen.append(cmd.split(" "))

    def close(self) -> None:
        self.m.__exit__(None, None, None)
        self.client.close()


@pytest.fixture
def monitor(redis_url):
    m = Monitor(redis_url)
    yield m
    m.close()


def test_a_standard_enqueue_stores_exactly_the_plain_fields_and_the_state(q):
    """PLAIN_FIELDS is what both enqueue scripts store for a job without options (visible_at
    only for a job visible later): were it another list, no job would be read plain (or,
    worse, a field would be skipped)."""
    ids = [q.enqueue("t", {"a": 1}, idempotency_key="one"),  # enqueue_one.lua
           *q.enqueue_many([JobSpec("t", {}, "many")])]  # enqueue.lua, standard fields
    for job_id in ids:
        assert set(q.redis.hgetall(q.keys.job(job_id))) == {*PLAIN_FIELDS, "state"} - {
            "visible_at"}
    later = q.enqueue("t", {}, idempotency_key="later", delay_s=5)  # scheduled
    assert set(q.redis.hgetall(q.keys.job(later))) == {*PLAIN_FIELDS, "state"}


def test_a_plain_job_is_read_once_and_its_row_stops_before_the_optional_fields(q, r, clock):
    r.config_resetstat()
    assert raw_reserve(q) == []
    per_call = calls(r)  # (the reserve's own checks: pauses, limits)
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}") for i in range(3)])
    r.config_resetstat()
    rows = raw_reserve(q)
    stats = calls(r)
    assert [len(row) for row in rows] == [PLAIN_ROW] * 3
    # one read per job, and its count
    assert stats["hmget"] - per_call.get("hmget", 0) == 3
    assert stats["hlen"] - per_call.get("hlen", 0) == 3
    jobs = [from_row([None if v is None else v.decode() for v in row], q.name, "w1")
            for row in rows]
    assert all(job._plain for job in jobs) and {job.id for job in jobs} == set(ids)
    for job in jobs:  # the short row decodes as the whole hash does
        stored = from_fields(q.redis.hgetall(q.keys.job(job.id)), q.name, job.id)
        assert dataclasses.asdict(job) == dataclasses.asdict(stored)
        assert (job.epoch, job.deliveries, job.state, job.worker_id, job.deadline) == (
            1, 1, "inflight", "w1", clock() + 30_000)


@pytest.mark.parametrize("case", ["lock_key", "headers", "timeout", "unique", "group", "trace",
                                  "delivered_before", "cancel", "old_queue_field",
                                  "damaged_attempt", "flow"])
def test_a_job_with_any_other_field_is_read_whole(q, r, clock, case):
    """A field the plain read does not ask for shows in the count: the job gets the second
    read and the whole row, so nothing it holds is skipped (a damaged counter still reaches
    the worker, which buries the job for it; a cancel request still ends it)."""
    spec = {"lock_key": JobSpec("t", {}, "k", lock_key="acct"),
            "headers": JobSpec("t", {}, "k", headers={"tenant": "a"}),
            "timeout": JobSpec("t", {}, "k", timeout_s=5),
            "unique": JobSpec("t", {}, "k", unique=True),
            "group": JobSpec("t", {}, "k", group="g"),
            "trace": JobSpec("t", {}, "k", trace_id="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"),
            }.get(case, JobSpec("t", {}, "k"))
    [job_id] = q.enqueue_many([spec])
    key = q.keys.job(job_id)
    if case == "delivered_before":
        [first] = q.reserve("w0")
        q.retry(first, delay_ms=0, error="again")
    elif case == "old_queue_field":  # as an older version stored it
        r.hset(key, "queue", q.name)
    elif case == "damaged_attempt":
        r.hset(key, "attempt", NOT_UTF8)
    elif case == "flow":
        r.hset(key, mapping={"flow": "f1", "fin": "0"})
    elif case == "cancel":
        r.hset(key, "cancel", '{"by": "ops", "to": "dlq", "reason": "stop"}')
    rows = raw_reserve(q)
    if case == "cancel":  # ended by reserve, as before (it read the request)
        assert rows == [] and r.hget(key, "state") == "dead"
        return
    [row] = rows
    assert len(row) == len(RESERVE_FIELDS)
    job = q._reserved([row], "w1")[0] if case != "damaged_attempt" else None
    if job is not None:
        assert not job._plain
        stored = from_fields(q.redis.hgetall(key), q.name, job_id)
        assert {a: getattr(job, a) for a in ROW_ATTRS} == {a: getattr(stored, a) for a in ROW_ATTRS}
    else:  # the bad bytes reach the client, which buries the job for them
        [damaged] = q._reserved([row], "w1")
        assert "'attempt' is not valid UTF-8" in damaged.payload_error


def test_a_plain_jobs_ack_reads_three_fields_and_any_other_the_whole_row(q, clock, monitor):
    q.enqueue_many([JobSpec("t", {}, "a"), JobSpec("t", {}, "b")])
    plain, other = q.reserve("w1", count=2)
    clock.advance(500)
    assert plain._plain and other._plain
    other = dataclasses.replace(other)  # a copy is not known plain: acked the full way
    assert not other._plain
    monitor.until("start")
    assert q.ack_many([(plain, "ok"), (other, "ok")]) == []
    hmgets = [c[2:] for c in monitor.until("end") if c[0] == "HMGET"]
    assert hmgets == [["state", "epoch", "waiters"],
                      ["state", "epoch", "waiters", "created_at", "worker_id", "reserved_at",
                       "ukey", "lock_key", "fgroup", "flow", "lgates"]]
    # the end-to-end latency counted for both (the plain one's created_at from its reserve)
    assert int(q.redis.hget(q.keys.stats, "latency_ms_total")) == 2 * 500
    for job in (plain, other):
        done = q.get(job.id)
        assert (done.state, done.result) == ("done", "ok")


def test_a_producer_that_starts_waiting_after_the_reserve_is_woken_by_the_plain_ack(q, r):
    """'waiters' is the one field a plain job may gain while it runs: the plain ack reads it."""
    [job_id] = q.enqueue_many([JobSpec("t", {}, "k")])
    [job] = q.reserve("w1")
    assert job._plain
    assert q.wait_start(job_id) == "inflight"
    assert q.ack_many([(job, 42)]) == []
    assert r.llen(q.keys.result_wake(job_id)) == 1
    assert not r.hexists(q.keys.job(job_id), "waiters")


def test_a_plain_job_redelivered_is_read_whole_and_keeps_its_first_delivery(q, r, clock):
    """After a lease that ran out, the job holds its lease's fields: the next reserve reads
    it whole, counts the delivery and writes the first one's kept event out."""
    [job_id] = q.enqueue_many([JobSpec("t", {}, "k")])
    [first] = q.reserve("w1")
    assert first._plain
    clock.advance(31_000)
    q.sweep()
    [second] = q.reserve("w2")
    assert not second._plain and (second.epoch, second.deliveries) == (2, 2)
    assert [str(x) for x in q.ack_many([(first, "late")])] == [str(first)]  # lease gone
    assert q.ack_many([(second, "ok")]) == []
    kinds = [(e.kind, e.actor) for e in Finder(r, clock).timeline(q.name, job_id).events]
    assert [k for k in kinds if k[0] in ("reserved", "completed")] == [
        ("reserved", "w1"), ("reserved", "w2"), ("completed", "w2")]


def test_a_plain_hash_without_its_type_takes_the_careful_path(q, r, clock):
    """A hash that lost its type (not a job's record as enqueue writes it) is still plain
    (nothing optional to read) but not a new job's first lease: its epoch restarts from the
    clock, above any lease handed out before, and its row carries the written values (no short
    row); the worker then buries it for its unknown type."""
    [job_id] = q.enqueue_many([JobSpec("t", {}, "k")])
    r.hdel(q.keys.job(job_id), "type")
    [row] = raw_reserve(q)
    assert len(row) == len(PLAIN_FIELDS) + 7
    [job] = q._reserved([row], "w1")
    assert job.id == job_id and job._plain and job.epoch == clock() + 1 and job.type == ""
    assert q.ack_many([(job, "ok")]) == []
    assert q.get(job_id).state == "done"


def test_the_short_row_reads_as_the_stored_lease(q, clock):
    """The values a plain job's short row leaves out (epoch, delivery, state, deadline,
    worker) are made by the client exactly as reserve stored them."""
    [job_id] = q.enqueue_many([JobSpec("t", {}, "k")])
    clock.advance(123)
    [job] = q.reserve("host:7:ab")
    stored = q.get(job_id)
    assert (job.epoch, job.deliveries, job.state, job.deadline, job.reserved_at,
            job.worker_id) == (stored.epoch, stored.deliveries, stored.state, stored.deadline,
                               stored.reserved_at, stored.worker_id) == (
        1, 1, "inflight", clock() + 30_000, clock(), "host:7:ab")


@pytest.mark.parametrize("field, value", [("max_attempts", "x"), ("visible_at", "1e3"),
                                          ("created_at", "")])
def test_a_damaged_number_in_a_short_row_is_read_the_careful_way(q, r, field, value):
    """The client's quick read of a short row takes digits only; anything else is read as
    the hash's reader reads it (a default), never raising."""
    [job_id] = q.enqueue_many([JobSpec("t", {"a": 1}, "k")])
    r.hset(q.keys.job(job_id), field, value)
    [row] = raw_reserve(q)
    assert len(row) == PLAIN_ROW
    [job] = q._reserved([row], "w1")
    stored = from_fields(q.redis.hgetall(q.keys.job(job_id)), q.name, job_id)
    assert {a: getattr(job, a) for a in ROW_ATTRS} == {a: getattr(stored, a) for a in ROW_ATTRS}
    assert job._plain and job.payload == {"a": 1}


def test_the_pages_read_a_plain_jobs_missing_fields_from_the_others(q, r, clock):
    """A plain job stores no id, trace or visible_at: the ready page's rows, the job page and
    the queue's oldest-ready age read them from the key and created_at, as the worker does."""
    from antre.observe.readmodels import ReadModels
    [job_id] = q.enqueue_many([JobSpec("t", {}, "k")])
    assert not {"id", "trace_id", "visible_at"} & set(r.hgetall(q.keys.job(job_id)))
    t0 = clock()
    clock.advance(7_000)
    reads = ReadModels(r, clock)
    [row] = reads.ready(q.name).rows
    assert (row.id, row.visible_at, row.created_at) == (job_id, t0, t0)
    assert reads.queue_info(q.name).oldest_ready_age_ms == 7_000
    job = reads.job(q.name, job_id)
    assert (job.id, job.visible_at, job.trace_id) == (job_id, t0, f"00-{job_id}-{job_id[16:]}-01")
