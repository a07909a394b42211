"""Security, second round (issue 24, items 10-15), against the real stack: the Flask test
client on a real Redis and SQLite."""

from __future__ import annotations

import json
import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from argon2 import PasswordHasher
from webtools import PASSWORD, TEST_SECRET_KEY, basic, csrf_of, htmx, login, post

from antre.embedded import free_port
from antre_web import create_app

SECRET = "hunter22-redis"


def _app(redis_url, sqlite_url, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    svc.users.add("operator", "operator", PASSWORD)
    return app


# -- item 10: one redaction for every URL shown ---------------------------------------------------
def test_outage_banner_log_and_audit_never_show_a_query_password(sqlite_url, caplog):
    url = f"redis://127.0.0.1:{free_port()}/0?password={SECRET}"
    app = _app(url, sqlite_url)
    c = app.test_client()
    assert login(c, "operator").status_code == 302
    with caplog.at_level(logging.WARNING, logger="antre"):
        page = c.get("/").get_data(as_text=True)
        post(c, "/dlq/default/j1/replay", {"reason": "r"})
    assert "is unreachable since" in page and "password=***" in page
    assert SECRET not in page
    assert SECRET not in caplog.text
    entry = app.extensions["antre"].audit.list(action="dlq.replay")[0]
    assert SECRET not in json.dumps(entry.detail)


# -- item 12: current-password checks are throttled; Basic successes are cached ----------------
class CountingHasher(PasswordHasher):
    """A real argon2 hasher (cheap parameters) that counts the hashes it verifies."""

    def __init__(self, **kw):
        super().__init__(**{"time_cost": 1, "memory_cost": 1024, "parallelism": 1, **kw})
        self.verified = 0
        self._lock = threading.Lock()

    def verify(self, hash, password):  # noqa: A002 - argon2's own parameter name
        with self._lock:
            self.verified += 1
        return super().verify(hash, password)


def _counting(web, **kw):
    hasher = CountingHasher(**kw)
    for role in ("viewer", "operator", "admin"):
        web.svc.users.set_password(role, PASSWORD)  # hashed like the fixture's, verifiable
    web.svc.users.hasher = hasher
    return hasher


def test_wrong_current_passwords_are_throttled_then_even_the_right_one_waits(web):
    c = web.app.test_client()
    statuses = [c.post("/api/account/password", headers=basic("viewer"),
                       json={"current_password": f"guess-{i}", "new_password": "n3w-password-xyz"}
                       ).status_code for i in range(8)]
    assert statuses[:5] == [403] * 5 and statuses[5:] == [429] * 3
    resp = c.post("/api/account/password", headers=basic("viewer"),
                  json={"current_password": PASSWORD, "new_password": "n3w-password-xyz"})
    assert resp.status_code == 429 and "try again in" in resp.get_json()["message"]
    assert web.svc.users.verify("viewer", PASSWORD) is not None  # unchanged


def test_the_account_page_throttles_the_current_password_too(web):
    c = web.client("viewer")
    for i in range(6):
        resp = post(c, "/account/password", {"current_password": f"guess-{i}",
                                              "new_password": "n3w-password-xyz",
                                              "confirm_password": "n3w-password-xyz"})
    page = c.get(resp.headers["Location"]).get_data(as_text=True)
    assert "too many failed attempts" in page


def test_a_basic_success_is_hashed_once_until_the_session_generation_moves(web):
    hasher = _counting(web)
    c = web.app.test_client()
    for _ in range(5):
        assert c.get("/api/overview", headers=basic("viewer")).status_code == 200
    assert hasher.verified == 1
    web.svc.users.end_sessions("viewer")  # log out everywhere: the cached check is void
    assert c.get("/api/overview", headers=basic("viewer")).status_code == 200
    assert hasher.verified == 2
    web.svc.users.set_password("viewer", "a-changed-password-1")
    assert c.get("/api/overview", headers=basic("viewer")).status_code == 401
    assert c.get("/api/overview", headers=basic("viewer", "a-changed-password-1")
                 ).status_code == 200
    web.svc.users.set_disabled("viewer")
    assert c.get("/api/overview", headers=basic("viewer", "a-changed-password-1")
                 ).status_code == 401


def test_a_wrong_basic_password_is_never_cached(web):
    hasher = _counting(web)
    c = web.app.test_client()
    assert c.get("/api/overview", headers=basic("viewer")).status_code == 200
    for i in range(3):
        assert c.get("/api/overview", headers=basic("viewer", f"wrong-{i}")).status_code == 401
    assert hasher.verified == 4


# -- item 13: the login limit holds under parallel tries ---------------------------------------
@pytest.mark.parametrize("how", ["basic", "form"])
def test_parallel_wrong_logins_hash_at_most_the_limit(web, how):
    hasher = _counting(web, time_cost=2, memory_cost=8192)
    clients = [web.app.test_client() for _ in range(40)]
    tokens = []
    for c in clients:
        page = c.get("/login").get_data(as_text=True)
        tokens.append(re.search(r'name="csrf-token" content="([^"]+)"', page).group(1))
    start = threading.Barrier(len(clients))

    def one(i):
        start.wait()
        if how == "basic":
            return clients[i].get("/api/overview", headers=basic("viewer", f"bad-{i}")).status_code
        return clients[i].post("/login", data={"username": "viewer", "password": f"bad-{i}",
                                               "csrf_token": tokens[i]}).status_code
    with ThreadPoolExecutor(len(clients)) as pool:
        statuses = list(pool.map(one, range(len(clients))))
    assert hasher.verified <= 5
    assert statuses.count(429) >= len(clients) - 5


# -- item 14: bad arguments are 400s with a message, never 500s --------------------------------
def _is_400(resp, *words):
    body = resp.get_data(as_text=True)
    assert resp.status_code == 400, (resp.status_code, body[:300])
    assert all(w in body for w in words), body[:300]


@pytest.mark.parametrize("url, words", [
    ("/find/more?q=to%3Da&cursor=default|ready|0&n=%C2%B2", ["n must be a whole number"]),
    ("/find/more?q=to%3Da&cursor=default|ready|%C2%B2", ["bad search cursor"]),
    ("/find/more?q=to%3Da&cursor=default|ready|" + "9" * 30, ["bad search cursor"]),
    ("/api/find?field=to%3Da&cursor=default|ready|%D9%A3%C2%B2", ["bad search cursor"]),
])
def test_unicode_digits_and_huge_cursors_are_400s(web, url, words):
    web.q.enqueue("email", {"to": "a", "items": [1]}, idempotency_key="k")
    resp = web.client("viewer").get(url)
    _is_400(resp, *words)


def test_an_in_flight_selection_with_unicode_digits_is_a_400(web):
    c = web.client("operator")
    resp = post(c, "/inflight/default/selected", {"ids": ["²:job1"], "action": "extend",
                                                  "seconds": "60", "reason": "r"})
    _is_400(resp, "bad row")


@pytest.mark.parametrize("extra", ["endpoint=x", "_anchor=x%22%3E", "_scheme=javascript",
                                   "_external=1"])
def test_query_arguments_are_never_url_for_arguments(web, extra):
    web.producer.queue("other").enqueue("email", {}, idempotency_key="k2")
    web.dead_job()  # default is the busiest: the page redirects to name it
    resp = web.client("viewer").get(f"/dlq/?{extra}")
    assert resp.status_code == 302
    location = resp.headers["Location"]
    assert location.startswith("/dlq/?") and "queue=default" in location
    assert "javascript" not in location.split("?")[0] and "#" not in location


def test_a_json_body_nested_100k_deep_is_a_400(web):
    body = "[" * 100_000 + "]" * 100_000
    resp = web.app.test_client().post("/api/queues/default/pause", data=body,
                                      headers={**basic("operator"),
                                               "Content-Type": "application/json"})
    _is_400(resp, "nested too deeply")
