"""antre_worker.duties (sweeper and friends), antre_worker.loader and the ``sweep`` CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest


from antre import Antre
from antre.engine import keys
from antre.clock import ManualClock
from antre.engine.queue import Queue
from antre_worker.duties import Duties, sweep_once
from antre_worker.executor import WorkerProcess
from antre_worker.loader import AppLoadError, load_app
from antre_worker.pool import Supervisor

REPO = Path(__file__).resolve().parents[2]


def test_sweep_once_requeues_expired_leases_in_every_queue(app, clock):
    a, b = app.queue("a"), app.queue("b")
    ja = a.enqueue("t", {}, idempotency_key="a", visibility_timeout_s=10)
    jb = b.enqueue("t", {}, idempotency_key="b", visibility_timeout_s=10)
    later = b.enqueue("t", {}, idempotency_key="c", delay_s=5)
    a.reserve("w"), b.reserve("w")
    assert sweep_once(app)["requeued"] == 0
    clock.advance(10_001)
    res = sweep_once(app)
    assert res == {"queues": 2, "requeued": 2, "buried": 0, "unparked": 0, "cancels_pruned": 0}
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


def test_duties_survive_an_outage(clock):
    dead = Antre(redis_url="redis://127.0.0.1:1/0", clock=clock)
    duties = Duties(dead)
    for name in duties.duties:
        assert duties.run(name) is None
    assert duties.failures == len(duties.duties)


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
