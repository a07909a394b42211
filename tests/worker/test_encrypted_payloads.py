"""Encrypted payloads end to end on a real Redis: sealed at enqueue, opened by the worker,
buried with the reason when they cannot be opened."""

from __future__ import annotations

import base64
import json
import os

import pytest
from helpers import burst

from antre import Antre
from antre.engine import keys
from antre.engine.cipher import PayloadCipher, is_sealed


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


V1, V2 = _key(), _key()


def _stored(app: Antre, queue: str, job_id: str) -> str:
    return str(app.redis.hget(keys.QueueKeys(queue).job(job_id), "payload"))


def test_a_sealed_handler_gets_its_payload_and_redis_never_holds_it(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}")
    seen = []

    @app.handler("charge", encrypt=True)
    def charge(ctx, payload):
        seen.append(payload)

    job_id = app.enqueue("charge", {"card": "4111-secret"}, idempotency_key="c:1")
    ids = app.enqueue_many([app.spec("charge", {"card": f"n{i}"}, idempotency_key=f"m:{i}")
                            for i in range(3)])
    stored = _stored(app, "default", job_id)
    assert "4111" not in stored and is_sealed(json.loads(stored))
    assert all(is_sealed(json.loads(_stored(app, "default", i))) for i in ids)
    burst(app, clock)
    assert seen == [{"card": "4111-secret"}, {"card": "n0"}, {"card": "n1"}, {"card": "n2"}]
    assert app.queue().get(job_id).state == "done"


def test_other_types_and_queues_stay_plain(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}", encrypt=["secret"])
    plain = app.enqueue("t", {"a": 1}, idempotency_key="p:1")
    sealed = app.enqueue("t", {"a": 1}, idempotency_key="s:1", queue="secret")
    assert json.loads(_stored(app, "default", plain)) == {"a": 1}
    assert is_sealed(json.loads(_stored(app, "secret", sealed)))


def test_old_versions_open_and_new_writes_use_the_newest(redis_url, clock):
    old = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}", encrypt=True)
    before = old.enqueue("t", {"n": 1}, idempotency_key="o:1")
    app = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v2:{V2},v1:{V1}", encrypt=True)
    after = app.enqueue("t", {"n": 2}, idempotency_key="o:2")
    assert json.loads(_stored(app, "default", before))["$enc"].startswith("v1:")
    assert json.loads(_stored(app, "default", after))["$enc"].startswith("v2:")
    seen = []
    app.handler("t")(lambda ctx, payload: seen.append(payload["n"]))
    burst(app, clock)
    assert sorted(seen) == [1, 2]


def test_a_ciphertext_moved_to_another_job_is_buried_not_run(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}", encrypt=True)
    ran = []
    app.handler("t")(lambda ctx, payload: ran.append(payload))
    a = app.enqueue("t", {"who": "alice"}, idempotency_key="a")
    b = app.enqueue("t", {"who": "bob"}, idempotency_key="b")
    app.redis.hset(keys.QueueKeys("default").job(b), "payload", _stored(app, "default", a))
    app.redis.hset(keys.QueueKeys("default").job(a), "payload", "x")  # (a: not run either)
    burst(app, clock)
    job = app.queue().get(b)
    assert ran == [] and job.state == "dead"
    assert "moved from another job" in job.reason


def test_a_missing_key_or_an_unknown_version_buries_with_the_reason(redis_url, clock):
    producer = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v2:{V2}", encrypt=True)
    job_id = producer.enqueue("t", {}, idempotency_key="k")
    keyless = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}")
    keyless.handler("t")(lambda ctx, payload: None)
    burst(keyless, clock)
    job = keyless.queue().get(job_id)
    assert job.state == "dead" and job.attempt == 0
    assert "key version 'v2'" in job.reason and "ANTRE_PAYLOAD_KEYS" in job.reason


def test_a_worker_without_any_key_buries(redis_url, clock, monkeypatch):
    monkeypatch.delenv("ANTRE_PAYLOAD_KEYS", raising=False)
    producer = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}", encrypt=True)
    job_id = producer.enqueue("t", {}, idempotency_key="k")
    worker = Antre(redis_url=redis_url, clock=clock)
    worker.handler("t")(lambda ctx, payload: None)
    burst(worker, clock)
    assert "this worker has no key" in worker.queue().get(job_id).reason


def test_sealing_without_a_key_is_refused_saying_what_to_set(redis_url, clock, monkeypatch):
    monkeypatch.delenv("ANTRE_PAYLOAD_KEYS", raising=False)
    app = Antre(redis_url=redis_url, clock=clock, encrypt=True)
    with pytest.raises(ValueError, match="ANTRE_PAYLOAD_KEYS="):
        app.enqueue("t", {}, idempotency_key="k")


def test_the_dead_copy_stays_sealed_and_a_replay_opens_once_the_key_is_back(redis_url, clock):
    producer = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v2:{V2}", encrypt=True)
    job_id = producer.enqueue("t", {"n": 7}, idempotency_key="k")
    lacking = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v1:{V1}")
    lacking.handler("t")(lambda ctx, payload: None)
    burst(lacking, clock)
    assert producer.queue().where(job_id) == ["dead"]
    assert is_sealed(json.loads(_stored(producer, "default", job_id)))
    assert producer.queue().replay(job_id)
    fixed = Antre(redis_url=redis_url, clock=clock, payload_keys=f"v2:{V2},v1:{V1}")
    seen = []
    fixed.handler("t")(lambda ctx, payload: seen.append(payload))
    burst(fixed, clock)
    assert seen == [{"n": 7}] and fixed.queue().get(job_id).state == "done"
