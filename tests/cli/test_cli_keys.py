"""``antre keys rotate``: a queue's stored jobs re-sealed under the newest key version
(ready, scheduled and dead), audited; against a real Redis and SQLite."""

from __future__ import annotations

import base64
import json
import os

from antre import Antre
from antre.engine import keys
from antre_cli.main import main

V1, V2 = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))


def _version(app: Antre, job_id: str) -> str:
    raw = app.redis.hget(keys.QueueKeys("billing").job(job_id), "payload")
    return str(json.loads(raw)["$enc"]).partition(":")[0]


def test_rotate_reseals_ready_scheduled_and_dead_jobs_and_is_audited(
        monkeypatch, redis_url, sqlite_url, capsys):
    old = Antre(redis_url=redis_url, payload_keys=f"v1:{V1}", encrypt=True)
    q = old.queue("billing")
    q.enqueue("charge", {"n": 3}, idempotency_key="d")
    (job,) = q.reserve("w1")
    q.bury(job, reason="card declined")
    ready = q.enqueue("charge", {"n": 1}, idempotency_key="r")
    later = q.enqueue("charge", {"n": 2}, idempotency_key="s", delay_s=3600)
    assert [q.where(i) for i in (ready, later, job.id)] == [["ready"], ["scheduled"], ["dead"]]
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("ANTRE_PAYLOAD_KEYS", f"v2:{V2},v1:{V1}")
    assert main(["keys", "rotate", "billing", "--reason", "yearly"]) == 0
    assert "3 re-sealed, 0 already" in capsys.readouterr().out
    assert {_version(old, i) for i in (ready, later, job.id)} == {"v2"}
    assert main(["keys", "rotate", "billing"]) == 0
    assert "0 re-sealed, 3 already" in capsys.readouterr().out
    monkeypatch.setenv("ANTRE_PAYLOAD_KEYS", f"v2:{V2}")  # v1 dropped: every job still opens
    new = Antre(redis_url=redis_url, database_url=sqlite_url)
    assert new.cipher is not None
    opened = [json.loads(new.cipher.open(new.queue("billing").get(i).payload, "billing",
                                         "charge", i)) for i in (ready, later, job.id)]
    assert sorted(p["n"] for p in opened) == [1, 2, 3]
    audit = [(e.action, e.target, e.reason, e.outcome) for e in new.audit.list()]
    assert ("keys.rotate", "billing", "yearly", "ok") in audit


def test_rotate_without_a_ring_is_refused_saying_what_to_set(
        monkeypatch, redis_url, sqlite_url, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ANTRE_PAYLOAD_KEYS", raising=False)
    assert main(["keys", "rotate", "billing"]) == 1
    assert "set ANTRE_PAYLOAD_KEYS" in capsys.readouterr().err
