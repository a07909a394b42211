"""The rescuer: a worker process that stopped beating has its leases returned at once, long
before their deadlines; a live process's are left alone, a paused one's own ack is refused.
Real Redis and SQLite, in-process workers on an injected clock, and a real process killed with
kill -9 (the rescuer's clock injected, never slept for)."""

from __future__ import annotations

import threading

import pytest
import redis
from antre_worker.duties import Duties
from helpers import burst, make_worker, spawn, wait_for
from sqlalchemy import text

from antre import Antre
from antre.clock import ManualClock, system_ms
from antre.engine import keys
from antre.errors import LeaseLost
from antre.maintenance.rescue import Rescuer, pause_tolerance_s
from antre.observe.finder import Finder
from antre.settings import SettingError


def rescue_after(rescuer: Rescuer, clock: ManualClock, seconds: int, *beating) -> list:
    """The rescuer's pass once a second for ``seconds`` (as its duty runs), the processes in
    ``beating`` beating before each; every pass's result."""
    out = []
    for _ in range(seconds):
        clock.advance(1_000)
        for w in beating:
            w.heartbeat_once()
        out.append(rescuer.run())
    return out


def swept(app, clock, job_id):
    return [e for e in Finder(app.redis, clock).timeline("default", job_id).events
            if e.kind == "swept"]


def test_the_rescuer_returns_exactly_the_lost_process_leases_and_not_a_live_ones(app, clock):
    q = app.queue()
    ids = [q.enqueue("ping", {"i": i}, idempotency_key=f"p{i}") for i in range(3)]
    dead, live = make_worker(app, clock, worker_id="w-dead"), make_worker(app, clock,
                                                                          worker_id="w-live")
    dead.heartbeat_once()
    live.heartbeat_once()
    held_dead = q.reserve("w-dead", 2)
    held_live = q.reserve("w-live", 1)
    rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=3.5)
    assert not rescuer.run().watching  # it starts watching now
    # w-dead beats no more; within the tolerance nothing moves
    passes = rescue_after(rescuer, clock, 3, live)
    assert sum(p.returned for p in passes) == 0
    assert q.where(ids[0]) == ["inflight"]
    [found] = [p for p in rescue_after(rescuer, clock, 2, live) if p.lost]
    assert found.lost == ["w-dead"] and found.returned == 2
    for job in held_dead:
        assert q.where(job.id) == ["ready"]
        got = q.get(job.id)
        assert (got.state, got.deliveries, got.epoch) == ("ready", 1, job.epoch + 1)
        assert got.errors[-1]["kind"] == "worker_lost"
        [event] = swept(app, clock, job.id)
        assert event.actor == "rescuer"
        assert event.details["reason"] == "worker w-dead lost (no heartbeat for 4.0 s)"
        assert event.details["outcome"] == "ready"
    assert q.where(held_live[0].id) == ["inflight"] and not swept(app, clock, held_live[0].id)
    assert app.redis.zscore(q.keys.beats, "w-dead") is None
    assert app.redis.zscore(q.keys.beats, "w-live") is not None
    # the dead process's lease is fenced: its ack is refused, the live one's goes through
    with pytest.raises(LeaseLost):
        q.ack(held_dead[0], "late")
    q.ack(held_live[0], "ok")
    assert q.get(held_live[0].id).state == "done"
    # the next delivery is the second one, under a newer epoch still
    again = q.reserve("w-live", 2)
    assert sorted(j.id for j in again) == sorted(j.id for j in held_dead)
    assert all(j.deliveries == 2 and j.epoch == 3 for j in again)


def test_processes_lost_together_are_rescued_in_one_call_and_one_that_beat_since_is_not(
        app, clock):
    q = app.queue()
    for i in range(6):
        q.enqueue("ping", {"i": i}, idempotency_key=f"t{i}")
    held = {w: q.reserve(w, 2) for w in ("w-a", "w-b", "w-c")}
    app.redis.zadd(q.keys.beats, {"w-a": clock(), "w-b": clock(), "w-c": clock()})
    clock.advance(5_000)
    app.redis.zadd(q.keys.beats, {"w-c": clock()})  # w-c beat after the caller read
    got = q.rescue([(w, clock() - 5_000) for w in ("w-a", "w-b", "w-c", "w-a")],
                  clock() - 3_000)
    assert {r.worker_id: sorted(r.outcomes) for r in got} == {
        w: sorted(j.id for j in held[w]) for w in ("w-a", "w-b")}
    assert all(r.returned == 2 and r.buried == 0 for r in got)
    assert all(q.where(j.id) == ["inflight"] for j in held["w-c"])
    # its beat is gone: nothing twice
    assert q.rescue([("w-a", clock() - 5_000)], clock() - 3_000) == []
    assert app.redis.zrange(q.keys.beats, 0, -1) == ["w-c"]


@pytest.mark.parametrize("walk", [1, 2, 3, 7, 100])
def test_a_walk_over_several_calls_returns_every_lost_lease_and_no_other(app, clock, walk):
    """Jobs reserved together share their deadline: the walk goes on past ties."""
    q = app.queue()
    for i in range(20):
        q.enqueue("ping", {"i": i}, idempotency_key=f"walk{i}")
    held: dict[str, list[str]] = {"w-x": [], "w-y": [], "w-live": []}
    for n, w in enumerate(["w-x", "w-live", "w-y", "w-live", "w-x", "w-x", "w-live", "w-y"]):
        held[w] += [j.id for j in q.reserve(w, 1 + n % 3)]
        clock.advance(n % 2)  # some batches at the same ms, some not
    app.redis.zadd(q.keys.beats, {"w-x": clock(), "w-y": clock(), "w-live": clock() + 5_000})
    clock.advance(5_000)
    got = q.rescue(q.silent(clock() - 3_000), clock() - 3_000, walk=walk)
    assert {r.worker_id: sorted(r.outcomes) for r in got} == {
        "w-x": sorted(held["w-x"]), "w-y": sorted(held["w-y"])}
    assert all(q.where(i) == ["ready"] for w in ("w-x", "w-y") for i in held[w])
    assert all(q.where(i) == ["inflight"] for i in held["w-live"])


def test_a_returned_job_counts_a_delivery_so_a_poison_job_ends_in_the_dlq(app, clock):
    q = app.queue()
    job_id = q.enqueue("ping", {}, idempotency_key="poison", max_deliveries=2)
    rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=2)
    for n in (1, 2):
        w = make_worker(app, clock, worker_id=f"w{n}")
        w.heartbeat_once()
        assert [j.id for j in q.reserve(f"w{n}", 1)] == [job_id]
        rescue_after(rescuer, clock, 3)
    job = q.get(job_id)
    assert job.state == "dead" and "poison" in job.reason
    assert [e.details["outcome"] for e in swept(app, clock, job_id)] == ["ready", "dead"]


def test_a_lost_process_job_with_a_cancel_request_ends_cancelled_not_ready(app, clock):
    from antre.control.cancel import Cancels

    q = app.queue()
    to_dlq = q.enqueue("ping", {}, idempotency_key="c-dlq")
    to_bin = q.enqueue("ping", {}, idempotency_key="c-bin")
    assert len(q.reserve("w-gone", 2)) == 2
    cancels = Cancels(app.redis, clock)
    cancels.request("default", to_dlq, "alice", "dlq", "wrong tenant")
    cancels.request("default", to_bin, "bob", "discard", "duplicate")
    app.redis.zadd(q.keys.beats, {"w-gone": clock()})
    clock.advance(5_000)
    [res] = q.rescue(q.silent(clock() - 3_000), clock() - 3_000)
    assert res.returned == 0 and res.buried == 2
    assert q.where(to_dlq) == ["dead"] and q.where(to_bin) == []
    assert "cancelled by alice" in q.get(to_dlq).reason
    assert [e.kind for e in Finder(app.redis, clock).timeline("default", to_dlq).events][-2:] \
        == ["swept", "cancelled"]


def test_the_lost_process_business_locks_are_released_and_no_one_elses(app, clock):
    from antre.engine.locks import Locks

    q = app.queue()
    mine = q.enqueue("ping", {}, idempotency_key="l1", lock_key="acct:1")
    theirs = q.enqueue("ping", {}, idempotency_key="l2", lock_key="acct:2")
    locks = Locks(app.redis, clock=clock, scripts=app.scripts)
    [a] = q.reserve("w-lost", 1)
    [b] = q.reserve("w-lost", 1)
    assert {a.id, b.id} == {mine, theirs}
    locks.acquire("acct:1", 30_000, owner="w-lost")
    held = locks.acquire("acct:2", 30_000, owner="w-live")  # (taken over meanwhile)
    rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=2)
    app.redis.zadd(q.keys.beats, {"w-lost": clock()})
    [found] = [p for p in rescue_after(rescuer, clock, 4) if p.lost]
    assert found.locks_released == 1
    assert app.redis.get(keys.lock("acct:1")) is None  # the rerun need not wait out its TTL
    assert app.redis.get(keys.lock("acct:2")) == held.token
    assert len(q.reserve("w-next", 2)) == 2


def test_the_rescuer_judges_nobody_until_it_watched_a_whole_tolerance(app, clock):
    """After a gap (a Redis outage: nobody could beat), every beat is old: not a loss."""
    q = app.queue()
    q.enqueue("ping", {}, idempotency_key="g")
    w = make_worker(app, clock, worker_id="w-quiet")
    w.heartbeat_once()
    [job] = q.reserve("w-quiet", 1)
    rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=3)
    clock.advance(10_000)  # nobody, rescuer included, reached Redis for 10 s
    first = rescuer.run()
    assert not first.watching and q.where(job.id) == ["inflight"]
    w.heartbeat_once()  # the process is back within the tolerance
    rescue_after(rescuer, clock, 5, w)
    assert q.where(job.id) == ["inflight"]


def test_a_gap_shorter_than_the_tolerance_but_longer_than_two_ticks_also_resets_the_watch(
        app, clock):
    """Redis away for 3.4 s: a process that beat half a second before the rescuer's last
    tick is 3.9 s silent when Redis is back, past the tolerance, though it is alive."""
    q = app.queue()
    q.enqueue("ping", {}, idempotency_key="g3")
    w = make_worker(app, clock, worker_id="w-blip")
    rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=3.5)
    w.heartbeat_once()
    [job] = q.reserve("w-blip", 1)
    rescue_after(rescuer, clock, 5, w)  # watching, the process beating
    clock.advance(500)
    w.heartbeat_once()  # its last beat before the outage
    clock.advance(500)
    assert rescuer.run().watching  # the rescuer's last tick before it
    clock.advance(3_400)  # Redis back; the rescuer's tick comes first
    assert not rescuer.run().watching
    assert q.where(job.id) == ["inflight"]


def test_a_gracefully_stopped_worker_removes_its_heartbeat(app, clock):
    @app.handler("ping")
    def ping(ctx, payload):
        return None

    q = app.queue()
    q.enqueue("ping", {}, idempotency_key="s")
    seen = []
    w = make_worker(app, clock, worker_id="w-stops")
    w.leases.beat = lambda held: seen.append(app.redis.zscore(q.keys.beats, "w-stops"))
    w.heartbeat_once()
    assert seen == [clock()]
    w.run_burst()
    assert app.redis.zscore(q.keys.beats, "w-stops") is None


def test_the_pause_tolerance_setting_is_checked():
    name = "ANTRE_WORKER_PAUSE_TOLERANCE_S"
    assert pause_tolerance_s({}) == 3.5
    assert pause_tolerance_s({name: "off"}) == 0
    assert pause_tolerance_s({name: "10"}) == 10
    for bad in ("0", "0.5", "-1", "soon", "99999"):
        with pytest.raises(SettingError, match=name):
            pause_tolerance_s({name: bad})


def test_the_rescuer_does_nothing_when_off(app, clock, monkeypatch):
    monkeypatch.setenv("ANTRE_WORKER_PAUSE_TOLERANCE_S", "off")
    q = app.queue()
    q.enqueue("ping", {}, idempotency_key="z")
    make_worker(app, clock, worker_id="w-off").heartbeat_once()
    [job] = q.reserve("w-off", 1)
    rescue_after(Rescuer(app.redis, clock=clock, scripts=app.scripts), clock, 10)
    assert q.where(job.id) == ["inflight"]


def test_the_rescuer_duty_runs_on_the_pools_schedule(app, clock, monkeypatch):
    monkeypatch.setenv("ANTRE_WORKER_PAUSE_TOLERANCE_S", "2")
    q = app.queue()
    q.enqueue("ping", {}, idempotency_key="d")
    make_worker(app, clock, worker_id="w-gone").heartbeat_once()
    [job] = q.reserve("w-gone", 1)
    duties = Duties(app, clock=clock)
    assert duties.rescuer.tolerance_s == 2
    results = []
    for _ in range(4):
        clock.advance(1_000)
        results.append(duties.run("rescuer"))
        app.redis.delete(keys.maintenance_lock("rescuer"))  # the next tick
    assert [p.lost for p in results if p.lost] == [["w-gone"]]
    assert q.where(job.id) == ["ready"]


# -- a paused process cannot commit what it lost -------------------------------------------
@pytest.fixture
def dbapp(redis_url, sqlite_url, clock):
    a = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    with a.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k TEXT, delivery INTEGER)"))
    return a


def test_a_paused_process_whose_leases_were_returned_cannot_commit_or_ack(dbapp, clock):
    app = dbapp
    paused, resumed = threading.Event(), threading.Event()

    @app.handler("charge")
    def charge(ctx, payload):
        if ctx.job.deliveries == 1:  # the first process "pauses" here: no heartbeat meanwhile
            paused.set()
            assert resumed.wait(10)
        ctx.db.execute(text("INSERT INTO effects VALUES ('charged', :d)"),
                       {"d": ctx.job.deliveries})
        return {"delivery": ctx.job.deliveries}

    q = app.queue()
    job_id = q.enqueue("charge", {}, idempotency_key="c:1")
    a = make_worker(app, clock, worker_id="w-paused")
    t = threading.Thread(target=a.run_burst)
    t.start()
    assert paused.wait(10)
    rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=3)
    rescue_after(rescuer, clock, 5)
    assert q.where(job_id) == ["ready"]
    _, counts = burst(app, clock, worker_id="w-other")
    assert counts.get("processed") == 1
    resumed.set()  # the paused process wakes up and finishes its (lost) run
    t.join(10)
    assert not t.is_alive()
    job = q.get(job_id)
    assert (job.state, job.result, job.deliveries) == ("done", {"delivery": 2}, 2)
    with app.engine.connect() as conn:
        rows = conn.execute(text("SELECT k, delivery FROM effects")).all()
    assert [tuple(r) for r in rows] == [("charged", 2)]  # the paused run committed nothing
    assert a.counts.get("processed", 0) == 0


# -- a real worker process killed mid-job ---------------------------------------------------
def test_kill_9_mid_job_is_rerun_through_its_heartbeat_and_completes_once(redis_url, tmp_path,
                                                                          procs):
    app = Antre(redis_url=redis_url)
    r = app.redis
    q = app.queue()
    job_id = q.enqueue("hang_first", {}, idempotency_key="k9:1", visibility_timeout_s=30)
    log = tmp_path / "worker.log"
    args = ["antre_worker.child", "tests.apps.basic:app", "--threads", "1", "--heartbeat", "0.2"]
    p = spawn(redis_url, args, log)
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, 60, "handler started", poll_s=0.02)
    [(worker_id, _)] = r.zrange(q.keys.beats, 0, -1, withscores=True)
    p.kill()
    p.wait(10)
    # the rescuer's clock runs on from the kill; the lease (30 s) is far from its deadline
    clock = ManualClock(system_ms())
    rescuer = Rescuer(redis.Redis.from_url(redis_url, decode_responses=True), clock=clock)
    assert rescuer.tolerance_s == 3.5  # the default
    lost = [p for p in rescue_after(rescuer, clock, 5) if p.lost]
    assert [x.lost for x in lost] == [[worker_id]]
    assert lost[0].results[0].outcomes == {job_id: "ready"}
    assert q.get(job_id).deadline == 0 and q.where(job_id) == ["ready"]
    [event] = swept(app, clock, job_id)
    assert event.actor == "rescuer"
    assert event.details["reason"].startswith(f"worker {worker_id} lost (no heartbeat for ")
    p2 = spawn(redis_url, [*args, "--burst"], log)
    procs.append(p2)
    assert p2.wait(30) == 0
    job = q.get(job_id)
    assert (job.state, job.deliveries, job.result) == ("done", 2, {"deliveries": 2})
    assert r.llen("test:done") == 1
    assert [s.split(":")[1] for s in r.lrange("test:started", 0, -1)] == ["1", "2"]
