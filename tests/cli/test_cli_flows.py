"""``antre flow``: list a queue's flows by state, show one as a text tree or JSON, replay a
flow's dead jobs (the table's entry, audited as ``cli:NAME``), against a real Redis and
SQLite."""

from __future__ import annotations

import getpass
import json

import pytest

from antre import Antre, Permanent
from antre_cli.main import main
from helpers import burst

ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url, clock):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    failing: set[str] = set()
    for name in ("ledger", "email", "close_order"):
        def run(ctx, payload, name=name):
            if name in failing:
                raise Permanent(f"{name} is down")
            return name
        app.handler(name)(run)
    return app, failing


def chord(app, order):
    kids = [app.spec(t, {"o": order}, idempotency_key=f"{t}:{order}") for t in ("ledger", "email")]
    return app.chord(kids, app.spec("close_order", {"o": order}, idempotency_key=f"c:{order}")
                     ).enqueue(description=f"invoice {order}")


def test_list_and_show_a_flow_as_text_and_json(env, clock, capsys):
    app, failing = env
    failing.add("email")
    flow = chord(app, "A")
    burst(app, clock)
    waiting = chord(app, "B")
    assert main(["flow", "list", "--state", "failed"]) == 0
    out = capsys.readouterr().out
    assert "1 running" in out and "1 failed" in out and flow.id in out and "email is down" in out
    assert waiting.id not in out
    assert main(["flow", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed["rows"]] == [waiting.id] and listed["counts"]["failed"] == 1
    assert main(["flow", "show", flow.id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "failed" in lines[0] and "1 done, 1 failed" in lines[0]
    tree = [ln for ln in lines if "- " in ln]
    assert tree[0].startswith("  - ledger [done]") and "email [dead]" in tree[1]
    assert tree[2].startswith("    - close_order [held]")  # one step deeper: the callback
    assert main(["flow", "show", flow.id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {j["type"]: j["depth"] for j in shown["jobs"]} == {"ledger": 0, "email": 0,
                                                             "close_order": 1}
    assert main(["flow", "show", "nope"]) == 1
    assert "no flow nope" in capsys.readouterr().err


def test_replay_failed_from_the_cli_is_audited_and_the_flow_goes_on(env, clock, capsys):
    app, failing = env
    failing.add("email")
    flow = chord(app, "C")
    burst(app, clock)
    failing.clear()
    assert main(["flow", "replay-failed", "default", flow.id, "--reason", "smtp back"]) == 0
    assert "1 dead job(s)" in capsys.readouterr().out
    (entry,) = app.audit.list(action="flow.replay_failed")
    assert entry.user == ACTOR and entry.reason == "smtp back" and entry.outcome == "ok"
    burst(app, clock)
    assert flow.status().state == "succeeded"
    assert main(["flow", "replay-failed", "default", flow.id]) == 1
    assert "no dead job" in capsys.readouterr().err
