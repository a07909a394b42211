"""``antre dlq replay|discard`` over many job ids (or ``--all`` by a filter) is the DLQ
selection of the table of actions (``antre/actions/table.py``): each job runs the one-job entry
``dlq.replay`` / ``dlq.discard``, audited once per job as ``cli:NAME`` like the dashboard's
ticked rows, and the line it prints says how many were done."""

from __future__ import annotations

import getpass

import pytest

from antre import Antre
from antre.clock import ManualClock, system_ms
from antre_cli.main import main

ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    return Antre(redis_url=redis_url, database_url=sqlite_url, clock=ManualClock(system_ms()))


def dead(app: Antre, types: list[str]) -> list[str]:
    q = app.queue("billing")
    ids = []
    for i, job_type in enumerate(types):
        ids.append(q.enqueue(job_type, {"i": i}, idempotency_key=f"{job_type}:{i}"))
        (job,) = q.reserve("w1")
        q.bury(job, reason="card declined", error=f"Declined: card {i}")
        app.clock.advance(1000)  # dead one after the other
    return ids


def audited(app: Antre, action: str) -> list[tuple[str, str, str, str]]:
    return sorted((e.user, e.outcome, e.target, e.reason or "")
                  for e in app.audit.list(action=action))


def test_replay_of_many_ids_runs_the_entry_for_each_audited_per_job(env, capsys):
    a, b = dead(env, ["charge", "charge"])
    assert main(["dlq", "--queue", "billing", "replay", a, "nope", b, a,
                 "--reason", "card fixed"]) == 1  # one of them is not dead
    out, err = capsys.readouterr()
    assert "replay: 2 of 3 jobs" in out  # the repeated id counts once
    assert "job nope is not in the dead-letter queue of billing" in err
    q = env.queue("billing")
    assert q.where(a) == ["ready"] and q.where(b) == ["ready"]
    assert audited(env, "dlq.replay") == sorted([
        (ACTOR, "ok", f"billing/{a}", "card fixed"), (ACTOR, "ok", f"billing/{b}", "card fixed"),
        (ACTOR, "refused", "billing/nope", "card fixed")])


def test_discard_all_takes_the_filter_and_the_limit(env, capsys):
    first, second, other = dead(env, ["charge", "charge", "refund"])
    assert main(["dlq", "--queue", "billing", "discard", "--all", "--type", "charge",
                 "--limit", "1"]) == 0
    assert "discard: 1 of 1 jobs" in capsys.readouterr().out
    q = env.queue("billing")
    assert q.get(first) is None  # the oldest matching one
    assert q.where(second) == ["dead"] and q.where(other) == ["dead"]
    assert audited(env, "dlq.discard") == [(ACTOR, "ok", f"billing/{first}", "")]


def test_no_ids_and_no_all_is_refused_saying_what_to_pass(env, capsys):
    (job_id,) = dead(env, ["charge"])
    assert main(["dlq", "--queue", "billing", "replay"]) == 1
    assert "name job ids, or --all" in capsys.readouterr().err
    assert env.audit.list(action="dlq.replay") == []
    assert env.queue("billing").where(job_id) == ["dead"]
