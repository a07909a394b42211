"""An enqueue (or an operator's override) refused by a key of another type (WRONGTYPE)
stores nothing: no job record is left in no index, on the single path (enqueue_one.lua) and
the batch one (enqueue.lua)."""

from __future__ import annotations

import pytest
import redis

from antre.engine.queue import JobSpec, Queue

KEYS = {  # the queue's keys an enqueue writes, and a value of another type for each
    "ready": lambda r, k: r.set(k, "x"),
    "scheduled": lambda r, k: r.rpush(k, "x"),
    "stats": lambda r, k: r.rpush(k, "x"),
    "types": lambda r, k: r.set(k, "x"),
    "wake": lambda r, k: r.hset(k, "x", "1"),
    "idem_index": lambda r, k: r.set(k, "x"),
}


def job_records(r: redis.Redis, q: Queue) -> list[str]:
    return [k for k in r.scan_iter(q.keys.job_prefix + "*")]


@pytest.mark.parametrize("path", ["single", "batch", "delayed"])
@pytest.mark.parametrize("name", sorted(KEYS))
def test_an_enqueue_refused_by_a_key_of_another_type_stores_no_job(r, clock, name, path):
    q = Queue(r, "jobs", clock=clock)
    KEYS[name](r, getattr(q.keys, name))
    if path == "single" and name == "scheduled":  # a job ready now: the key is not written
        q.enqueue("t", {}, idempotency_key="k1")
        assert len(job_records(r, q)) == 1
        return
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        if path == "single":
            q.enqueue("t", {}, idempotency_key="k1")
        elif path == "batch":
            q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}") for i in range(3)])
        else:
            q.enqueue("t", {}, idempotency_key="k1", delay_s=5)
    assert job_records(r, q) == []


@pytest.mark.parametrize("which", ["group_limits", "group_overrides"])
def test_a_group_override_refused_by_a_record_of_another_type_writes_nothing(r, clock, which):
    """group_limit.lua checks the operators' records before it writes either one."""
    from antre.groups.control import GroupControl

    q = Queue(r, "jobs", clock=clock)
    q.enqueue("t", {}, idempotency_key="k1", group="g")
    other = "group_overrides" if which == "group_limits" else "group_limits"
    r.set(getattr(q.keys, which), "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE .* nothing was stored"):
        GroupControl(r, clock).set_slots("jobs", "g", 3, "alice", "test")
    assert not r.exists(getattr(q.keys, other))
    assert r.get(getattr(q.keys, which)) == "x"
