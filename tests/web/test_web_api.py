"""The JSON API: reads, actions, Basic auth, roles, CSRF and the OpenAPI document."""

from __future__ import annotations

import re

from webtools import basic, csrf_of


from antre.observe.registry import WorkerInfo

READS = ["/api/overview", "/api/queues", "/api/queues/default/inflight",
         "/api/queues/default/scheduled", "/api/queues/default/dead?type=email&window=1h",
         "/api/queues/default/dead/count", "/api/queues/default/dead/groups",
         "/api/queues/default/replays", "/api/locks", "/api/workers", "/api/audit",
         "/api/openapi.json"]


def test_reads_with_basic_auth(web):
    dead = web.dead_job()
    web.svc.registry.beat(WorkerInfo(id="w9", host="h"))
    for url in READS:
        resp = web.app.test_client().get(url, headers=basic("viewer"))
        assert resp.status_code == 200, url
        assert resp.is_json, url
    c = web.app.test_client()
    page = c.get("/api/queues/default/dead", headers=basic("viewer")).get_json()
    assert page["total"] == 1 and page["rows"][0]["id"] == dead
    job = c.get(f"/api/queues/default/jobs/{dead}", headers=basic("viewer")).get_json()
    assert job["job"]["errors"][0]["error"] == "smtp down" and job["idempotency"] is None
    assert c.get("/api/queues/default/dead/count?type=email",
                 headers=basic("viewer")).get_json()["count"] == 1
    workers = c.get("/api/workers", headers=basic("viewer")).get_json()["workers"]
    assert workers[0]["id"] == "w9" and workers[0]["alive"] is True
    assert c.get("/api/users", headers=basic("viewer")).status_code == 403
    assert c.get("/api/users", headers=basic("admin")).status_code == 200
    assert c.get("/api/idempotency?key=zz", headers=basic("viewer")).status_code == 404
    assert c.get("/api/queues/default/jobs/nope", headers=basic("viewer")).status_code == 404


def test_wrong_basic_credentials(web):
    c = web.app.test_client()
    resp = c.get("/api/overview", headers=basic("viewer", "wrong"))
    assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Basic")
    for _ in range(5):
        c.get("/api/overview", headers=basic("viewer", "wrong"))
    assert c.get("/api/overview", headers=basic("viewer")).status_code == 429


def test_actions_with_basic_auth_need_no_csrf(web):
    a, b = web.dead_job(), web.dead_job()
    c = web.app.test_client()
    op = basic("operator")
    resp = c.post(f"/api/queues/default/jobs/{a}/replay", json={"reason": "api"}, headers=op)
    assert resp.status_code == 200 and resp.get_json()["ok"] is True
    assert resp.get_json()["dead_after"] == 1
    resp = c.post(f"/api/queues/default/jobs/{a}/replay", json={}, headers=op)
    assert resp.status_code == 409 and resp.get_json()["ok"] is False
    assert c.post(f"/api/queues/default/jobs/{b}/discard", json={}, headers=op).status_code == 200
    resp = c.post(f"/api/queues/default/jobs/{b}/discard", json={}, headers=basic("viewer"))
    assert resp.status_code == 403 and "may not do this" in resp.get_json()["error"]
    entry = web.audit("dlq.discard")[0]
    assert (entry.user, entry.outcome) == ("viewer", "refused")


def test_extend_run_now_release_via_api(web):
    web.q.enqueue("email", {}, idempotency_key="k1")
    (job,) = web.q.reserve("w1")
    c = web.app.test_client()
    op = basic("operator")
    url = f"/api/queues/default/jobs/{job.id}/extend"
    resp = c.post(url, json={"epoch": job.epoch, "seconds": 10}, headers=op)
    assert resp.status_code == 200 and resp.get_json()["deadline_after"] == job.deadline + 10_000
    resp = c.post(url, json={"epoch": 99, "seconds": 10}, headers=op)
    assert resp.status_code == 409 and "lease changed under you" in resp.get_json()["message"]
    assert c.post(url, json={"seconds": 10}, headers=op).status_code == 400
    web.q.retry(job, delay_ms=60_000, error="later")
    resp = c.post(f"/api/queues/default/jobs/{job.id}/run-now", json={}, headers=op)
    assert resp.status_code == 200 and web.q.where(job.id) == ["ready"]
    lock = web.producer.locks.acquire("acct:1", 30_000)
    resp = c.post("/api/locks/release", json={"key": "acct:1", "token": "other"}, headers=op)
    assert resp.status_code == 409
    resp = c.post("/api/locks/release", json={"key": "acct:1", "token": lock.token}, headers=op)
    assert resp.status_code == 200 and web.svc.locks.held() == []


def test_bulk_via_api(web):
    for _ in range(4):
        web.dead_job(job_type="sms")
    c = web.app.test_client()
    op = basic("operator")
    resp = c.post("/api/queues/default/replays", json={"type": "sms", "rate": 1, "maximum": 3},
                  headers=op)
    task = resp.get_json()["task"]
    assert resp.status_code == 200 and task["total"] == 4
    web.clock.advance(1000)
    web.svc.bulk.step_all()
    got = c.get(f"/api/queues/default/replays/{task['id']}", headers=op).get_json()
    assert got["replayed"] == 1
    for op_name, state in (("pause", "paused"), ("resume", "running"), ("cancel", "cancelled")):
        resp = c.post(f"/api/queues/default/replays/{task['id']}/{op_name}", json={}, headers=op)
        assert resp.get_json()["task"]["state"] == state
    assert c.post("/api/queues/default/replays", json={"rate": 0, "maximum": 3},
                  headers=op).status_code == 400
    resp = c.post("/api/queues/default/dead/replay-now", json={"maximum": 1}, headers=op)
    assert resp.get_json()["done"] == 1
    resp = c.post("/api/queues/default/dead/discard", json={"confirm": "9"}, headers=op)
    assert resp.status_code == 400 and resp.get_json()["dry_run"] == 2
    resp = c.post("/api/queues/default/dead/discard", json={"confirm": "2"}, headers=op)
    assert resp.get_json()["done"] == 2


def test_users_via_api(web):
    c = web.app.test_client()
    ad = basic("admin")
    assert c.post("/api/users", json={"name": "eve", "role": "viewer", "password": "eve-password-1"},
                  headers=ad).status_code == 200
    assert c.post("/api/users", json={"name": "eve", "role": "viewer", "password": "eve-password-1"},
                  headers=ad).status_code == 400
    assert c.post("/api/users/eve/role", json={"role": "admin"}, headers=ad).status_code == 200
    assert c.post("/api/users/eve/delete", json={}, headers=ad).status_code == 200
    assert c.post("/api/users", json={"name": "x", "role": "viewer", "password": "p"},
                  headers=basic("operator")).status_code == 403


def test_session_api_needs_csrf_header(web):
    from webtools import login
    dead = web.dead_job()
    c = web.app.test_client()
    login(c, "operator")
    assert c.get("/api/overview").status_code == 200
    assert c.post(f"/api/queues/default/jobs/{dead}/replay", json={}).status_code == 400
    resp = c.post(f"/api/queues/default/jobs/{dead}/replay", json={},
                  headers={"X-CSRF-Token": csrf_of(c)})
    assert resp.status_code == 200


def test_openapi_lists_every_api_route(web):
    doc = web.app.test_client().get("/api/openapi.json", headers=basic("viewer")).get_json()
    assert doc["openapi"].startswith("3.")
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    expected = set()
    for rule in web.app.url_map.iter_rules():
        if rule.rule.startswith("/api/") and rule.endpoint != "api.openapi":
            path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
            for m in rule.methods - {"HEAD", "OPTIONS"}:
                expected.add((path, m))
    assert documented == expected
    extend = doc["paths"]["/api/queues/{queue}/jobs/{job_id}/extend"]["post"]
    assert extend["requestBody"]["content"]["application/json"]["schema"]["required"] == [
        "epoch", "seconds"]
    assert "operator" in extend["description"]
    assert all(op["summary"] for ops in doc["paths"].values() for op in ops.values())
