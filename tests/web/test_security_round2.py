"""Security, second round (issue 24, items 10-15), against the real stack: the Flask test
client on a real Redis and SQLite."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from pathlib import Path

import pytest
import yaml
from argon2 import PasswordHasher
from sqlalchemy.exc import SQLAlchemyError
from helpers import script_calls
from webtools import PASSWORD, TEST_SECRET_KEY, basic, csrf_of, htmx, login, post

from antre.control.bulk import BulkReplays
from antre.control.purge import CHUNK, COUNT_CHUNKS
from antre.embedded import free_port
from antre.engine.envelope import JobSpec
from antre.observe.readmodels import DeadFilter
from antre.stores.sql import make_engine, migrate, session_factory
from antre.stores.users import UserStore
from antre_web import create_app

SECRET = "hunter22-redis"
REPO = Path(__file__).resolve().parents[2]


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


# -- item 15: the smaller leaks ------------------------------------------------------------------
def test_a_database_error_never_shows_the_statements_parameters(sqlite_url):
    from sqlalchemy import text

    engine = make_engine(sqlite_url)
    migrate(engine)
    users = UserStore(session_factory(engine),
                      hasher=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    users.add("alice", "viewer", PASSWORD)
    with engine.begin() as c:  # the update fails at the database, parameters bound
        c.execute(text("CREATE TRIGGER no_change BEFORE UPDATE ON antre_users "
                       "BEGIN SELECT RAISE(ABORT, 'disk trouble'); END"))
    with pytest.raises(SQLAlchemyError) as caught:
        users.set_password("alice", "a-brand-new-password")
    message = str(caught.value)
    assert "disk trouble" in message and "$argon2" not in message
    assert "parameters hidden" in message


def test_a_sqlite_file_is_created_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "new" / "antre.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_failed_logins_never_record_the_typed_name_as_a_user(web):
    c = web.client()
    typed = "correct-horse-typed-in-the-name-box"
    assert login(c, typed, "x").status_code == 401
    assert login(c, "admin", "wrong-password").status_code == 401
    assert login(c, "viewer").status_code == 302
    rows = web.audit("login")
    failed = [r for r in rows if r.outcome == "failed"]
    assert len(failed) == 2
    assert {r.user for r in failed} == {"(unknown user)"}
    assert all(typed not in json.dumps([r.user, r.target, r.detail]) for r in rows)
    assert {r.target for r in failed} == {
        f"name sha256:{hashlib.sha256(n.encode()).hexdigest()[:12]}" for n in (typed, "admin")}
    assert [r.user for r in rows if r.outcome == "ok"] == ["viewer"]
    page = web.client("viewer").get("/audit/?action=login").get_data(as_text=True)
    assert typed not in page


def test_an_admin_changes_their_own_password_only_with_the_current_one(web):
    c = web.app.test_client()
    resp = c.post("/api/users/admin/password", headers=basic("admin"),
                  json={"password": "taken-over-password", "reason": "x"})
    assert resp.status_code == 403 and "/account" in resp.get_json()["message"]
    assert web.svc.users.verify("admin", PASSWORD) is not None
    resp = c.post("/api/users/viewer/password", headers=basic("admin"),
                  json={"password": "reset-by-admin-1", "reason": "x"})
    assert resp.status_code == 200


@pytest.mark.parametrize("path", ["/dlq", "/inflight"])
def test_redirects_never_reflect_the_host_header(web, path):
    c = web.client("viewer")
    resp = c.get(path, headers={"Host": "evil.example"})
    assert resp.status_code in (301, 302, 303, 307, 308)
    assert "evil.example" not in resp.headers["Location"]
    assert resp.headers["Location"].startswith("/")


def test_trusted_hosts_refuse_any_other_host(redis_url, sqlite_url, monkeypatch):
    monkeypatch.setenv("ANTRE_TRUSTED_HOSTS", "antre.example.org, localhost")
    app = _app(redis_url, sqlite_url)
    c = app.test_client()
    assert c.get("/login", headers={"Host": "evil.example"}).status_code == 400
    assert c.get("/login", headers={"Host": "antre.example.org"}).status_code == 200


def test_anonymous_metrics_is_a_401_with_a_challenge(web):
    resp = web.app.test_client().get("/metrics")
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Basic")
    assert web.app.test_client().get("/metrics", headers=basic("viewer")).status_code == 200


def test_the_web_container_never_receives_the_webhook_secret():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    web_env = compose["services"]["web"]["environment"]
    worker_env = compose["services"]["worker"]["environment"]
    assert "ANTRE_ALERT_WEBHOOK_SECRET" not in web_env
    assert "ANTRE_ALERT_WEBHOOK_SECRET" in worker_env and "ANTRE_SECRET_KEY" not in worker_env


# -- item 11: no viewer request walks a whole queue ------------------------------------------------
def _fill_ready(web, n, job_type=lambda i: "email"):
    web.q.enqueue_many([JobSpec(job_type(i), {"i": i}, f"k{i}") for i in range(n)])


def _evalsha_calls(r):
    return script_calls(r)


def test_a_purge_count_is_bounded_and_goes_on_with_a_cursor(web):
    n = COUNT_CHUNKS * CHUNK + 1_500
    _fill_ready(web, n)
    c = web.client("viewer")
    r = web.producer.redis
    before = _evalsha_calls(r)
    first = c.get("/api/queues/default/purge/count?source=ready").get_json()
    assert _evalsha_calls(r) - before <= COUNT_CHUNKS + 1
    assert first["exact"] is False and 0 < first["count"] < n and first["cursor"]
    assert first["count"] == first["looked"]
    # each step stops at COUNT_CHUNKS chunks or its time budget, whichever comes first (a
    # loaded machine ends steps early): going on with the cursor reaches the exact count
    rest, steps = first, 1
    while rest["cursor"]:
        before = _evalsha_calls(r)
        rest = c.get("/api/queues/default/purge/count?source=ready&count_cursor="
                     + rest["cursor"]).get_json()
        assert _evalsha_calls(r) - before <= COUNT_CHUNKS + 1
        steps += 1
        assert steps <= n // CHUNK + 2, "the cursor never ends"
    assert rest["exact"] is True and rest["count"] == n and rest["cursor"] is None
    small = c.get("/api/queues/default/purge/count?source=scheduled").get_json()
    assert small == {**small, "count": 0, "exact": True}
    resp = c.get("/api/queues/default/purge/count?source=ready&count_cursor=bm9wZQ")
    assert resp.status_code == 400 and "count again" in resp.get_json()["error"]


def test_the_purge_page_says_at_least_and_its_poll_never_counts(web):
    _fill_ready(web, COUNT_CHUNKS * CHUNK + 200)
    c = web.client("viewer")
    page = c.get("/purge/?queue=default&source=ready").get_data(as_text=True)
    assert "at least" in page and "Count further" in page and "count_cursor=" in page
    r = web.producer.redis
    before = _evalsha_calls(r)
    for _ in range(3):
        assert c.get("/purge/?queue=default&source=ready", headers=htmx()).status_code == 200
    assert _evalsha_calls(r) == before


def test_the_dlq_dry_run_with_type_and_group_is_bounded(web):
    n = COUNT_CHUNKS * CHUNK + 300
    q = web.q
    _fill_ready(web, n, lambda i: "email" if i % 3 else "sms")
    while jobs := q.reserve("w", 500):
        for job in jobs:
            q.bury(job, reason="permanent failure", error="smtp down")
    (group,) = [g.group for g in web.svc.reads.error_groups("default")]  # both types: one error
    c = web.client("viewer")
    url = f"/api/queues/default/dead/count?type=email&group={group}"
    first = c.get(url).get_json()
    assert first["exact"] is False and first["looked"] <= COUNT_CHUNKS * CHUNK
    total, cursor, rounds = first["count"], first["cursor"], 1
    while cursor:
        step = c.get(f"{url}&count_cursor={cursor}").get_json()
        total, cursor, rounds = step["count"], step["cursor"], rounds + 1
    assert rounds == 2
    assert total == BulkReplays(web.producer.redis).dry_run(
        "default", DeadFilter(job_type="email", group=group)) == n - len(range(0, n, 3))


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
