"""Encrypted payloads on the dashboard and its API: '[encrypted]' for a viewer or operator,
the payload opened for an admin; the dead-letter copy stays sealed in Redis."""

from __future__ import annotations

import base64
import json
import os

import antre
from antre.engine import keys
from antre.engine.cipher import is_sealed

RING = "v1:" + base64.b64encode(os.urandom(32)).decode()


def _sealed_job(web, monkeypatch) -> str:
    monkeypatch.setenv("ANTRE_PAYLOAD_KEYS", RING)  # the dashboard's own ring
    producer = antre.Antre(redis_url=web.producer.redis_url, clock=web.clock,
                           payload_keys=RING, encrypt=True)
    return producer.enqueue("charge", {"card": "4111-secret"}, idempotency_key="c:1")


def test_a_viewer_sees_encrypted_and_an_admin_the_payload(web, monkeypatch):
    job_id = _sealed_job(web, monkeypatch)
    stored = web.producer.redis.hget(keys.QueueKeys("default").job(job_id), "payload")
    assert is_sealed(json.loads(stored))
    for role in ("viewer", "operator"):
        client = web.client(role)
        page = client.get(f"/jobs/default/{job_id}").get_data(as_text=True)
        api = client.get(f"/api/queues/default/jobs/{job_id}").get_json()
        assert "[encrypted]" in page and "4111" not in page, role
        assert api["job"]["payload"] == "[encrypted]", role
    admin = web.client("admin")
    assert "4111-secret" in admin.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    api = admin.get(f"/api/queues/default/jobs/{job_id}").get_json()
    assert api["job"]["payload"] == {"card": "4111-secret"}
