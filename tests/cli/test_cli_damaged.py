"""``antre flow`` and ``antre group`` with a damaged record (not of its Redis type): the
listing goes on and marks it, ``show`` says what is wrong instead of a traceback."""

from __future__ import annotations

import json

import pytest

from antre import Antre
from antre.engine import keys
from antre_cli.main import main


@pytest.fixture
def app(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    return Antre(redis_url=redis_url, database_url=sqlite_url)


def test_flow_list_and_show_with_a_damaged_flow(app, capsys):
    good = app.chain(app.spec("t", {}, idempotency_key="a1"),
                     app.spec("t", {}, idempotency_key="b1")).enqueue()
    bad = app.chain(app.spec("t", {}, idempotency_key="a2"),
                    app.spec("t", {}, idempotency_key="b2")).enqueue()
    key = keys.QueueKeys("default").flow(bad.id)
    app.redis.delete(key)
    app.redis.set(key, "garbage")
    assert main(["flow", "list", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows[bad.id]["damaged"] == "not a hash" and rows[good.id]["damaged"] == ""
    code = main(["flow", "show", bad.id])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    assert "cannot be read: not a hash" in out.out + out.err
    assert code in (0, 1)
    assert main(["flow", "show", good.id]) == 0


def test_group_list_and_show_with_a_damaged_group(app, capsys):
    for g in ("g1", "g2"):
        for i in range(2):
            app.enqueue("t", {}, idempotency_key=f"{g}-{i}", group=g, group_concurrency=1)
    key = keys.QueueKeys("default").group_line("g2")
    app.redis.delete(key)
    app.redis.set(key, "garbage")
    assert main(["group", "list", "default", "--json"]) == 0
    assert "g1" in capsys.readouterr().out
    assert main(["group", "show", "default", "g2"]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "g2" in out.out
