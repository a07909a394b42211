"""CLI parity: every dashboard action as an ``antre`` command against a real Redis and SQLite,
audited with the OS user as the actor; bad input is an error on stderr, changes nothing and
is audited as refused."""

from __future__ import annotations

import getpass
import json

import pytest

from antre import Antre
from antre.limits.admission import Limits
from antre_cli.main import main

ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    return Antre(redis_url=redis_url, database_url=sqlite_url)


def audited(app, action):
    return [(e.user, e.outcome, e.reason) for e in app.audit.list(action=action)]


def test_pause_and_resume_a_queue_and_a_type(env, capsys):
    q = env.queue("billing")
    q.enqueue("charge", {}, idempotency_key="k1")
    q.enqueue("refund", {}, idempotency_key="k2")
    assert main(["pause", "billing", "--reason", "bad deploy"]) == 0
    assert q.reserve("w", 5) == []
    assert main(["resume", "billing", "--reason", "fixed"]) == 0
    assert main(["pause", "billing", "--type", "charge", "--reason", "psp down"]) == 0
    assert [j.type for j in q.reserve("w", 5)] == ["refund"]
    assert "paused" in capsys.readouterr().out
    assert main(["resume", "billing", "--type", "charge"]) == 0
    assert [j.type for j in q.reserve("w", 5)] == ["charge"]
    assert audited(env, "queue.pause") == [(ACTOR, "ok", "psp down"), (ACTOR, "ok", "bad deploy")]
    assert [o for _, o, _ in audited(env, "queue.resume")] == ["ok", "ok"]


@pytest.mark.parametrize("argv, message", [
    (["pause", "nosuch", "--reason", "x"], "no queue 'nosuch'"),
    (["pause", "billing", "--type", "nosuch", "--reason", "x"], "no job type 'nosuch'"),
    (["pause", "billing", "--reason", "  "], "reason is required"),
    (["resume", "billing"], "is not paused"),
])
def test_bad_pause_input_is_refused_and_audited(env, capsys, argv, message):
    env.queue("billing").enqueue("charge", {}, idempotency_key="k1")
    assert main(argv) == 1
    assert message in capsys.readouterr().err
    assert env.redis.hlen(env.queue("billing").keys.paused) == 0
    (entry,) = env.audit.list(action=f"queue.{argv[0]}")
    assert (entry.user, entry.outcome) == (ACTOR, "refused")


def test_job_delete_run_now_and_extend(env, capsys):
    q = env.queue("billing")
    sched = q.enqueue("charge", {}, idempotency_key="k1", delay_s=60)
    other = q.enqueue("charge", {}, idempotency_key="k2", delay_s=60)
    assert main(["job", "run-now", "billing", sched, "--reason", "now"]) == 0
    assert q.where(sched) == ["ready"]
    (running,) = q.reserve("w")
    assert main(["job", "extend", "billing", running.id, "--epoch", str(running.epoch),
                 "--seconds", "60"]) == 0
    assert q.get(running.id).deadline == running.deadline + 60_000
    assert main(["job", "extend", "billing", running.id, "--epoch", "99"]) == 1
    assert "lease epoch" in capsys.readouterr().err
    assert main(["job", "delete", "billing", running.id, "--reason", "x"]) == 1
    assert main(["job", "delete", "billing", other, "--reason", "bad payload"]) == 0
    assert q.get(other) is None and q.where(running.id) == ["inflight"]
    assert [o for _, o, _ in audited(env, "inflight.extend")] == ["refused", "ok"]
    assert [o for _, o, _ in audited(env, "job.delete")] == ["ok", "refused"]
    assert audited(env, "scheduled.run_now") == [(ACTOR, "ok", "now")]


def test_purge_dry_run_confirmation_paced_task_and_controls(env, capsys):
    q = env.queue("billing")
    for i in range(6):
        q.enqueue("charge", {"tenant": i % 2}, idempotency_key=f"k{i}")
    base = ["purge", "billing", "--field", "tenant", "--value", "1"]
    assert main([*base, "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("3 jobs match")
    assert main([*base, "--confirm", "4"]) == 1
    assert "--confirm 3" in capsys.readouterr().err
    assert main(["purge", "billing", "--type", "nosuch", "--confirm", "purge"]) == 1
    assert "no job matches" in capsys.readouterr().err
    assert main(["purge", "nosuch", "--confirm", "purge"]) == 1
    assert "no queue 'nosuch'" in capsys.readouterr().err
    assert main([*base, "--confirm", "3", "--rate", "1", "--reason", "bad tenant"]) == 0
    assert "purge" in capsys.readouterr().out
    assert main(["tasks", "billing", "--json"]) == 0
    (task,) = json.loads(capsys.readouterr().out)
    assert (task["kind"], task["total"], task["state"], task["user"]) == (
        "purge", 3, "running", ACTOR)
    assert main(["task", "pause", "billing", task["id"]]) == 0
    assert main(["task", "pause", "billing", task["id"]]) == 1
    assert main(["task", "cancel", "billing", task["id"], "--reason", "enough"]) == 0
    assert main(["task", "cancel", "billing", "nope"]) == 1
    outcomes = [o for _, o, _ in audited(env, "purge.start")]
    assert sorted(outcomes) == ["ok", "refused", "refused", "refused"]
    assert [o for _, o, _ in audited(env, "purge.pause")] == ["refused", "ok"]
    assert [o for _, o, _ in audited(env, "purge.cancel")] == ["ok"]
    assert [o for _, o, _ in audited(env, "dlq.bulk_replay.cancel")] == ["refused"]  # unknown


def test_bulk_replay_lock_release_and_breaker_reset(env, capsys):
    q = env.queue("billing")
    q.enqueue("charge", {}, idempotency_key="k1")
    (job,) = q.reserve("w")
    q.bury(job, reason="declined")
    assert main(["bulk-replay", "billing", "--rate", "10", "--maximum", "5",
                 "--reason", "psp back"]) == 0
    assert main(["tasks", "billing"]) == 0
    assert "replay" in capsys.readouterr().out
    lock = env.locks.acquire("customer:1", 30_000, owner="w")
    assert main(["lock", "release", "customer:1", "--token", "wrong"]) == 1
    assert main(["lock", "release", "customer:1", "--token", lock.token]) == 0
    assert env.redis.exists(f"antre:lock:{{customer:1}}") == 0
    breaker = Limits(env.redis, env.clock).breaker("psp", failure_threshold=1)
    breaker.record_failure()
    assert breaker.state().state == "open"
    assert main(["breaker", "reset", "nosuch"]) == 1
    assert main(["breaker", "reset", "psp", "--reason", "psp is back"]) == 0
    assert breaker.state().state == "closed"
    assert audited(env, "dlq.bulk_replay.start") == [(ACTOR, "ok", "psp back")]
    assert [o for _, o, _ in audited(env, "locks.release")] == ["ok", "refused"]
    assert [o for _, o, _ in audited(env, "flow.reset_breaker")] == ["ok", "refused"]


def test_changes_need_the_audit_database(monkeypatch, redis_url, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.delenv("ANTRE_DATABASE_URL", raising=False)
    assert main(["pause", "default", "--reason", "x"]) == 2
    assert "ANTRE_DATABASE_URL" in capsys.readouterr().err


def test_cancel_a_running_job_and_refuse_a_finished_one(env, capsys):
    q = env.queue("billing")
    job_id = q.enqueue("charge", {}, idempotency_key="k1")
    assert main(["job", "cancel", "billing", job_id, "--reason", "x"]) == 1
    assert "it is ready" in capsys.readouterr().err
    (job,) = q.reserve("w")
    assert main(["job", "cancel", "billing", job_id, "--to", "discard", "--reason", "dup"]) == 0
    assert q.get(job_id).cancel and env.redis.hexists(q.keys.cancels, job_id)
    assert [o for _, o, _ in audited(env, "job.cancel")] == ["ok", "refused"]


def test_status_shows_who_paused_what(env, capsys):
    env.queue("billing").enqueue("charge", {}, idempotency_key="k1")
    assert main(["pause", "billing", "--type", "charge", "--reason", "psp down"]) == 0
    capsys.readouterr()
    assert main(["status"]) == 0
    assert f"paused: charge by {ACTOR}" in capsys.readouterr().out


def test_job_replay_and_discard_of_one_dead_job_come_from_the_table(env, capsys):
    q = env.queue("billing")
    for key in ("k1", "k2"):
        q.enqueue("charge", {}, idempotency_key=key)
    a, b = q.reserve("w", 2)
    for job in (a, b):
        q.bury(job, reason="card declined", error="declined")
    assert main(["job", "replay", "billing", a.id, "--reason", "card fixed"]) == 0
    assert "replayed: back in the ready list" in capsys.readouterr().out
    assert q.where(a.id) == ["ready"]
    assert main(["job", "replay", "billing", a.id]) == 1
    assert "error: job" in capsys.readouterr().err and q.where(a.id) == ["ready"]
    assert main(["job", "discard", "billing", b.id, "--reason", "dup"]) == 0
    assert q.get(b.id) is None
    assert audited(env, "dlq.replay") == [(ACTOR, "refused", ""), (ACTOR, "ok", "card fixed")]
    assert audited(env, "dlq.discard") == [(ACTOR, "ok", "dup")]


def test_task_commands_pick_the_bulk_replay_or_the_purge_entry_by_the_tasks_kind(env, capsys):
    q = env.queue("billing")
    q.enqueue("charge", {}, idempotency_key="k1")
    (job,) = q.reserve("w")
    q.bury(job, reason="declined")
    q.enqueue("charge", {}, idempotency_key="k2")
    assert main(["bulk-replay", "billing", "--rate", "1", "--maximum", "5"]) == 0
    assert main(["purge", "billing", "--confirm", "1", "--rate", "1"]) == 0
    capsys.readouterr()
    assert main(["tasks", "billing", "--json"]) == 0
    ids = {t["kind"]: t["id"] for t in json.loads(capsys.readouterr().out)}
    assert main(["task", "pause", "billing", ids["replay"], "--reason", "slow down"]) == 0
    assert "bulk replay" in capsys.readouterr().out
    assert main(["task", "pause", "billing", ids["purge"]]) == 0
    assert f"purge {ids['purge']}: paused" in capsys.readouterr().out
    assert audited(env, "dlq.bulk_replay.pause") == [(ACTOR, "ok", "slow down")]
    assert audited(env, "purge.pause") == [(ACTOR, "ok", "")]


def _abandoned(app: Antre, key: str) -> str:
    """A record whose delivery began its effect, whose lease has run out, and whose job Redis
    lost (deleted with every trace of it, as after a data loss)."""
    app.enqueue("charge", {}, idempotency_key=key)
    (job,) = app.queue().reserve("w1")
    app.idempotency.begin(key, "fp", "charge", job.id, job.epoch, "w1", app.clock() - 1)
    app.redis.flushall()
    return job.id


def test_result_reports_an_abandoned_record_and_idempotency_resolve_settles_it(env, capsys):
    job_id = _abandoned(env, "order:7")
    assert main(["result", "order:7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"abandoned (job {job_id})" and out[1].startswith("abandoned since ")
    assert main(["result", "order:7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["abandoned_since_ms"] > 0
    assert main(["idempotency", "resolve", "order:7", "--to", "failed",
                 "--reason", "never charged"]) == 0
    assert "marked failed" in capsys.readouterr().out
    assert main(["result", "order:7"]) == 0
    assert capsys.readouterr().out.startswith("failed")
    assert main(["idempotency", "resolve", "order:7", "--to", "reset",
                 "--reason", "again"]) == 1  # failed now, not abandoned: refused
    assert "not abandoned" in capsys.readouterr().err
    _abandoned(env, "order:8")
    assert main(["idempotency", "resolve", "order:8", "--to", "reset",
                 "--reason", "resend it"]) == 0
    assert env.idempotency.lookup("order:8") is None
    assert audited(env, "idempotency.resolve") == [
        (ACTOR, "ok", "resend it"), (ACTOR, "refused", "again"), (ACTOR, "ok", "never charged")]


def test_filtered_replay_now_and_discard_are_the_tables_audited(env, capsys):
    """``antre filtered replay-now|discard QUEUE``: the dashboard's filtered-set entries, the
    time window from the app's clock; discard asks for the count (``--dry-run`` says it)."""
    q = env.queue("billing")
    for key, kind in (("k1", "charge"), ("k2", "refund"), ("k3", "refund")):
        q.enqueue(kind, {}, idempotency_key=key)
        (job,) = q.reserve("w")
        q.bury(job, reason="declined")
    assert main(["filtered", "replay-now", "billing", "--type", "charge", "--window", "1h",
                 "--maximum", "10", "--reason", "psp back"]) == 0
    assert "replayed 1 dead jobs" in capsys.readouterr().out
    assert main(["filtered", "discard", "billing", "--dry-run", "--confirm", "x"]) == 0
    assert "2 dead jobs match" in capsys.readouterr().out
    assert main(["filtered", "discard", "billing", "--confirm", "5"]) == 1
    assert "pass --confirm 2" in capsys.readouterr().err
    assert main(["filtered", "discard", "billing", "--since-ms", "-5", "--confirm", "2"]) == 1
    assert "since_ms must be epoch milliseconds" in capsys.readouterr().err
    assert main(["filtered", "discard", "billing", "--confirm", "2"]) == 0
    assert env.redis.zcard(q.keys.dead) == 0
    assert audited(env, "dlq.replay_filtered_now") == [(ACTOR, "ok", "psp back")]
    assert [o for _, o, _ in audited(env, "dlq.discard_filtered")] == ["ok", "refused"]
    capsys.readouterr()
    assert main(["bulk-replay", "billing", "--window", "1h", "--rate", "1",
                 "--maximum", "5"]) == 0  # the window from the clock, as the dashboard's
    assert "0 jobs match (since=" in capsys.readouterr().out
    assert [o for _, o, _ in audited(env, "dlq.bulk_replay.start")] == ["ok"]


@pytest.mark.parametrize("command", [["job", "cancel", "billing", "j1"],
                                     ["flow", "cancel", "billing", "f1"]])
def test_a_job_and_a_flow_cancel_offer_the_same_destinations(env, capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--to", "nowhere", "--reason", "x"])
    assert exit_.value.code == 2
    assert "(choose from 'dlq', 'discard')" in capsys.readouterr().err
