"""Delete one ready/scheduled job; purge a filtered set from ready, scheduled or dead (dry run
== real count), against a real Redis."""

from __future__ import annotations

import pytest

from antre.control.pause import Pauses
from antre.control.purge import PurgeError, PurgeFilter, Purger
from antre.observe.readmodels import ReadModels


@pytest.fixture
def purger(r, clock):
    return Purger(r, clock)


def add(q, job_type, n, *, delay_s=0.0, payload=None, start=0):
    return [q.enqueue(job_type, payload or {"i": i, "tenant": "t%d" % (i % 3)},
                      idempotency_key=f"{job_type}:{i}", delay_s=delay_s)
            for i in range(start, start + n)]


def bury(q, n):
    for job in q.reserve("w", n):
        q.bury(job, reason="boom" if job.type == "a" else "other", error=f"E{job.type}")


def check(purger, q, flt, expected, left_ready=None):
    assert purger.count("jobs", flt) == expected
    assert purger.purge("jobs", flt, 10**6) == expected
    assert purger.count("jobs", flt) == 0
    if left_ready is not None:
        assert ReadModels(q.redis, q.clock).queue_info("jobs").ready == left_ready


def test_purge_ready_by_type_keeps_the_rest_in_order(q, purger):
    a = add(q, "a", 450)
    b = add(q, "b", 450)
    tail_b = []
    for i in range(450, 455):
        add(q, "a", 1, start=i)
        tail_b += add(q, "b", 1, start=i)
    check(purger, q, PurgeFilter("ready", job_type="a"), 455, left_ready=455)
    got = [j.id for j in q.reserve("w", 1000)]
    assert got == b + tail_b
    assert all(q.get(i) is None for i in a)


def test_purge_ready_by_payload_field(q, purger):
    add(q, "a", 30)
    check(purger, q, PurgeFilter("ready", field="tenant", value="t1"), 10, left_ready=20)
    assert all(j.payload["tenant"] != "t1" for j in q.reserve("w", 100))


def test_purge_ready_by_age(q, purger, clock):
    add(q, "a", 7)
    clock.advance(120_000)
    add(q, "a", 5, start=7)
    check(purger, q, PurgeFilter("ready", older_than_s=60), 7, left_ready=5)


def test_purge_reaches_parked_jobs_of_a_paused_type(q, purger, r, clock):
    add(q, "a", 10)
    add(q, "b", 3)
    Pauses(r, clock).pause("jobs", "a", "op", "why")
    assert len(q.reserve("w", 3)) == 3  # a's jobs parked
    check(purger, q, PurgeFilter("ready", job_type="a"), 10, left_ready=0)


def test_purge_scheduled_by_type_and_payload(q, purger):
    add(q, "a", 250, delay_s=60)
    add(q, "b", 20, delay_s=60)
    check(purger, q, PurgeFilter("scheduled", job_type="a", field="tenant", value="t0"), 84)
    assert ReadModels(q.redis, q.clock).queue_info("jobs").scheduled == 186


def test_purge_dead_by_group_and_type_keeps_indexes(q, purger):
    add(q, "a", 6)
    add(q, "b", 4)
    bury(q, 10)
    reads = ReadModels(q.redis, q.clock)
    group = next(g.group for g in reads.error_groups("jobs") if g.job_type == "a")
    check(purger, q, PurgeFilter("dead", group=group), 6)
    assert reads.count_dead("jobs") == 4
    assert [g.count for g in reads.error_groups("jobs") if g.group == group] == [0]
    check(purger, q, PurgeFilter("dead", job_type="b"), 4)
    assert reads.count_dead("jobs") == 0


def test_purge_maximum_and_nothing_matching(q, purger):
    add(q, "a", 50)
    assert purger.purge("jobs", PurgeFilter("ready"), 20) == 20
    assert purger.count("jobs", PurgeFilter("ready", job_type="zzz")) == 0
    assert purger.purge("jobs", PurgeFilter("ready", job_type="zzz"), 100) == 0
    assert q.stats()["purged"] == 20


def test_delete_one_ready_scheduled_or_parked_job(q, purger, r, clock):
    ready = add(q, "a", 3)
    later = add(q, "a", 2, delay_s=60, start=3)
    assert purger.delete("jobs", ready[1]) == "ready"
    assert purger.delete("jobs", later[0]) == "scheduled"
    assert q.get(ready[1]) is None and q.where(later[0]) == []
    Pauses(r, clock).pause("jobs", "a", "op", "why")
    q.reserve("w", 5)
    assert purger.delete("jobs", ready[2]) == "ready"
    Pauses(r, clock).resume("jobs", "a")
    assert [j.id for j in q.reserve("w", 5)] == [ready[0]]


def test_delete_refuses_running_and_unknown(q, purger):
    (job_id,) = add(q, "a", 1)
    q.reserve("w", 1)
    with pytest.raises(PurgeError, match="it is inflight"):
        purger.delete("jobs", job_id)
    with pytest.raises(PurgeError, match="gone"):
        purger.delete("jobs", "nope")
    assert q.where(job_id) == ["inflight"]


@pytest.mark.parametrize("flt, message", [
    (PurgeFilter("done"), "source must be"),
    (PurgeFilter("ready", group="g"), "error group"),
    (PurgeFilter("ready", field="x"), "both field and value"),
    (PurgeFilter("ready", job_type="a{b}"), "bad job_type"),
])
def test_bad_filters_are_refused(flt, message):
    with pytest.raises(PurgeError, match=message):
        flt.check()


def test_paced_purge_task_rate_maximum_pause_cancel(q, r, clock):
    from antre.control.bulk import BulkReplays, TaskStateError
    bulk = BulkReplays(r, clock)
    add(q, "a", 40)
    add(q, "b", 10)
    task = bulk.start_purge("jobs", PurgeFilter("ready", job_type="a"), rate_per_s=10,
                            maximum=35, user="op", reason="flood")
    assert (task.kind, task.total, task.state) == ("purge", 40, "running")
    assert bulk.step_all() == 0
    clock.advance(1000)
    assert bulk.step_all() == 10
    bulk.pause("jobs", task.id)
    clock.advance(5000)
    assert bulk.step_all() == 0
    bulk.resume("jobs", task.id)
    for _ in range(3):
        clock.advance(1000)
        bulk.step_all()
    done = bulk.get("jobs", task.id)
    assert (done.replayed, done.state) == (35, "done")  # the maximum
    assert ReadModels(r, clock).queue_info("jobs").ready == 15
    with pytest.raises(TaskStateError):
        bulk.cancel("jobs", task.id)
    assert [t.kind for t in bulk.list("jobs", kind="purge")] == ["purge"]


def test_list_walk_survives_workers_taking_jobs_between_chunks(q, purger):
    for i in range(150):
        add(q, "a", 1, start=i)
        add(q, "b", 1, start=i)
    flt = PurgeFilter("ready", job_type="a")
    chunk = purger.step("jobs", flt, None, 100, dry=False)
    assert (chunk.looked, chunk.matched) == (100, 50)
    taken = q.reserve("w", 10)  # from the oldest end: the cursor's distance hint is stale now
    assert [j.type for j in taken] == ["b"] * 10  # the marks of purged jobs are stepped over
    while chunk.cursor is not None:
        chunk = purger.step("jobs", flt, chunk.cursor, 100, dry=False)
    assert purger.count("jobs", flt) == 0
    assert ReadModels(q.redis, q.clock).queue_info("jobs").ready == 140
    assert len(q.reserve("w", 1000)) == 140
    assert ReadModels(q.redis, q.clock).queue_info("jobs").ready == 0
    assert q.redis.get(q.keys.tombstones) == "0"


def test_oldest_ready_age_looks_past_the_marks_of_purged_jobs(q, purger, clock):
    add(q, "a", 3)
    clock.advance(5_000)
    add(q, "b", 1)
    clock.advance(1_000)
    assert purger.purge("jobs", PurgeFilter("ready", job_type="a"), 10) == 3
    assert ReadModels(q.redis, clock).queue_info("jobs").oldest_ready_age_ms == 1_000
