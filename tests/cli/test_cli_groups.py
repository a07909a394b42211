"""``antre group``: list, show, pause / resume one group, override its slots (and end the
override), against a real Redis and SQLite, audited with the OS user; bad input refused on
stderr, changing nothing."""

from __future__ import annotations

import getpass
import json

import pytest
from helpers import reserve_all

from antre import Antre
from antre.engine.queue import JobSpec
from antre_cli.main import main

ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    return Antre(redis_url=redis_url, database_url=sqlite_url)


def fill(app, group, n):
    return app.queue("billing").enqueue_many(
        [JobSpec("charge", {"i": i}, f"{group}:{i}", group=group, group_concurrency=1)
         for i in range(n)])


def test_list_show_slots_pause_resume_are_audited(env, capsys):
    ids = fill(env, "tenant:7", 3)
    q = env.queue("billing")
    assert main(["group", "list", "billing", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["by_waiting"][0]["name"] == "tenant:7" and view["jobs_waiting"] == 2
    assert main(["group", "slots", "billing", "tenant:7", "--slots", "3", "--reason",
                 "catch up", "--revert-after-s", "600"]) == 0
    assert [q.get(i).state for i in ids] == ["ready"] * 3
    assert main(["group", "pause", "billing", "tenant:7", "--reason", "bad data"]) == 0
    assert q.reserve("w", 5) == []
    assert main(["group", "show", "billing", "tenant:7"]) == 0
    assert "paused" in capsys.readouterr().out
    assert main(["group", "resume", "billing", "tenant:7", "--reason", "fixed"]) == 0
    assert len(reserve_all(q, 5)) == 3
    assert main(["group", "clear", "billing", "tenant:7", "--reason", "done"]) == 0
    actions = [(e.action, e.user, e.outcome) for e in env.audit.list()]
    for action in ("group.slots", "group.pause", "group.resume"):
        assert (action, ACTOR, "ok") in actions


@pytest.mark.parametrize("argv, message", [
    (["group", "slots", "billing", "tenant:7", "--slots", "-1", "--reason", "x"], "bad slots"),
    (["group", "pause", "billing", "bad name", "--reason", "x"], "bad group"),
    (["group", "resume", "billing", "tenant:7"], "not paused"),
    (["group", "slots", "billing", "tenant:7", "--slots", "2", "--reason", "  "],
     "reason is required"),
])
def test_bad_group_input_is_refused(env, capsys, argv, message):
    fill(env, "tenant:7", 2)
    assert main(argv) != 0
    assert message in capsys.readouterr().err
    assert env.redis.hlen(env.queue("billing").keys.group_limits) == 0


def test_show_says_the_groups_rate(env, capsys):
    env.queue("billing").enqueue_many(
        [JobSpec("charge", {"i": i}, f"r:{i}", group="tenant:9", group_rate="1/h")
         for i in range(3)])
    assert main(["group", "show", "billing", "tenant:9"]) == 0
    out = capsys.readouterr().out
    assert "rate 1/h (1 scheduled for a start)" in out
    assert "at its rate 1/h: its next job is scheduled for its start, 1 more wait in line" in out


def test_limit_overrides_a_groups_rate_audited_and_refuses_a_bad_one(env, capsys):
    q = env.queue("billing")
    ids = q.enqueue_many([JobSpec("charge", {"i": i}, f"r:{i}", group="tenant:9",
                                  group_rate="1/h") for i in range(3)])
    assert main(["group", "limit", "billing", "tenant:9", "--rate", "10/s", "--reason",
                 "month end", "--revert-after-s", "3600"]) == 0
    assert "rate 10/s" in capsys.readouterr().out
    assert [q.get(i).state for i in ids] == ["ready"] * 3
    assert main(["group", "show", "billing", "tenant:9", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["rate"] == "10/s" and shown["override"]["reason"] == "month end"
    assert main(["group", "limit", "billing", "tenant:9", "--rate", "ten", "--reason",
                 "x"]) != 0
    assert "bad rate 'ten'" in capsys.readouterr().err
    assert main(["group", "limit", "billing", "tenant:9", "--reason", "x"]) != 0
    assert "pass slots" in capsys.readouterr().err
    actions = [(e.action, e.user, e.outcome, e.reason) for e in env.audit.list()]
    assert ("group.limit", ACTOR, "ok", "month end") in actions
