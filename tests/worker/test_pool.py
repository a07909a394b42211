"""antre_worker.duties (sweeper and friends), antre_worker.loader and the ``sweep`` CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


from antre import Antre
from antre.engine import keys
from antre.clock import ManualClock
from antre.engine.queue import Queue
from antre.groups.control import GroupControl
from antre.limits.gates import Declaration, Gates
from antre_worker.duties import Duties, Duty, sweep_once
from antre_worker.runner import WorkerProcess
from antre_worker.loader import AppLoadError, load_app
from antre_worker.pool import Supervisor

REPO = Path(__file__).resolve().parents[2]


def test_sweep_once_ends_limit_overrides_whose_time_is_up_and_starts_what_they_held(app, clock):
    # a type held at 0 slots and a group held at 0 for 60 s: nothing of theirs ends meanwhile,
    # so only the sweeper's pass can start their waiting jobs once the time is up
    q = app.queue("jobs")
    gates = Gates(app.redis, clock)
    gates.declare("jobs", Declaration(cand={"t": "type:t"}, conc={"type:t": 2}))
    gates.set_override("jobs", "type", "t", "ops", "downstream is down", slots=0,
                       revert_after_s=60)
    typed = [q.enqueue("t", {"i": i}, idempotency_key=f"t{i}") for i in range(2)]
    assert q.reserve("w", count=10) == [] and q.get(typed[0]).state == "waiting"
    GroupControl(app.redis, clock).set_slots("jobs", "tenant:1", 0, "ops", "bad data",
                                             revert_after_s=60)
    grouped = q.enqueue("u", {}, idempotency_key="g1", group="tenant:1")
    assert q.get(grouped).state == "waiting"
    assert sweep_once(app)["overrides_reverted"] == 0
    clock.advance(60_001)
    assert sweep_once(app)["overrides_reverted"] == 2
    assert [q.get(i).state for i in typed + [grouped]] == ["ready"] * 3
    assert app.redis.hlen(q.keys.group_limits) == 0


def test_sweep_once_requeues_expired_leases_in_every_queue(app, clock):
    a, b = app.queue("a"), app.queue("b")
    ja = a.enqueue("t", {}, idempotency_key="a", visibility_timeout_s=10)
    jb = b.enqueue("t", {}, idempotency_key="b", visibility_timeout_s=10)
    later = b.enqueue("t", {}, idempotency_key="c", delay_s=5)
    a.reserve("w"), b.reserve("w")
    assert sweep_once(app)["requeued"] == 0
    clock.advance(10_001)
    res = sweep_once(app)
    assert res == {"queues": 2, "requeued": 2, "buried": 0, "unparked": 0, "cancels_pruned": 0,
                   "overrides_reverted": 0}
    assert a.where(ja) == ["ready"] and b.where(jb) == ["ready"]
    # due scheduled jobs are promoted in one place: by the worker processes of their queue
    assert b.where(later) == ["scheduled"] and "promoter" not in Duties(app).duties
    assert WorkerProcess(app, queues=["a", "b"], clock=clock).promote_due() == 1
    assert b.where(later) == ["ready"]


def test_a_duty_runs_once_per_tick_cluster_wide(app, clock, r):
    q = app.queue()
    q.enqueue("t", {}, idempotency_key="x", visibility_timeout_s=1)
    q.reserve("w")
    clock.advance(1_001)
    one, two = Duties(app), Duties(app)  # two pools
    assert one.run("sweeper")["requeued"] == 1
    assert two.run("sweeper") is None  # same tick: skipped
    assert 0 < r.pttl(keys.maintenance_lock("sweeper")) <= 900
    r.delete(keys.maintenance_lock("sweeper"))  # the tick's key expired
    assert two.run("sweeper")["requeued"] == 0


def test_duties_survive_an_outage(clock, caplog):
    dead = Antre(redis_url="redis://127.0.0.1:1/0", clock=clock)
    duties = Duties(dead)
    with caplog.at_level(logging.DEBUG, logger="antre.worker.duties"):
        for _ in range(3):  # three ticks of every duty
            for name in duties.duties:
                assert duties.run(name) is None
    assert duties.failures == 3 * len(duties.duties)
    # one WARNING for the outage, not one per duty per tick
    said = [x.levelno for x in caplog.records if x.name == "antre.worker.duties"]
    assert said.count(logging.WARNING) == 1 and logging.ERROR not in said


def test_a_redis_timeout_in_a_duty_is_one_warning_without_traceback(app, caplog):
    """redis-py 8's TimeoutError is no ConnectionError: a Redis that stalls past the socket
    timeout is an outage too, one WARNING line, no ERROR with a traceback per tick."""
    slow = redis.Redis.from_url(app.redis_url, socket_timeout=0.05,
                                retry=Retry(NoBackoff(), 0))

    def stalls(d: Duties) -> object:  # a real read timeout: BLPOP outlives the socket timeout
        return slow.blpop(["antre-test:never"], timeout=1)

    duties = Duties(app, duties=(Duty("stalls", 1.0, stalls),))
    with caplog.at_level(logging.INFO, logger="antre.worker.duties"):
        assert duties.run("stalls") is None
    [rec] = [x for x in caplog.records if x.name == "antre.worker.duties"]
    assert rec.levelno == logging.WARNING and not rec.exc_info
    assert "duty stalls failed" in rec.getMessage() and duties.failures == 1


def test_every_duty_runs_against_a_live_redis(app):
    duties = Duties(app)
    assert duties.run("sampler") == 0  # no queues yet
    assert duties.run("bulk_replays") == 0
    assert duties.run("idempotency_pruner") is None  # no database configured
    assert duties.run("outbox_relay") in (None, 0)
    assert duties.failures == 0


def test_scheduler_starts_and_stops(app):
    duties = Duties(app)
    duties.start()
    assert {j.id for j in duties.scheduler.get_jobs()} == set(duties.duties)
    duties.stop()


def test_load_app_errors_are_clear():
    with pytest.raises(AppLoadError, match="cannot import 'no_such_mod'"):
        load_app("no_such_mod:app")
    with pytest.raises(AppLoadError, match="has no attribute 'nope'"):
        load_app("tests.apps.basic:nope")
    with pytest.raises(AppLoadError, match="not an antre.Antre"):
        load_app("tests.apps.basic:echo")
    assert isinstance(load_app("tests.apps.basic"), Antre)


def test_sweep_cli_prints_one_pass(redis_url, r):
    q = Queue(r, "default", clock=ManualClock(1))
    q.enqueue("t", {}, idempotency_key="x", visibility_timeout_s=1)
    q.reserve("w")  # deadline far in the past for the real clock
    env = {**os.environ, "ANTRE_REDIS_URL": redis_url, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "antre_worker", "sweep", "tests.apps.basic:app"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["requeued"] == 1


def test_worker_cli_rejects_a_bad_app_path(redis_url):
    env = {**os.environ, "ANTRE_REDIS_URL": redis_url, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "antre_worker", "worker", "nope.nope:app", "--burst"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and "cannot import 'nope.nope'" in out.stderr


def test_an_evicting_redis_is_one_warning_at_start_and_again_only_when_it_changes(
        embedded_redis_factory, caplog):
    """A Redis that evicts deletes jobs silently when full: the pool says so at start (one
    WARNING naming the policy and what to set), the duty checks every minute and speaks again
    only when the policy changed."""
    server = embedded_redis_factory(tcp=True, extra_args=["--maxmemory-policy", "allkeys-lru"])
    app = Antre(redis_url=server.url)
    pool = Supervisor("tests.apps.basic:app", app=app)
    with caplog.at_level(logging.INFO, logger="antre.worker"):
        pool._check_eviction()  # what run() does first
        app.redis.delete(keys.maintenance_lock("eviction_check"))
        assert pool.duties.run("eviction_check").policy == "allkeys-lru"  # the same: quiet
        app.redis.config_set("maxmemory-policy", "volatile-lru")
        app.redis.delete(keys.maintenance_lock("eviction_check"))
        pool.duties.run("eviction_check")
        app.redis.config_set("maxmemory-policy", "noeviction")
        app.redis.delete(keys.maintenance_lock("eviction_check"))
        assert pool.duties.run("eviction_check").evicts is False
    warned = [x for x in caplog.records if getattr(x, "event", "") == "redis_evicts"]
    assert [(x.levelno, x.policy) for x in warned] == [(logging.WARNING, "allkeys-lru"),
                                                        (logging.WARNING, "volatile-lru")]
    assert "Set maxmemory-policy noeviction" in warned[0].getMessage()


@pytest.mark.parametrize("with_database", [False, True])
def test_a_pool_without_a_database_says_once_that_effects_may_repeat(
        redis_url, sqlite_url, caplog, with_database):
    app = Antre(redis_url=redis_url, database_url=sqlite_url if with_database else None)
    sup = Supervisor("tests.apps.basic:app", 1, 1, ["default"], burst=True, scheduler=False,
                     app=app)
    with caplog.at_level(logging.WARNING, logger="antre.worker.pool"):
        assert sup.run() == 0
    warned = [r for r in caplog.records if getattr(r, "event", "") == "no_idempotency_store"]
    assert len(warned) == (0 if with_database else 1)
    if warned:
        assert "ANTRE_DATABASE_URL" in warned[0].getMessage()
