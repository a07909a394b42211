"""One queue spread over partitions: the core guarantees with partitions=3,
on a single Redis and on the real 3-node Redis Cluster (each partition its own hash tag)."""

from __future__ import annotations

import threading

import pytest
from helpers import START_MS, burst, make_worker, run_async, wait_for
from redis.cluster import RedisCluster

from antre import Antre, InvalidJob, SettingError
from antre.clock import ManualClock, system_ms
from antre.control.bulk import BulkReplays
from antre.control.pause import Pauses
from antre.control.purge import PurgeFilter, Purger
from antre.maintenance.retention import Retention, RetentionPolicy
from antre.engine import keys, partitions
from antre.flows import FlowReader
from antre.observe.readmodels import DeadFilter, ReadModels
from antre.limits.admission import LimitPolicy
from antre.limits.gates import Gates

from antre_worker.duties import sweep_once
from antre_worker.runner import WorkerProcess


@pytest.fixture(params=["single", pytest.param("cluster", marks=pytest.mark.cluster)])
def url(request):
    """A single Redis, or the 3-node Cluster through a ``redis+cluster://`` URL (flushed)."""
    if request.param == "single":
        return request.getfixturevalue("redis_url")
    host, port = request.getfixturevalue("redis_cluster")[0]
    client = RedisCluster(host=host, port=port, decode_responses=True)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    client.close()
    return f"redis+cluster://{host}:{port}"


@pytest.fixture
def clock():
    return ManualClock(START_MS)


def make_app(url, clock, n=3, **kw):
    app = Antre(redis_url=url, clock=clock, partitions=n, **kw)
    seen = app.seen = []

    @app.handler("ok")
    def ok(ctx, payload):
        seen.append((payload.get("k"), payload["i"]))
        return payload["i"]

    @app.handler("boom", max_attempts=1)
    def boom(ctx, payload):
        raise ValueError("boom")
    return app


def where(app, job_id):
    """The partition and places a job is indexed in (exactly one place expected)."""
    q = app.job_queue("default", job_id)
    return q.partition, q.where(job_id)


def test_keys_and_ids():
    assert keys.QueueKeys("orders").tag == "antre:{orders}"  # partition 0: as before
    assert keys.QueueKeys("orders", 0).ready == "antre:{orders}:ready"
    tag = keys.partition_tag("orders", 2)
    assert tag.startswith("orders~2") and keys.QueueKeys("orders", 2).ready == f"antre:{{{tag}}}:ready"
    assert keys.partition_tag("orders", 2) == tag  # the same on every host
    for name in ("orders", "emails", "q3", "default"):  # a third of the ring apart
        s0 = keys._slot(name)
        for p in (1, 2):
            gap = (keys._slot(keys.partition_tag(name, p)) - s0) % keys.SLOTS
            assert 0 <= gap - round(p * keys.SLOTS / 3) < keys.SPREAD_WINDOW
    assert keys.QueueKeys("orders", 2).partition_count == "antre:{orders}:partitions"
    assert keys.id_partition("ab12") == 0 and keys.id_partition("ab12~2") == 2
    for odd in ("ab~", "~3", "ab~03", "ab~x", "ab~0"):
        assert keys.id_partition(odd) == 0
    assert keys.valid_job_id("ab12~2") and not keys.valid_job_id("ab~03")
    assert not keys.valid_job_id("a b~1") and not keys.valid_job_id(f"ab~{keys.MAX_PARTITIONS}")


def test_bad_counts_are_refused_saying_what_to_pass(redis_url, monkeypatch):
    for bad in (0, -1, 1.5, "3", keys.MAX_PARTITIONS + 1, True):
        with pytest.raises(InvalidJob, match="whole number from 1 to"):
            Antre(redis_url=redis_url, partitions=bad)
    monkeypatch.setenv("ANTRE_PARTITIONS", "lots")
    with pytest.raises(SettingError, match="ANTRE_PARTITIONS='lots' .* takes a whole number "
                                           "from 1 to 256"):
        Antre(redis_url=redis_url)
    monkeypatch.setenv("ANTRE_PARTITIONS", "4")
    assert Antre(redis_url=redis_url).default_partitions == 4


def test_one_partition_is_todays_queue(redis_url, clock, r):
    app = make_app(redis_url, clock, n=1)
    job_id = app.enqueue("ok", {"i": 1}, idempotency_key="k1")
    assert "~" not in job_id and r.llen("antre:{default}:ready") == 1
    assert not r.exists("antre:{default}:partitions")  # nothing published for one
    assert not any("~" in k for k in r.keys("*"))


def test_count_is_published_and_only_grows(url, clock):
    a3 = make_app(url, clock, n=3)
    a3.enqueue("ok", {"i": 1}, idempotency_key="k")
    assert partitions.published(a3.redis, "default") == 3
    a1 = make_app(url, clock, n=1)  # another host, configured with fewer: uses the 3
    ids = [a1.enqueue("ok", {"i": i}, idempotency_key=f"k{i}") for i in range(6)]
    assert sorted(keys.id_partition(i) for i in ids) == [0, 0, 1, 1, 2, 2]
    a2 = make_app(url, clock, n=2)
    a2.enqueue("ok", {"i": 1}, idempotency_key="k")
    assert partitions.published(a2.redis, "default") == 3  # shrinking changes nothing
    a5 = make_app(url, clock)
    a5.queue_options("default", partitions=5)
    a5.enqueue("ok", {"i": 1}, idempotency_key="k")
    assert partitions.published(a5.redis, "default") == 5
    assert a1.partitions_of("default").count() == 3  # until its refresh
    clock.advance(partitions.REFRESH_MS)
    assert a1.partitions_of("default").count() == 5


def test_jobs_spread_and_read_as_one_queue(url, clock):
    app = make_app(url, clock)
    ids = [app.enqueue("ok", {"i": i}, idempotency_key=f"k{i}") for i in range(30)]
    ids += app.enqueue_many([app.spec("ok", {"i": 30 + i}, idempotency_key=f"m{i}")
                             for i in range(30)])
    per = [sum(1 for i in ids if keys.id_partition(i) == p) for p in range(3)]
    assert per == [20, 20, 20]
    assert all(i.endswith(f"~{keys.id_partition(i)}") or "~" not in i for i in ids)
    assert sorted(where(app, i) for i in ids[:3]) == [(p, ["ready"]) for p in (0, 1, 2)]
    info = ReadModels(app.redis, clock).queue_info("default")
    assert (info.ready, info.partitions) == (60, 3)
    for job_id in ids[:3]:  # the finder finds each job from its id alone
        assert app.job(job_id).state == "ready"
        assert app.finder.locate(job_id).queue == "default"
        assert app.finder.timeline("default", job_id).job_exists
    assert app.finder.by_key("k2").job_id == ids[2]


def test_lifecycle_over_partitions(url, clock):
    """enqueue / reserve / ack / retry / bury / sweep in every partition; a burst worker
    serves all of them."""
    app = make_app(url, clock)
    ok = [app.enqueue("ok", {"i": i}, idempotency_key=f"k{i}") for i in range(9)]
    bad = [app.enqueue("boom", {"i": i}, idempotency_key=f"b{i}") for i in range(3)]
    _, counts = burst(app, clock)
    assert sorted(i for _, i in app.seen) == list(range(9))
    assert {where(app, i)[1][0] for i in ok} == {"done"}
    assert {where(app, i)[1][0] for i in bad} == {"dead"}
    assert {keys.id_partition(i) for i in bad} == {0, 1, 2}
    info = ReadModels(app.redis, clock).queue_info("default")
    assert (info.done, info.dead, info.ready, info.inflight) == (9, 3, 0, 0)
    # leases that expire in every partition come back through the sweeper
    late = [app.enqueue("ok", {"i": i}, idempotency_key=f"s{i}", visibility_timeout_s=5)
            for i in range(3)]
    got = [job for q in app.partitions_of("default").queues() for job in q.reserve("w9")]
    assert sorted(j.id for j in got) == sorted(late)
    clock.advance(5_001)
    assert sweep_once(app, clock)["requeued"] == 3
    assert {where(app, i)[1][0] for i in late} == {"ready"}
    # a retry's backoff: promoted by the worker that serves its partition
    q = app.job_queue("default", late[2])
    job = next(j for j in q.reserve("w9") if j.id == late[2])
    q.retry(job, delay_ms=1000, error="later")
    clock.advance(1001)
    burst(app, clock)
    assert {where(app, i)[1][0] for i in late} == {"done"}


def test_lock_key_and_group_stay_in_one_partition_in_order(url, clock):
    app = make_app(url, clock)
    ids = [app.enqueue("ok", {"k": f"key{i % 4}", "i": i}, idempotency_key=f"k{i}",
                       lock_key=f"key{i % 4}") for i in range(24)]
    by_key: dict[str, set[int]] = {}
    for i, job_id in enumerate(ids):
        by_key.setdefault(f"key{i % 4}", set()).add(keys.id_partition(job_id))
    assert all(len(ps) == 1 for ps in by_key.values())
    assert len({p for ps in by_key.values() for p in ps}) > 1  # the keys are spread
    burst(app, clock, threads=3)
    for key in by_key:
        order = [i for k, i in app.seen if k == key]
        assert order == sorted(order) and len(order) == 6  # each key's jobs in enqueue order
    gids = [app.enqueue("ok", {"i": i}, idempotency_key=f"g{i}", group=f"tenant{i % 3}",
                        group_concurrency=2) for i in range(12)]
    for g in range(3):
        assert len({keys.id_partition(j) for j in gids[g::3]}) == 1
    parts = app.partitions_of("default").queues()
    slots = {g: sum(int(q.redis.zscore(q.keys.group_slots, f"tenant{g}") or 0) for q in parts)
             for g in range(3)}
    assert slots == {0: 2, 1: 2, 2: 2}  # each group's limit holds inside its partition


def test_outbox_ids_name_their_partition(url, clock, sqlite_url):
    app = make_app(url, clock, database_url=sqlite_url)
    with app.session_factory() as s, s.begin():
        ids = [app.enqueue("ok", {"i": i}, idempotency_key=f"o{i}", session=s)
               for i in range(6)]
    assert sorted(keys.id_partition(i) for i in ids) == [0, 0, 1, 1, 2, 2]
    assert app.relay_outbox() == 6
    assert [where(app, i)[1] for i in ids] == [["ready"]] * 6
    with pytest.raises(InvalidJob, match="names partition 7"):
        app.enqueue("ok", {"i": 1}, idempotency_key="x", job_id="abc~7")


def test_growing_live_workers_serve_new_partitions(url, clock):
    app = make_app(url, clock, n=1)
    w = make_worker(app, clock)
    assert len(w.queues) == 1
    grown = make_app(url, clock, n=3)
    ids = [grown.enqueue("ok", {"i": i}, idempotency_key=f"k{i}") for i in range(6)]
    clock.advance(partitions.REFRESH_MS)
    w.heartbeat_once()
    assert [q.partition for q in w.queues] == [0, 1, 2]
    w.run_burst()
    assert {where(app, i)[1][0] for i in ids} == {"done"}


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["default", "orders", "emails", "q3", "billing", "bench"])
def test_partitions_land_on_different_cluster_nodes(redis_cluster, name):
    """3 partitions on the 3 masters, one each; 6 partitions, two each (whatever the name)."""
    host, port = redis_cluster[0]
    rc = RedisCluster(host=host, port=port, decode_responses=True)
    try:
        nodes = [rc.get_node_from_key(keys.QueueKeys(name, p).ready).name for p in range(6)]
        slots = {rc.keyslot(keys.QueueKeys(name, p).ready) for p in range(6)}
        assert rc.keyslot(keys.QueueKeys(name, 0).ready) == keys._slot(name)
    finally:
        rc.close()
    assert len(slots) == 6 and len(set(nodes[:3])) == 3
    assert sorted(nodes.count(n) for n in set(nodes)) == [2, 2, 2]


def test_a_flow_goes_whole_into_one_partition(url, clock):
    app = make_app(url, clock)
    spec = lambda i: app.spec("ok", {"i": i}, idempotency_key=f"f{i}")  # noqa: E731
    flows = [app.chord([spec(1), spec(2)], spec(3)).enqueue() for _ in range(3)]
    assert sorted(keys.id_partition(f.id) for f in flows) == [0, 1, 2]
    for f in flows:
        tree = app.flows.flow(f.id).status()
        assert tree.state == "running"
        jobs = app.redis.lrange(f.q.keys.flow_jobs(f.id), 0, -1)
        assert {keys.id_partition(j) for j in jobs} == {keys.id_partition(f.id)}
    burst(app, clock)
    assert [f.wait(1).state for f in flows] == ["succeeded"] * 3
    assert [f.results() for f in flows] == [[3]] * 3
    assert FlowReader(app.redis).counts("default")["succeeded"] == 3
    page = FlowReader(app.redis).list_flows("default", "succeeded")
    assert sorted(r.id for r in page.rows) == sorted(f.id for f in flows) and page.total == 3
    keyed = app.chain(app.spec("ok", {"i": 9}, idempotency_key="kk", lock_key="acct:1"),
                      spec(10)).enqueue()
    assert keys.id_partition(keyed.id) == partitions.slot_of("acct:1", 3)


def test_type_limits_are_split_across_partitions(url, clock):
    app = make_app(url, clock)

    @app.handler("limited", flow=LimitPolicy(concurrency=4, rate_per_s=10, burst=10))
    def limited(ctx, payload):
        return None
    make_worker(app, clock)._declare_gates()
    for p in range(3):  # ceil(4 / 3) slots and ceil(10 / 3) starts per window each
        k = keys.QueueKeys("default", p)
        assert app.redis.hget(k.gate_slots, "type:limited") == "2"
        assert app.redis.hget(k.gate_rates, "type:limited") == "4/1000"
    ids = [app.enqueue("limited", {}, idempotency_key=f"l{i}") for i in range(12)]
    got = [j for q in app.partitions_of("default").queues() for j in q.reserve("w", count=10)]
    assert len(got) == 6  # 2 slots in each of the 3 partitions: 6, not 4 and not 12
    assert {keys.id_partition(j.id) for j in got} == {0, 1, 2} and len(ids) == 12
    gates = Gates(app.redis, clock)
    (state,) = [g for g in gates.limits("default") if g.gate == "type:limited"]
    assert (state.slots, state.in_flight, state.waiting) == (6, 6, 6)  # summed, 3 x 2
    gates.set_override("default", "type", "limited", "ops", "calm down", slots=0)
    for p in range(3):  # held in every partition
        assert app.redis.hget(keys.QueueKeys("default", p).gate_overrides,
                              "type:limited").startswith("0|")


def test_admin_paths_see_every_partition(url, clock):
    app = make_app(url, clock)
    bad = [app.enqueue("boom", {"i": i}, idempotency_key=f"b{i}") for i in range(6)]
    burst(app, clock)
    reads = ReadModels(app.redis, clock)
    page = reads.dead("default")
    assert sorted(r.id for r in page.rows) == sorted(bad) and page.total == 6
    died = [r.finished_at for r in page.rows]
    assert died == sorted(died, reverse=True)  # newest first, across the partitions
    (group,) = reads.error_groups("default")
    assert group.count == 6
    assert reads.count_dead("default", DeadFilter(job_type="boom")) == 6
    bulk = BulkReplays(app.redis, clock)
    res = bulk.replay_filtered_now("default", DeadFilter(job_type="boom"), 4)
    assert (res.done, res.dead_before, res.dead_after) == (4, 6, 2)
    assert reads.queue_info("default").ready == 4
    assert Purger(app.redis, clock).count("default", PurgeFilter("ready")) == 4
    assert Purger(app.redis, clock).purge("default", PurgeFilter("ready"), 10) == 4
    assert reads.queue_info("default").ready == 0
    pauses = Pauses(app.redis, clock)
    pauses.pause("default", None, "ops", "drill")
    ok = [app.enqueue("ok", {"i": i}, idempotency_key=f"p{i}") for i in range(3)]
    assert [j for q in app.partitions_of("default").queues() for j in q.reserve("w")] == []
    pauses.resume("default", None)
    assert len([j for q in app.partitions_of("default").queues()
                for j in q.reserve("w")]) == len(ok)
    Retention(app.redis, clock=clock).run("default", RetentionPolicy(dead_max_jobs=1))
    assert reads.queue_info("default").dead <= 3  # ceil(1 / 3) = 1 kept per partition


def test_an_idle_worker_is_woken_for_every_partition(url):
    """A running worker (2 threads, idle: blocked on the wake lists; on the Cluster one list
    per wait, in rotation) picks up a job enqueued into each partition, one after the other."""

    app = make_app(url, system_ms)
    w = WorkerProcess(app, queues=["default"], threads=2, worker_id="w-idle", heartbeat_s=60,
                      stop_grace_s=2)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        for i in range(6):  # round robin: partitions 0, 1, 2, 0, 1, 2, each while idle
            job_id = app.enqueue("ok", {"i": i}, idempotency_key=f"idle{i}")
            assert keys.id_partition(job_id) == i % 3
            wait_for(lambda: app.job(job_id).state == "done", 20, f"job {i} to run")
    finally:
        w.stop()
        t.join(10)
    assert sorted(i for _, i in app.seen) == list(range(6))


def test_aenqueue_spreads_and_reads_the_count_off_the_loop(redis_url, clock):
    """(On one server: ``aenqueue``'s pipelined scripts are not for a Cluster.)"""
    app = make_app(redis_url, clock)

    async def go():
        one = [await app.aenqueue("ok", {"i": i}, idempotency_key=f"a{i}") for i in range(3)]
        many = await app.aenqueue_many([app.spec("ok", {"i": i}, idempotency_key=f"m{i}")
                                        for i in range(6)])
        return one, many
    one, many = run_async(go())
    assert sorted(keys.id_partition(i) for i in one) == [0, 1, 2]
    assert sorted(keys.id_partition(i) for i in many) == [0, 0, 1, 1, 2, 2]
    assert ReadModels(app.redis, clock).queue_info("default").ready == 9


def test_a_lock_key_shared_by_several_groups_keeps_its_order(url, clock):
    app = make_app(url, clock)
    ids = [app.enqueue("ok", {"k": "acct:1", "i": i}, idempotency_key=f"s{i}",
                       lock_key="acct:1", group=f"tenant{i % 5}") for i in range(20)]
    assert len({keys.id_partition(j) for j in ids}) == 1  # the key's partition, every group
    others = [app.enqueue("ok", {"i": 100 + i}, idempotency_key=f"o{i}", group=f"tenant{i}")
              for i in range(5)]
    assert len({keys.id_partition(j) for j in others}) > 1  # groups without a key still spread
    burst(app, clock, threads=3)
    assert [i for k, i in app.seen if k == "acct:1"] == list(range(20))
