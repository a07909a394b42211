"""A broken job record, or one whose content cannot be decoded, is
dealt with alone by every script that walks several jobs (and by the reserve reply's
decoding); its batch-mates go on as if it were not there, and no id is left in no list."""

from __future__ import annotations

import json

import pytest
import redis

from antre.engine.queue import JobSpec, Queue

WRONG_TYPES = {
    "string": lambda r, key: r.set(key, "not a job"),
    "list": lambda r, key: r.rpush(key, "a", "b"),
    "set": lambda r, key: r.sadd(key, "a"),
    "zset": lambda r, key: r.zadd(key, {"a": 1}),
    "stream": lambda r, key: r.xadd(key, {"a": "1"}),
}


def fill(q: Queue, n: int = 5, **options) -> list[str]:
    return [q.enqueue("t", {"i": i}, idempotency_key=f"k{i}", **options) for i in range(n)]


def corrupt(r: redis.Redis, q: Queue, job_id: str, kind: str) -> None:
    key = q.keys.job(job_id)
    r.delete(key)
    WRONG_TYPES[kind](r, key)


def places(q: Queue, ids: list[str]) -> dict[str, list[str]]:
    return {job_id: q.where(job_id) for job_id in ids}


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
def test_reserve_buries_a_record_that_is_not_a_hash_and_reserves_the_rest(q, r, kind):
    ids = fill(q)
    corrupt(r, q, ids[2], kind)
    got = q.reserve("w1", count=10)
    assert sorted(j.id for j in got) == sorted(ids[:2] + ids[3:])
    where = places(q, ids)
    assert where.pop(ids[2]) == ["dead"]
    assert all(p == ["inflight"] for p in where.values())
    dead = q.get(ids[2])
    assert dead.state == "dead"
    assert f"job record is a {kind}, not a hash" in dead.reason
    assert q.stats()["corrupt"] == 1
    assert q.stats()["reserved"] == 4


@pytest.mark.parametrize("record", ["hash", "string", "missing"])
def test_reserve_quarantines_an_id_that_is_not_utf8_whatever_its_record(q, r, record):
    ids = fill(q, 3)
    bad_id = b"bad\xff\xfeid"
    if record == "hash":
        r.hset(q.keys.job_prefix.encode() + bad_id, mapping={"id": bad_id, "type": "t",
                                                             "payload": "{}"})
    elif record == "string":
        r.set(q.keys.job_prefix.encode() + bad_id, "x")
    r.rpush(q.keys.ready, bad_id)  # the oldest end: popped first
    got = q.reserve("w1", count=10)
    assert sorted(j.id for j in got) == sorted(ids)
    [entry] = q.quarantined()
    assert entry["id"] == "bad??id" and entry["id_hex"] == bad_id.hex()
    assert entry["why"] == {"hash": "job id is not UTF-8 text (found by reserve)",
                            "string": "job id is not ASCII text (found by reserve)",
                            "missing": "job record is missing (found by reserve)"}[record]
    assert q.quarantine_count() == 1 == q.stats()["quarantined"]
    assert r.llen(q.keys.ready) == 0 and r.zscore(q.keys.inflight, bad_id) is None
    assert r.zcard(q.keys.inflight) == 3


def test_reserve_quarantines_a_missing_record(q, r):
    ids = fill(q, 3)
    r.delete(q.keys.job(ids[1]))
    got = q.reserve("w1", count=10)
    assert sorted(j.id for j in got) == sorted([ids[0], ids[2]])
    assert [e["why"] for e in q.quarantined()] == ["job record is missing (found by reserve)"]
    assert q.stats()["orphans"] == 1


def test_a_timeline_key_of_another_type_loses_its_event_not_the_job(q, r):
    ids = fill(q, 3)
    r.set(q.keys.timeline(ids[1]), "x")
    got = q.reserve("w1", count=10)
    assert len(got) == 3
    assert all(q.where(i) == ["inflight"] for i in ids)
    q.ack_many([(j, None) for j in got])
    assert all(q.where(i) == ["done"] for i in ids)


def test_sweep_buries_an_in_flight_record_that_is_not_a_hash(q, r, clock):
    ids = fill(q, 3)
    q.reserve("w1", count=10)
    corrupt(r, q, ids[1], "string")
    r.delete(q.keys.job(ids[2]))
    clock.advance(60_000)
    result = q.sweep()
    assert result.outcomes == {ids[0]: "ready", ids[1]: "corrupt"}
    assert q.where(ids[0]) == ["ready"] and q.where(ids[1]) == ["dead"]
    assert "job record is a string, not a hash (found by sweeper)" in q.get(ids[1]).reason
    assert [e["why"] for e in q.quarantined()] == ["job record is missing (found by the sweeper)"]


def test_ack_many_refuses_a_record_broken_after_reserve_and_acks_the_rest(q, r):
    ids = fill(q, 3)
    jobs = q.reserve("w1", count=10)
    corrupt(r, q, ids[1], "list")
    by_id = {j.id: j for j in jobs}
    lost = q.ack_many([(by_id[i], {"ok": i}) for i in ids])
    assert [i for i in ids if q.where(i) == ["done"]] == [ids[0], ids[2]]
    assert q.where(ids[1]) == ["inflight"]  # the sweeper buries it when its lease ends
    assert lost


def test_promote_moves_a_broken_record_on_and_reserve_buries_it(q, r, clock):
    ids = fill(q, 3, delay_s=5)
    corrupt(r, q, ids[0], "set")
    clock.advance(6_000)
    assert q.promote() == 3
    got = q.reserve("w1", count=10)
    assert sorted(j.id for j in got) == sorted(ids[1:])
    assert q.where(ids[0]) == ["dead"]


def test_purge_retention_and_discard_step_over_a_broken_record(q, r, clock):
    ids = fill(q, 3)
    corrupt(r, q, ids[1], "zset")
    k = q.keys
    looked, matched, *_ = q.scripts.purge(
        keys=[k.ready, k.stats, k.tombstones],
        args=[k.job_prefix, "list", "1", json.dumps({"type": "t"}), "", 100, ""])
    assert (looked, matched) == (3, 2)
    r.zadd(k.dead, {ids[1]: 1})
    r.lrem(k.ready, 0, ids[1])
    assert q.replay(ids[1]) is False
    assert q.discard(ids[1]) is True
    assert q.where(ids[1]) == []
    assert not r.exists(k.job(ids[1]))


def test_a_payload_with_bytes_that_are_not_utf8_is_buried_alone(q, r):
    ids = fill(q, 3)
    r.hset(q.keys.job(ids[1]), "payload", b'{"i":"\xff"}')
    got = {j.id: j for j in q.reserve("w1", count=10)}
    assert set(got) == set(ids)
    assert "field 'payload' is not valid UTF-8" in got[ids[1]].payload_error
    assert got[ids[0]].payload_error == "" and got[ids[0]].payload == {"i": 0}
    assert got[ids[2]].payload == {"i": 2}


def test_a_key_with_bytes_that_are_not_utf8_is_reported_by_name(q, r):
    ids = fill(q, 2)
    r.hset(q.keys.job(ids[0]), "idem_key", b"k\xc3")
    got = {j.id: j for j in q.reserve("w1", count=10)}
    assert "field 'idem_key' is not valid UTF-8" in got[ids[0]].payload_error
    assert got[ids[1]].payload_error == ""


@pytest.mark.parametrize("payload, why", [
    pytest.param("[" * 200_000 + "]" * 200_000, "nested deeper", id="nested-200000"),
    ('{"x": NaN}', "NaN is not valid JSON"),
    ("[Infinity]", "Infinity is not valid JSON"),
])
def test_a_payload_that_breaks_the_decoder_is_reported_and_spares_the_batch(q, r, payload, why):
    ids = fill(q, 3)
    r.hset(q.keys.job(ids[1]), "payload", payload)
    got = {j.id: j for j in q.reserve("w1", count=10)}
    assert set(got) == set(ids)
    assert why in got[ids[1]].payload_error
    assert got[ids[1]].payload is None
    assert got[ids[0]].payload == {"i": 0} and got[ids[2]].payload == {"i": 2}


def test_the_pooled_and_the_cluster_path_read_the_reply_undecoded_too(r, clock):
    single = redis.Redis(connection_pool=r.connection_pool, single_connection_client=True)
    q = Queue(single, "jobs", clock=clock)
    assert q._pinned is None
    ids = [q.enqueue_one(JobSpec("t", {"i": i}, f"k{i}")) for i in range(2)]
    r.hset(q.keys.job(ids[0]), "payload", b"\xff")
    got = {j.id: j for j in q.reserve("w1", count=5)}
    assert "not valid UTF-8" in got[ids[0]].payload_error and got[ids[1]].payload == {"i": 1}


def test_rescue_leaves_a_broken_in_flight_record_to_the_sweeper_and_returns_the_rest(q, r,
                                                                                     clock):
    ids = fill(q, 4)
    q.reserve("w-lost", count=10)
    r.zadd(q.keys.beats, {"w-lost": clock()})
    corrupt(r, q, ids[1], "string")
    r.delete(q.keys.job(ids[2]))
    clock.advance(10_000)
    [result] = q.rescue([("w-lost", clock() - 10_000)], clock() - 5_000)
    assert result.outcomes == {ids[0]: "ready", ids[3]: "ready"}
    assert q.where(ids[1]) == ["inflight"] and q.where(ids[2]) == ["inflight"]
    clock.advance(60_000)
    assert q.sweep().outcomes == {ids[1]: "corrupt"}  # the backstop deals with them
    assert q.where(ids[2]) == [] and len(q.quarantined()) == 1
