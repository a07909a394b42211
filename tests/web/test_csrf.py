"""Cross-site writes are refused: the JSON API takes only JSON bodies, a write from another
site (``Origin``, ``Sec-Fetch-Site``) is refused with HTTP Basic and with a session alike while a
same-origin one passes, and browsers are never invited to cache Basic credentials. The same
attack is driven in Chromium in tests/browser/test_csrf_browser.py."""

from __future__ import annotations

import json

import pytest
from webtools import basic, csrf_of


def test_api_writes_take_only_json(web):
    c = web.app.test_client()
    resp = c.post("/api/users", data={"name": "mallory", "role": "admin",
                                      "password": "mallory-password-1"}, headers=basic("admin"))
    assert resp.status_code == 415 and "application/json" in resp.get_json()["error"]
    resp = c.post("/api/users", data=json.dumps({"name": "mallory", "role": "admin",
                                                 "password": "mallory-password-1"}),
                  headers={**basic("admin"), "Content-Type": "text/plain"})
    assert resp.status_code == 415
    assert web.svc.users.get("mallory") is None
    resp = c.post("/api/users", json={"name": "mallory", "role": "viewer",
                                      "password": "mallory-password-1"}, headers=basic("admin"))
    assert resp.status_code == 200


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
])
def test_cross_site_writes_are_refused_with_basic_and_session(web, headers):
    dead = web.dead_job()
    c = web.app.test_client()
    resp = c.post("/api/users", json={"name": "mallory", "role": "admin",
                                      "password": "mallory-password-1"},
                  headers={**basic("admin"), **headers})
    assert resp.status_code == 403 and "another site" in resp.get_json()["error"]
    op = web.client("operator")
    resp = op.post(f"/dlq/default/{dead}/replay", data={"csrf_token": csrf_of(op)},
                   headers=headers)
    assert resp.status_code == 403
    assert web.svc.users.get("mallory") is None and web.svc.reads.count_dead("default") == 1
    refused = [e for e in web.audit() if e.outcome == "refused" and e.user in ("admin", "operator")]
    assert len(refused) == 2  # the named users' refusals are audited


def test_same_origin_writes_pass(web):
    dead = web.dead_job()
    c = web.app.test_client()
    resp = c.post(f"/api/queues/default/jobs/{dead}/replay", json={},
                  headers={**basic("operator"), "Origin": "http://localhost",
                           "Sec-Fetch-Site": "same-origin"})
    assert resp.status_code == 200


def test_browsers_are_not_invited_to_cache_basic_credentials(web):
    c = web.app.test_client()
    nav = c.get("/api/overview", headers={"Accept": "text/html,application/xhtml+xml",
                                          "Sec-Fetch-Mode": "navigate"})
    assert nav.status_code == 401 and "WWW-Authenticate" not in nav.headers
    page = c.get("/")
    assert page.status_code == 302 and "WWW-Authenticate" not in page.headers
    script = c.get("/api/overview")  # curl, requests: the challenge is there
    assert script.headers["WWW-Authenticate"].startswith("Basic")
