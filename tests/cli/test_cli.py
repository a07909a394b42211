"""The ``antre`` command: status, dlq, user, sweep — against a real Redis and SQLite."""

from __future__ import annotations

import json

import pytest

from antre import Antre
from antre.engine.locks import LockBusy
from antre_cli.main import main
from antre_cli.web import bootstrap_admin


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    return Antre(redis_url=redis_url, database_url=sqlite_url)


def dead(app: Antre, n: int, job_type: str = "charge") -> list[str]:
    q = app.queue("billing")
    ids = []
    for i in range(n):
        ids.append(q.enqueue(job_type, {"i": i}, idempotency_key=f"{job_type}:{i}"))
        (job,) = q.reserve("w1")
        q.bury(job, reason="card declined", error=f"Declined: card {i}")
    return ids


def test_status_json(env, capsys):
    env.queue("billing").enqueue("charge", {}, idempotency_key="k")
    assert main(["status", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queues"][0]["name"] == "billing" and out["queues"][0]["ready"] == 1


def test_status_shows_the_overview_summary(env, capsys):
    env.queue("billing").enqueue("charge", {}, idempotency_key="k")
    held = env.locks.acquire("sku:7", 60_000, owner="a")
    with pytest.raises(LockBusy):
        env.locks.acquire("sku:7", 60_000, owner="b")
    env.locks.release(held)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "billing" in out and "lock conflicts: 1 in 5 min, 1 in 1 h" in out
    assert "sku:7: 1/1/1" in out
    assert main(["status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # the same StatusSummary as /api/overview
    assert data["conflicts_5m"] == 1 and data["contention"][0]["key"] == "sku:7"
    assert data["rates"]["billing"] == {"acked": None, "retried": None, "buried": None,
                                        "expired": None}


def test_status_says_what_to_do_when_redis_is_down(monkeypatch, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", "redis://127.0.0.1:1/0")
    assert main(["status"]) == 2
    assert "unreachable" in capsys.readouterr().err


def test_dlq_list_show_replay_discard_are_audited(env, capsys):
    a, b, c = dead(env, 3)
    assert main(["dlq", "--queue", "billing", "list", "--json"]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {a, b, c}
    assert main(["dlq", "--queue", "billing", "show", a]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "card declined"
    assert main(["dlq", "--queue", "billing", "replay", a, "--reason", "card fixed"]) == 0
    assert main(["dlq", "--queue", "billing", "discard", "--all", "--type", "charge"]) == 0
    q = env.queue("billing")
    assert q.where(a) == ["ready"] and q.get(b) is None and q.get(c) is None
    actions = [(e.action, e.reason) for e in env.audit.list()]
    assert ("dlq.replay", "card fixed") in actions and ("dlq.discard", "") in actions


def test_dlq_replay_of_a_job_not_dead_fails_clearly(env, capsys):
    job_id = env.queue("billing").enqueue("charge", {}, idempotency_key="k")
    assert main(["dlq", "--queue", "billing", "replay", job_id]) == 1
    assert "replay: 0 of 1" in capsys.readouterr().out


def test_user_add_generates_a_password(env, capsys):
    assert main(["user", "add", "alice", "--role", "operator"]) == 0
    password = capsys.readouterr().out.rsplit("password: ", 1)[1].strip()
    assert env.users.verify("alice", password).role == "operator"


def test_sweep_command(env, capsys, monkeypatch, antre_logging):  # it configures logging
    monkeypatch.syspath_prepend(".")
    assert main(["sweep", "tests.apps.basic:app"]) == 0
    assert "requeued" in capsys.readouterr().out


def test_web_creates_the_first_admin_only_on_an_empty_user_table(env, monkeypatch):
    monkeypatch.delenv("ANTRE_ADMIN_PASSWORD", raising=False)
    assert bootstrap_admin(None) is None and env.users.count() == 0
    monkeypatch.setenv("ANTRE_ADMIN_PASSWORD", "first-password")
    assert bootstrap_admin(None) == "admin"
    assert env.users.verify("admin", "first-password").role == "admin"
    monkeypatch.setenv("ANTRE_ADMIN_PASSWORD", "another")
    assert bootstrap_admin(None) is None  # never touches existing users
    assert env.users.verify("admin", "another") is None


def test_schedules_list_pause_resume_run_are_audited(env, capsys):
    env.periodic("0 * * * *", "report", payload={"kind": "hourly"})
    env.scheduler().run_once()
    assert main(["schedules", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("report") and "cron 0 * * * * (UTC)" in out and "never run" in out
    assert main(["schedules", "pause", "report", "--reason", "month end"]) == 0
    assert main(["schedules", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])[0]["paused"] is True
    assert main(["schedules", "resume", "report"]) == 0
    assert main(["schedules", "run", "report"]) == 0
    job_id = capsys.readouterr().out.strip().rsplit(" ", 1)[1].rstrip(")")
    assert env.queue().get(job_id).payload == {"kind": "hourly"}
    actions = [(e.action, e.reason) for e in env.audit.list()]
    assert ("schedules.pause", "month end") in actions
    assert ("schedules.resume", "") in actions and ("schedules.run_now", "") in actions


def test_schedules_on_an_unknown_name_fail_clearly(env, capsys):
    assert main(["schedules", "run", "nope"]) == 1
    assert "no schedule named 'nope'" in capsys.readouterr().err


# -- antre find --------------------------------------------------------------------------------
def test_find_by_id_key_and_field_prints_job_timeline_and_hits(env, capsys):
    a, b = dead(env, 2)
    assert main(["dlq", "--queue", "billing", "replay", a, "--reason", "card fixed"]) == 0
    capsys.readouterr()
    assert main(["find", a]) == 0
    out = capsys.readouterr().out
    assert f"job {a} in billing: ready" in out
    assert [line.split()[2] for line in out.splitlines()[1:]] == [
        "enqueued", "reserved", "buried", "replayed"]
    assert "cli:" in out.splitlines()[-1]
    assert main(["find", "charge:1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["job"]["job_id"] == b and got["job"]["state"] == "dead"
    assert main(["find", "i=1", "--queue", "billing", "--state", "dead", "--json"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["job_id"] for line in captured.out.splitlines()] == [b]
    assert "scanned" in captured.err


def test_find_bad_input_says_what_to_type(env, capsys):
    dead(env, 1)
    assert main(["find", "no-such-job"]) == 1
    assert "field=value" in capsys.readouterr().err
    assert main(["find", "a..b=1"]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["find", "i=99"]) == 1
    assert "0 found" in capsys.readouterr().err


def test_result_says_completed_pending_failed_unknown(env, capsys):
    dead(env, 1)  # charge:0
    q = env.queue("billing")
    q.enqueue("charge", {}, idempotency_key="paid")
    q.ack(q.reserve("w1")[0], {"receipt": 7})
    q.enqueue("charge", {}, idempotency_key="waiting")
    assert main(["result", "paid"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == '{"receipt": 7}'
    assert main(["result", "waiting", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "pending"
    assert main(["result", "charge:0"]) == 0
    assert capsys.readouterr().out.startswith("failed")
    assert main(["result", "never"]) == 1
    assert capsys.readouterr().out.strip() == "unknown"


def test_result_and_find_show_progress_and_wait(env, capsys):
    q = env.queue("billing")
    job_id = q.enqueue("charge", {}, idempotency_key="import:1")
    (job,) = q.reserve("w1")
    q.progress(job, 0.4, "rows 4,000/10,000")
    assert main(["result", "import:1", "--wait", "0.1"]) == 3  # a real, short BLPOP timeout
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"pending (job {job_id}), still after waiting 0.1s"
    assert out[1].startswith("progress 40% rows 4,000/10,000 (at ")
    assert main(["result", "import:1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["progress"]["fraction"] == 0.4 and got["progress"]["message"].startswith("rows")
    assert main(["find", job_id]) == 0
    assert "  progress 40% rows 4,000/10,000" in capsys.readouterr().out
    assert main(["find", job_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"]["progress"]["fraction"] == 0.4
    q.ack(job, "ok")
    assert main(["result", "import:1", "--wait", "30"]) == 0  # ended: answers at once
    assert capsys.readouterr().out.splitlines()[2] == '"ok"'
    assert main(["result", "import:1", "--wait", "-1"]) == 2
    assert "timeout must be a number of seconds" in capsys.readouterr().err


def test_status_warns_when_redis_can_evict_jobs(env, capsys):
    env.redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert main(["status", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
    finally:
        env.redis.config_set("maxmemory-policy", "noeviction")
    assert "redis memory: maxmemory-policy allkeys-lru" in out
    assert "WARNING: Redis maxmemory-policy is allkeys-lru" in out
    assert "Set maxmemory-policy noeviction" in out
    assert data["memory"]["policy"] == "allkeys-lru" and data["memory"]["evicts"] is True
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "maxmemory-policy noeviction" in out and "WARNING" not in out


def test_web_without_a_user_database_refuses_and_says_what_to_set(redis_url, monkeypatch,
                                                                  capsys):
    import antre_cli.web
    from webtools import TEST_SECRET_KEY

    def no_gunicorn(self):
        raise AssertionError("gunicorn was started")

    monkeypatch.setattr(antre_cli.web._Gunicorn, "run", no_gunicorn)
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.delenv("ANTRE_DATABASE_URL", raising=False)
    monkeypatch.setenv("ANTRE_SECRET_KEY", TEST_SECRET_KEY)
    assert main(["web", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "no user database" in err and "ANTRE_DATABASE_URL" in err


def test_the_live_worker_count_is_the_same_in_text_json_and_the_overview(env, capsys):
    """A burst worker that stopped a moment ago (state 'stopped', heartbeat fresh) and a
    supervisor are not live processes anywhere; one running process is."""
    from antre.observe.registry import WorkerInfo, WorkerRegistry
    from antre.observe.status import status_summary

    reg = WorkerRegistry(env.redis)
    reg.beat(WorkerInfo(id="burst-1", state="stopped"))
    reg.beat(WorkerInfo(id="sup-1", kind="supervisor"))
    reg.beat(WorkerInfo(id="w-1"))
    assert main(["status"]) == 0
    assert "workers: 1 live processes" in capsys.readouterr().out
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["live_workers"] == 1
    assert status_summary(env.redis).live_workers == 1


def test_status_reads_the_worker_registry_once(env, capsys, monkeypatch):
    """The live count and the rows of ``antre status`` come from one read of the registry."""
    from antre.observe.registry import WorkerInfo, WorkerRegistry

    WorkerRegistry(env.redis).beat(WorkerInfo(id="w-1"))
    reads = []
    real = WorkerRegistry.list

    def counted(self, limit=500):
        reads.append(limit)
        return real(self, limit)
    monkeypatch.setattr(WorkerRegistry, "list", counted)
    assert main(["status", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["live_workers"] == 1 and [w["id"] for w in out["workers"]] == ["w-1"]
    assert len(reads) == 1


def test_find_by_field_prints_readable_text(env, capsys):
    env.queue("billing").enqueue("charge", {"order": {"id": 7}, "tenant": "acme"},
                                 idempotency_key="charge:acme:7")
    assert main(["find", "tenant=acme", "--queue", "billing"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.endswith('tenant="acme"') and "{" not in line and "'" not in line


def test_find_counts_attempts_from_one(env, capsys):
    q = env.queue("billing")
    job_id = q.enqueue("charge", {}, idempotency_key="fresh")
    assert main(["find", job_id]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "not run yet" in line and "attempt 0" not in line
    q.reserve("w1")
    assert main(["find", job_id]) == 0
    assert "(charge, attempt 1/" in capsys.readouterr().out.splitlines()[0]
