"""Password guessing is throttled, and before any hash is computed: per name (whitespace
variants share the tries), per account across addresses, per address (one address cannot lock an
account for everyone; behind a trusted proxy the client's address counts), for the current
password of a password change, under parallel tries; a Basic success is hashed once until the
user's session generation moves, a wrong one never cached; the in-memory limiter is bounded."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from argon2 import PasswordHasher
from webtools import PASSWORD, TEST_SECRET_KEY, basic, login, post

from antre_web import create_app
from antre_web.security import MEMORY_LIMITER_KEYS, MemoryLimiter


FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def _app(redis_url: str, sqlite_url: str, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    app.extensions["antre"].users.hasher = FAST
    return app


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


# -- per name, account and address --------------------------------------------------------------
def test_whitespace_variants_of_a_name_share_the_tries(web):
    c = web.app.test_client()
    for name in ("viewer", "viewer ", "\tviewer", " viewer", "viewer\t"):
        assert c.get("/api/overview", headers=basic(name, "wrong")).status_code == 401
    assert c.get("/api/overview", headers=basic("viewer")).status_code == 429
    for name in ("operator", " operator ", "operator\n", "\toperator", "operator  "):
        assert login(c, name, "wrong").status_code == 401
    assert login(c, "operator").status_code == 429


def test_a_per_account_cap_holds_across_addresses(web):
    c = web.app.test_client()
    for i in range(20):  # 20 addresses, one failure each
        env = {"REMOTE_ADDR": f"10.0.{i}.1"}
        assert c.get("/api/overview", headers=basic("admin", "wrong"),
                     environ_base=env).status_code == 401
    resp = c.get("/api/overview", headers=basic("admin"), environ_base={"REMOTE_ADDR": "10.9.9.9"})
    assert resp.status_code == 429


def test_one_address_alone_cannot_lock_an_account_for_everyone(web):
    c = web.app.test_client()
    attacker = {"REMOTE_ADDR": "10.6.6.6"}
    statuses = [c.get("/api/overview", headers=basic("admin", "wrong"),
                      environ_base=attacker).status_code for _ in range(40)]
    assert statuses.count(401) == 5  # then 429: the rest were not even tried
    resp = c.get("/api/overview", headers=basic("admin"), environ_base={"REMOTE_ADDR": "10.1.1.1"})
    assert resp.status_code == 200


def test_behind_a_trusted_proxy_the_client_address_counts(redis_url, sqlite_url):
    app = _app(redis_url, sqlite_url, ANTRE_TRUSTED_PROXIES=1)
    app.extensions["antre"].users.add("viewer", "viewer", PASSWORD)
    c = app.test_client()
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for _ in range(5):  # one client behind the proxy fails five times
        c.get("/api/overview", headers={**basic("viewer", "wrong"),
                                        "X-Forwarded-For": "203.0.113.7"}, environ_base=proxy)
    locked = c.get("/api/overview", headers={**basic("viewer"), "X-Forwarded-For": "203.0.113.7"},
                   environ_base=proxy)
    assert locked.status_code == 429
    other = c.get("/api/overview", headers={**basic("viewer"), "X-Forwarded-For": "198.51.100.4"},
                  environ_base=proxy)
    assert other.status_code == 200  # another client through the same proxy is not locked out


def test_without_the_setting_forwarded_headers_are_ignored(web):
    c = web.app.test_client()
    for i in range(5):
        c.get("/api/overview", headers={**basic("viewer", "wrong"),
                                        "X-Forwarded-For": f"203.0.113.{i}"})
    assert c.get("/api/overview", headers={**basic("viewer"),
                                           "X-Forwarded-For": "198.51.100.4"}).status_code == 429


# -- before hashing, in bounded memory ----------------------------------------------------------
def test_new_names_from_one_address_are_throttled_before_hashing(web):
    calls = {"n": 0}
    verify = web.svc.users.verify

    def counting(name, password):
        calls["n"] += 1
        return verify(name, password)

    web.svc.users.verify = counting
    c = web.app.test_client()
    statuses = [c.get("/api/overview", headers=basic(f"spray{i}", "x")).status_code
                for i in range(40)]
    assert statuses.count(429) == 10 and calls["n"] == 30  # 30 hashes, then none


def test_the_in_memory_limiter_is_bounded():
    m = MemoryLimiter(max_keys=100)
    for i in range(1000):
        m.failed(f"addr{i}")
    assert len(m) == 100
    assert MEMORY_LIMITER_KEYS <= 100_000


# -- the current password of a password change -------------------------------------------------
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


# -- Basic successes cached, failures never -----------------------------------------------------
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


# -- parallel tries ----------------------------------------------------------------------------
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


def test_parallel_logins_under_many_names_hash_at_most_the_address_limit(web):
    hasher = _counting(web, time_cost=2, memory_cost=8192)
    start = threading.Barrier(60)

    def one(i):
        start.wait()
        return web.app.test_client().get(
            "/api/overview", headers=basic(f"name{i}", "bad-password")).status_code
    with ThreadPoolExecutor(60) as pool:
        statuses = list(pool.map(one, range(60)))
    assert hasher.verified <= 30  # ADDRESS_LIMIT
    assert statuses.count(429) >= 30
