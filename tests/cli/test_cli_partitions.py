"""The ``antre`` command on a queue of 3 partitions: list, show, find and replay a
job of any partition by its id alone; status counts the whole queue."""

from __future__ import annotations

import json

import pytest

from antre import Antre
from antre.engine import keys
from antre_cli.main import main


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    return Antre(redis_url=redis_url, database_url=sqlite_url, partitions=3)


def test_the_cli_reads_and_acts_on_every_partition(env, capsys):
    ids = []
    for i in range(3):
        job_id = env.enqueue("charge", {"i": i}, idempotency_key=f"c{i}", queue="billing")
        q = env.job_queue("billing", job_id)
        (job,) = q.reserve("w1")
        q.bury(job, reason="card declined", error=f"Declined: card {i}")
        ids.append(job_id)
    assert sorted(keys.id_partition(i) for i in ids) == [0, 1, 2]
    far = next(i for i in ids if keys.id_partition(i) == 2)
    assert main(["dlq", "--queue", "billing", "list", "--json"]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == set(ids)
    assert main(["dlq", "--queue", "billing", "show", far]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "card declined"
    assert main(["find", far]) == 0
    assert far in capsys.readouterr().out
    assert main(["dlq", "--queue", "billing", "replay", far, "--reason", "card fixed"]) == 0
    capsys.readouterr()  # the replay's line
    assert env.job_queue("billing", far).where(far) == ["ready"]
    assert main(["status", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "billing" in json.dumps(out) and '"dead": 2' in json.dumps(out)
