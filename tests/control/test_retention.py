"""Retention against a real Redis (and SQLite for the SQL side): dead jobs past the count or age
cap dropped oldest first, done records past their retention, empty error groups removed,
every pass chunked; the worker duty; the DLQ page's "keeps ..." line."""

from __future__ import annotations

from datetime import timedelta

import pytest

from antre import Antre, InvalidJob
from antre.clock import ManualClock
from antre.engine.queue import Queue
from antre.observe.readmodels import ReadModels
from antre.settings import SettingError
from antre.maintenance.retention import Retention, RetentionPolicy, policy_from_env
from antre_worker.duties import Duties

DAY_MS = 86_400_000


@pytest.fixture
def keeper(r, clock):
    return Retention(r, clock=clock)


def bury(q: Queue, clock: ManualClock, n: int, job_type: str = "t", error: str = "boom") -> list[str]:
    ids = []
    for i in range(n):
        job_id = q.enqueue(job_type, {"i": i}, idempotency_key=f"{job_type}:{clock()}:{i}")
        [job] = q.reserve("w")
        q.bury(job, reason=error, error=error)
        ids.append(job_id)
        clock.advance(1000)
    return ids


def test_retention_drops_the_oldest_dead_job_past_the_cap(q, clock, keeper):
    ids = bury(q, clock, 5)
    res = keeper.run("jobs", RetentionPolicy(dead_max_jobs=3))
    assert res.dead_dropped == 2
    assert [i for i in ids if q.get(i) is None] == ids[:2]  # the two oldest, records gone
    assert all(q.where(i) == ["dead"] for i in ids[2:])
    assert q.redis.zcard(q.keys.dead) == 3 == q.redis.zcard(q.keys.dead_by_type("t"))
    assert q.stats()["dead_dropped"] == 2
    assert keeper.run("jobs", RetentionPolicy(dead_max_jobs=3)).dead_dropped == 0


def test_dead_jobs_past_the_age_cap_are_dropped(q, clock, keeper):
    old = bury(q, clock, 2)
    clock.advance(2 * DAY_MS)
    young = bury(q, clock, 1)
    res = keeper.run("jobs", RetentionPolicy(dead_max_age_s=86_400))
    assert res.dead_dropped == 2
    assert [q.get(i) for i in old] == [None, None] and q.where(young[0]) == ["dead"]


def test_an_error_group_with_no_job_left_disappears(q, clock, keeper):
    gone = bury(q, clock, 2, error="smtp down")
    kept = bury(q, clock, 1, error="card declined")
    reads = ReadModels(q.redis, clock)
    assert len(reads.error_groups("jobs")) == 2
    assert keeper.run("jobs", RetentionPolicy(dead_max_jobs=1)).groups_removed == 1
    [group] = reads.error_groups("jobs")
    assert group.count == 1 and "card declined" in group.signature
    assert q.get(gone[0]) is None and q.where(kept[0]) == ["dead"]


def test_a_group_emptied_by_discard_and_replay_disappears_on_the_next_pass(q, clock, keeper):
    a, b = bury(q, clock, 2)
    q.discard(a)
    q.replay(b)
    assert q.redis.hlen(q.keys.error_groups) == 1  # discard and replay leave the group
    assert keeper.run("jobs", RetentionPolicy()).groups_removed == 1
    assert q.redis.hlen(q.keys.error_groups) == 0


def test_done_records_expire_after_their_retention(q, clock, keeper):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    [job] = q.reserve("w")
    q.ack(job, {"ok": True})
    assert keeper.run("jobs", RetentionPolicy(done_max_age_s=3600)).done_dropped == 0
    clock.advance(3_600_001)
    assert keeper.run("jobs", RetentionPolicy(done_max_age_s=3600)).done_dropped == 1
    assert q.get(job_id) is None and q.where(job_id) == []


def test_a_large_backlog_is_dropped_in_chunks(q, clock, keeper, monkeypatch):
    ids = bury(q, clock, 12)
    calls = []
    original = keeper._call

    def counting(*args, **kwargs):
        res = original(*args, **kwargs)
        calls.append(res.dead_dropped)
        return res
    monkeypatch.setattr(keeper, "_call", counting)
    res = keeper.run("jobs", RetentionPolicy(dead_max_jobs=2), chunk=3)
    assert res.dead_dropped == 10 and max(calls) <= 3 and len(calls) >= 4
    assert [i for i in ids if q.get(i)] == ids[-2:]


def test_policy_is_described_and_checked():
    assert RetentionPolicy().describe() == "keeps 30 days / 100,000 jobs"
    assert RetentionPolicy(dead_max_age_s=7200, dead_max_jobs=500).describe() == \
        "keeps 2 hours / 500 jobs"
    with pytest.raises(InvalidJob, match="dead_max_jobs must be a whole number"):
        RetentionPolicy(dead_max_jobs=0)
    assert policy_from_env({"ANTRE_DEAD_MAX_JOBS": "7"}).dead_max_jobs == 7
    with pytest.raises(SettingError, match="ANTRE_DEAD_MAX_AGE_S='a week' .* takes a whole "
                                           "number from 1 up"):
        policy_from_env({"ANTRE_DEAD_MAX_AGE_S": "a week"})


def test_the_duty_applies_each_queues_policy_and_prunes_sql(redis_url, sqlite_url, clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    app.retention("jobs", dead_max_jobs=1, dead_max_age_s=1000 * 86_400)
    ids = bury(app.queue("jobs"), clock, 3)
    other = bury(app.queue("other"), clock, 3)
    app.audit.record("alice", "admin", "dlq.replay", "x", None, "ok")
    clock.advance(400 * DAY_MS)
    app.audit.record("bob", "admin", "dlq.replay", "y", None, "ok")
    res = Duties(app).run("retention")
    assert res["queues"]["jobs"].dead_dropped == 2
    assert res["queues"]["other"].dead_dropped == 3  # the default 30 days
    assert res["audit_pruned"] == 1 and [e.user for e in app.audit.list()] == ["bob"]
    assert [i for i in ids if app.queue("jobs").get(i)] == ids[-1:]
    assert all(app.queue("other").get(i) is None for i in other)
    assert Retention(app.redis).info("jobs").text == "keeps 1000 days / 1 jobs"
    app.engine.dispose()
    app.redis.close()


def test_sent_outbox_rows_are_pruned_in_batches(redis_url, sqlite_url, clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    with app.session_factory() as s, s.begin():
        for i in range(5):
            app.enqueue("t", {}, idempotency_key=f"o{i}", session=s)
    assert app.relay_outbox() == 5
    clock.advance(8 * DAY_MS)
    assert app.outbox.prune_sent(timedelta(days=7), batch=2) == 5
    app.engine.dispose()
    app.redis.close()


def test_an_expired_done_job_takes_its_timeline_and_key_index_with_it(q, clock, keeper):
    job_id = q.enqueue("t", {}, idempotency_key="k", delay_s=1)  # a delayed job has a timeline
    clock.advance(1_000)
    q.promote()
    [job] = q.reserve("w")
    q.ack(job, {"ok": True})
    assert q.redis.exists(q.keys.timeline(job_id)) and q.redis.hget(q.keys.idem_index, "k")
    clock.advance(3_600_001)
    assert keeper.run("jobs", RetentionPolicy(done_max_age_s=3600)).done_dropped == 1
    assert not q.redis.exists(q.keys.job(job_id), q.keys.timeline(job_id))
    assert q.redis.hget(q.keys.idem_index, "k") is None


def test_a_dropped_dead_job_takes_its_timeline_with_it(q, clock, keeper):
    old, young = bury(q, clock, 2)
    assert q.redis.exists(q.keys.timeline(old))
    keeper.run("jobs", RetentionPolicy(dead_max_jobs=1))
    assert not q.redis.exists(q.keys.timeline(old)) and q.redis.exists(q.keys.timeline(young))
