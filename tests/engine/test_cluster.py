"""The same scripts on a local 3-node Redis Cluster: every queue's keys share one hash tag."""

from __future__ import annotations

import pytest
from redis.cluster import ClusterNode, RedisCluster

from antre import LeaseLost
from antre.clock import ManualClock
from antre.engine.locks import LockBusy, Locks
from antre.maintenance.periodic import Scheduler, Schedules, make_schedule
from antre.engine.queue import JobSpec, Queue
from antre.maintenance.retention import Retention, RetentionPolicy

pytestmark = pytest.mark.cluster


@pytest.fixture
def rc(redis_cluster):
    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in redis_cluster],
                          decode_responses=True)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


@pytest.mark.parametrize("name", ["orders", "emails", "q3", "billing"])
def test_lifecycle_on_cluster(rc, name):
    clock = ManualClock()
    q = Queue(rc, name, clock=clock)
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}", visibility_timeout_s=5,
                                  max_deliveries=1) for i in range(6)])
    q.enqueue("t", {}, idempotency_key="later", delay_s=10)
    a, b, c, d, e, f = q.reserve("w1", count=6)
    q.ack(a, {"ok": True})
    q.retry(b, delay_ms=1000, error="flaky")
    q.bury(c, reason="permanent")
    assert q.extend(d.id, d.epoch, 60_000) == clock() + 60_000
    q.hand_back(e)
    clock.advance(10_001)
    assert q.promote() == 2
    swept = q.sweep()
    assert swept.buried == 1 and swept.outcomes == {f.id: "dead"}
    with pytest.raises(LeaseLost):
        q.ack(f)
    assert q.replay(c.id) and q.discard(f.id)
    assert q.run_now(q.enqueue("t", {}, idempotency_key="x", delay_s=99))
    assert [q.where(i) for i in ids] == [["done"], ["ready"], ["ready"], ["inflight"], ["ready"], []]


def test_locks_on_cluster(rc):
    locks = Locks(rc)
    lock = locks.acquire("sku:1", 10_000, owner="w1")
    lock2 = locks.acquire("sku:2", 10_000, owner="w1")
    assert sorted(h.key for h in locks.held()) == ["sku:1", "sku:2"]  # the index, another slot
    assert locks.renew(lock) and locks.release(lock) and locks.release(lock2)
    assert locks.held() == []
    again = locks.acquire("sku:1", 10_000)
    assert again.fence == lock.fence + 1
    handed = locks.acquire("sku:2", 10_000, release=again)  # release + acquire, two slots
    assert [h.key for h in locks.held()] == ["sku:2"] and handed.fence == lock2.fence + 1
    with pytest.raises(LockBusy):
        locks.acquire("sku:2", 10_000)  # the conflict scripts run in the {locks} slot
    assert [(c.key, c.last_5m, c.last_1h) for c in locks.contention()] == [("sku:2", 1, 1)]


@pytest.mark.parametrize("name", ["orders", "q3"])
def test_incident_controls_on_cluster(rc, name):
    from antre.control.cancel import Cancels
    from antre.control.pause import Pauses
    from antre.control.purge import PurgeFilter, Purger

    clock = ManualClock()
    q = Queue(rc, name, clock=clock)
    q.enqueue_many([JobSpec(t, {"i": i}, f"{t}{i}") for i in range(4) for t in ("a", "b")])
    pauses = Pauses(rc, clock)
    pauses.pause(name, "a", "op", "drill")
    assert {j.type for j in q.reserve("w1", count=8)} == {"b"}  # 'a' parked
    assert Purger(rc, clock).purge(name, PurgeFilter("ready", job_type="a"), 2) == 2
    assert pauses.resume(name, "a") == 2
    (job, *_) = q.reserve("w1", count=8)
    Cancels(rc, clock).request(name, job.id, "op", "discard", "")
    q.finish_cancelled(job, to="discard", reason="cancelled by op")
    assert q.get(job.id) is None


def test_unique_enqueue_ticks_and_retention_on_cluster(rc):
    clock = ManualClock(1_700_000_000_000)
    q = Queue(rc, "reports", clock=clock)
    first = q.enqueue("t", {}, idempotency_key="u", unique=True)
    assert q.enqueue_many([JobSpec("t", {}, "u", unique=True)]) == [first]
    schedule = make_schedule("hourly", "report", every_s=3600, queue="reports")
    schedulers = [Scheduler(rc, [schedule], clock=clock) for _ in range(2)]
    schedulers[0].run_once()
    clock.advance(3_600_000)
    outcomes = [r.outcome for s in schedulers for r in s.run_once()]
    assert outcomes == ["stored"]
    assert Schedules(rc, clock=clock).info("hourly").last_outcome == "ready"
    for job in q.reserve("w", count=10):
        q.bury(job, reason="boom")
    res = Retention(rc, clock=clock).run("reports", RetentionPolicy(dead_max_jobs=1))
    assert res.dead_dropped == 1 and res.groups_removed == 0


@pytest.mark.parametrize("name", ["orders", "q3"])
def test_key_turns_and_groups_on_cluster(rc, name):
    """Per-key turns and group slots: every key a script derives is in the queue's
    slot, so the hand-over works on a cluster as on one server."""
    from antre.groups.control import GroupControl
    clock = ManualClock()
    q = Queue(rc, name, clock=clock)
    keyed = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}", lock_key="order:1")
                            for i in range(3)])
    grouped = q.enqueue_many([JobSpec("t", {"i": i}, f"g{i}", group="tenant:7",
                                      group_concurrency=1) for i in range(3)])
    assert [q.get(i).state for i in keyed + grouped] == ["ready", "waiting", "waiting"] * 2
    jobs = q.reserve("w1", count=10)
    assert {j.id for j in jobs} == {keyed[0], grouped[0]}
    q.ack_many([(j, None) for j in jobs])
    assert q.get(keyed[1]).state == "ready" and q.get(grouped[1]).state == "ready"
    GroupControl(rc, clock, q.scripts).set_slots(name, "tenant:7", 2, "ops", "more")
    assert q.get(grouped[2]).state == "ready"


@pytest.mark.parametrize("name", ["orders", "q3"])
def test_limit_gates_and_their_overrides_on_cluster(rc, name):
    """A type's limit held at reserve: the gates' keys are derived in the
    queue's slot, so declaring, holding, freeing and overriding work on a cluster too."""
    from antre.limits.gates import Declaration, Gates
    clock = ManualClock()
    q = Queue(rc, name, clock=clock)
    gates = Gates(rc, clock, q.scripts)
    gates.declare(name, Declaration(cand={"t": "type:t"}, conc={"type:t": 1}))
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"l{i}") for i in range(3)])
    (first,) = q.reserve("w1", count=10)
    assert [q.get(i).state for i in ids[1:]] == ["waiting", "waiting"]
    q.ack(first)
    assert len(q.reserve("w1", count=10)) == 1
    gates.set_override(name, "type", "t", "ops", "more", slots=2)
    assert len(q.reserve("w1", count=10)) == 1


@pytest.mark.parametrize("name", ["orders", "q3"])
def test_result_wait_and_progress_on_cluster(rc, name):
    """result_wait.lua, progress.lua and the ack's wake: the job's wake list shares
    its queue's slot; the blocking pop on a cluster client waits in slices."""
    from antre.observe.waiting import blocking_pop
    q = Queue(rc, name, clock=ManualClock())
    q.enqueue("t", {}, idempotency_key="w")
    (job,) = q.reserve("w1")
    q.progress(job, 0.5, "half")
    assert q.wait_start(job.id) == "inflight"
    q.ack(job, "ok")
    assert blocking_pop(rc, q.keys.result_wake(job.id), 1.0)  # the token is there
    assert q.get(job.id).progress.message == "half"
