"""Issue 12, item by item: each test here fails on the code before the fix. HTTP-level against
the real app (Flask test client), a real Redis and SQLite; the cross-site POST with cached Basic
credentials is also driven in Chromium (tests/browser/test_security_browser.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from argon2 import PasswordHasher
from webtools import (
    PASSWORD,
    TEST_SECRET_KEY,
    basic,
    csrf_of,
    login,
    post,
)

from antre import Antre
from antre.stores.audit import LIMITS, MAX_DETAIL_CHARS
from antre_cli.main import main as cli
from antre_cli.web import serve
from antre_web import InsecureConfig, create_app
from antre_web.security import secret_key_problem


REPO = Path(__file__).resolve().parents[2]
FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def _app(redis_url: str, sqlite_url: str, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    app.extensions["antre"].users.hasher = FAST
    return app


# -- 1. forgeable sessions: the secret key and the compose defaults ---------------------------
@pytest.mark.parametrize("secret", [None, "", "x", "change-me-in-production",
                                    "change-me-in-production-change-me-in-production",
                                    "a" * 64, b"short-bytes"])
def test_1_dashboard_refuses_a_missing_short_or_placeholder_secret(
        secret, redis_url, sqlite_url, monkeypatch):
    monkeypatch.delenv("ANTRE_SECRET_KEY", raising=False)
    with pytest.raises(InsecureConfig) as err:
        create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                    "SECRET_KEY": secret})
    assert "ANTRE_SECRET_KEY" in str(err.value) and "secrets.token_hex(32)" in str(err.value)


def test_1_the_environment_secret_is_checked_too(redis_url, sqlite_url, monkeypatch):
    monkeypatch.setenv("ANTRE_SECRET_KEY", "change-me-in-production")
    with pytest.raises(InsecureConfig, match="too short"):
        create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url})
    monkeypatch.setenv("ANTRE_SECRET_KEY", TEST_SECRET_KEY)
    assert create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url})


def test_1_antre_web_will_not_start_without_a_good_secret(redis_url, sqlite_url, monkeypatch,
                                                          capsys):
    import antre_cli.web

    def no_gunicorn(self):
        raise AssertionError("gunicorn was started")

    monkeypatch.setattr(antre_cli.web._Gunicorn, "run", no_gunicorn)
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ANTRE_ADMIN_PASSWORD", raising=False)
    for value in ("change-me-in-production", None):
        if value is None:
            monkeypatch.delenv("ANTRE_SECRET_KEY", raising=False)
        else:
            monkeypatch.setenv("ANTRE_SECRET_KEY", value)
        assert serve(None, port=1) == 2  # returns before gunicorn would bind anything
        err = capsys.readouterr().err
        assert "refusing to start the dashboard" in err and "token_hex(32)" in err
    assert "ANTRE_SECRET_KEY" not in os.environ  # no random key slipped in for the workers


def test_1_the_demo_secret_passes():
    from antre_cli.demo import _secret
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        assert secret_key_problem(_secret(os.path.join(tmp, "secret_key"))) is None


_VAR = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` (docker compose is not
    installed here; this follows its documented rules)."""
    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name, "")
        if op == "?" and not value:
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return value or (arg if op == "-" else "")
    return _VAR.sub(one, text)


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_1_compose_needs_its_secrets_and_publishes_on_localhost():
    raw = (REPO / "docker-compose.yml").read_text()
    assert "change-me" not in raw
    doc = _compose()
    env = doc["services"]["web"]["environment"]
    for name in ("ANTRE_SECRET_KEY", "ANTRE_ADMIN_PASSWORD"):
        with pytest.raises(ValueError, match=name):
            interpolate(str(env[name]), {})
    good = {"ANTRE_SECRET_KEY": "3b7e9a1c5d2f8e4a6b0c9d7e1f3a5b8c2d4e6f0a1b3c5d7e9f2a4b6c8d0e1f3a", "ANTRE_ADMIN_PASSWORD": "a-long-admin-password",
            "ANTRE_POSTGRES_PASSWORD": "0123abcd" * 2}
    assert secret_key_problem(interpolate(env["ANTRE_SECRET_KEY"], good)) is None
    assert interpolate(env["ANTRE_DATABASE_URL"], good).startswith(
        "postgresql+psycopg://postgres:0123abcd0123abcd@")
    (port,) = doc["services"]["web"]["ports"]
    assert interpolate(port, good) == "127.0.0.1:8000:8000"
    assert interpolate(port, {**good, "ANTRE_BIND": "0.0.0.0"}) == "0.0.0.0:8000:8000"
    assert "ports" not in doc["services"]["redis"] and "ports" not in doc["services"]["postgres"]
    with pytest.raises(ValueError):
        interpolate(doc["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"], {})


# -- 2. CSRF through HTTP Basic -----------------------------------------------------------------
def test_2_api_writes_take_only_json(web):
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
def test_2_cross_site_writes_are_refused_with_basic_and_session(web, headers):
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


def test_2_same_origin_writes_pass(web):
    dead = web.dead_job()
    c = web.app.test_client()
    resp = c.post(f"/api/queues/default/jobs/{dead}/replay", json={},
                  headers={**basic("operator"), "Origin": "http://localhost",
                           "Sec-Fetch-Site": "same-origin"})
    assert resp.status_code == 200


def test_2_browsers_are_not_invited_to_cache_basic_credentials(web):
    c = web.app.test_client()
    nav = c.get("/api/overview", headers={"Accept": "text/html,application/xhtml+xml",
                                          "Sec-Fetch-Mode": "navigate"})
    assert nav.status_code == 401 and "WWW-Authenticate" not in nav.headers
    page = c.get("/")
    assert page.status_code == 302 and "WWW-Authenticate" not in page.headers
    script = c.get("/api/overview")  # curl, requests: the challenge is there
    assert script.headers["WWW-Authenticate"].startswith("Basic")


# -- 3. the login limit cannot be bypassed -------------------------------------------------------
def test_3_whitespace_variants_of_a_name_share_the_tries(web):
    c = web.app.test_client()
    for name in ("viewer", "viewer ", "\tviewer", " viewer", "viewer\t"):
        assert c.get("/api/overview", headers=basic(name, "wrong")).status_code == 401
    assert c.get("/api/overview", headers=basic("viewer")).status_code == 429
    for name in ("operator", " operator ", "operator\n", "\toperator", "operator  "):
        assert login(c, name, "wrong").status_code == 401
    assert login(c, "operator").status_code == 429


def test_3_a_per_account_cap_holds_across_addresses(web):
    c = web.app.test_client()
    for i in range(20):  # 20 addresses, one failure each
        env = {"REMOTE_ADDR": f"10.0.{i}.1"}
        assert c.get("/api/overview", headers=basic("admin", "wrong"),
                     environ_base=env).status_code == 401
    resp = c.get("/api/overview", headers=basic("admin"), environ_base={"REMOTE_ADDR": "10.9.9.9"})
    assert resp.status_code == 429


def test_3_one_address_alone_cannot_lock_an_account_for_everyone(web):
    c = web.app.test_client()
    attacker = {"REMOTE_ADDR": "10.6.6.6"}
    statuses = [c.get("/api/overview", headers=basic("admin", "wrong"),
                      environ_base=attacker).status_code for _ in range(40)]
    assert statuses.count(401) == 5  # then 429: the rest were not even tried
    resp = c.get("/api/overview", headers=basic("admin"), environ_base={"REMOTE_ADDR": "10.1.1.1"})
    assert resp.status_code == 200


def test_3_behind_a_trusted_proxy_the_client_address_counts(redis_url, sqlite_url):
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


def test_3_without_the_setting_forwarded_headers_are_ignored(web):
    c = web.app.test_client()
    for i in range(5):
        c.get("/api/overview", headers={**basic("viewer", "wrong"),
                                        "X-Forwarded-For": f"203.0.113.{i}"})
    assert c.get("/api/overview", headers={**basic("viewer"),
                                           "X-Forwarded-For": "198.51.100.4"}).status_code == 429


# -- 4. open redirect -----------------------------------------------------------------------------
BAD_NEXT = ["/\t/evil.example", "/%09/evil.example", "/\n/evil.example", "//evil.example",
            "/\\evil.example", "https://evil.example/", "/ /evil.example", "/\x7f/evil.example",
            "javascript:alert(1)"]


@pytest.mark.parametrize("nxt", BAD_NEXT)
def test_4_login_next_never_leaves_the_site(web, nxt):
    c = web.app.test_client()
    page = c.get("/login")
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.get_data(as_text=True))
    resp = c.post("/login", data={"username": "viewer", "password": PASSWORD,
                                  "csrf_token": token.group(1), "next": nxt.replace("%09", "\t")})
    assert resp.status_code == 302
    assert resp.headers["Location"] == "/", resp.headers["Location"]


def test_4_actions_next_never_leaves_the_site(web):
    dead = web.dead_job()
    c = web.client("operator")
    resp = post(c, f"/dlq/default/{dead}/replay?next=/%09/evil.example")
    assert resp.status_code == 303 and "evil" not in resp.headers["Location"]
    resp = post(c, "/scheduled/default/nope/run-now", {"next": "/\t/evil.example"})
    assert "evil" not in resp.headers["Location"]
    resp = post(c, "/inflight/default/nope/extend", {"next": "/\t/evil.example", "epoch": "1",
                                                     "seconds": "5"})
    assert "evil" not in resp.headers["Location"]
    resp = post(c, f"/dlq/default/{dead}/discard", {"next": "/dlq/?queue=default"})
    assert resp.headers["Location"] == "/dlq/?queue=default"  # a path on the site still works


# -- 5. no unauthenticated audit flood; bounded fields; streamed exports --------------------------
def test_5_anonymous_refusals_are_counted_not_audited(web):
    c = web.app.test_client()
    c.get("/login")
    big = "A" * 400_000  # about what a form field may hold (Werkzeug: 500 kB)
    for _ in range(3):
        resp = c.post("/login", data={"username": "x", "password": "y", "reason": big})
        assert resp.status_code == 400
    assert web.audit() == []
    assert web.app.extensions["antre_anonymous_refusals"].counts == {"login": 3}


def test_5_every_audited_field_is_bounded(web):
    dead = web.dead_job()
    c = web.client("operator")
    huge = "R" * 500_000
    post(c, f"/dlq/default/{dead}/replay", {"reason": huge})
    post(web.client("viewer"), f"/dlq/default/{dead}/discard", {"reason": huge})
    web.svc.audit.record("u" * 5000, "admin", "a" * 500, "t" * 5000, huge, "ok",
                         {"blob": "d" * 100_000}, "1" * 500)
    for entry in web.audit():
        assert len(entry.reason or "") <= LIMITS["reason"]
        assert len(entry.target or "") <= LIMITS["target"]
        assert len(entry.user) <= LIMITS["user"] and len(entry.action) <= LIMITS["action"]
        assert len(json.dumps(entry.detail or {})) <= MAX_DETAIL_CHARS + 100
    page = c.get("/audit/").get_data(as_text=True)
    assert "R" * 400 not in page  # the page shows a bounded excerpt of each reason


def test_5_exports_are_streamed(web):
    for i in range(1200):
        web.svc.audit.record("bob", "operator", "test.noise", str(i), None, "ok")
    c = web.client("viewer")
    for url in ("/audit/export.csv", "/audit/export.json"):
        resp = c.get(url, buffered=False)
        assert resp.is_streamed, url
        chunks = list(resp.response)
        assert len(chunks) > 100, url  # written as the rows come, not as one body
        resp.close()
    data = json.loads(c.get("/audit/export.json").get_data(as_text=True))
    assert len(data) == 1201 and data[0]["target"] == "0"  # oldest first; +1: the login


# -- 6. revocable sessions, identity is the user id -----------------------------------------------
def _cookie(client) -> str:
    with client.session_transaction() as s:
        return dict(s)


def _replay(web, saved: dict):
    c = web.app.test_client()
    with c.session_transaction() as s:
        s.update(saved)
    return c


def test_6_a_cookie_saved_before_logout_no_longer_works(web):
    c, elsewhere = web.client("operator"), web.client("operator")
    saved = _cookie(c)
    assert post(c, "/logout").status_code == 302
    assert _replay(web, saved).get("/").status_code == 302  # the copy is dead too
    assert elsewhere.get("/").status_code == 200  # another session of the user goes on
    web.clock.advance(13 * 3600 * 1000)  # ended sessions are forgotten once they would expire
    fresh = web.client("viewer")
    post(fresh, "/logout")
    from antre.stores.sql import RevokedSession, datetime_to_ms
    with web.svc.session_factory() as s:
        (row,) = s.query(RevokedSession).all()  # the first one is gone
    assert datetime_to_ms(row.expires_at) > web.clock()


def test_6_a_cookie_saved_before_logout_everywhere_no_longer_works(web):
    c = web.client("operator")
    saved = _cookie(c)
    assert _replay(web, saved).get("/").status_code == 200
    resp = post(c, "/account/logout-everywhere")
    assert resp.status_code == 303
    assert _replay(web, saved).get("/").status_code == 302
    assert c.get("/").status_code == 302
    assert web.audit("users.logout_everywhere")[0].user == "operator"


def test_6_deleting_and_recreating_a_name_does_not_revive_old_cookies(web):
    admin = web.client("admin")
    post(admin, "/users/add", {"name": "x", "role": "viewer", "password": "x-password-123"})
    x = web.app.test_client()
    login(x, "x", "x-password-123")
    saved = _cookie(x)
    post(admin, "/users/x/delete")
    post(admin, "/users/add", {"name": "x", "role": "admin", "password": "x-password-456"})
    assert web.svc.users.get("x").role == "admin"
    old = _replay(web, saved)
    assert old.get("/users/").status_code == 302  # not an admin session: no session at all


def test_6_migration_0003_on_a_database_with_users(db_url):
    import sqlalchemy as sa
    from alembic import command
    from antre.stores.sql import alembic_config, make_engine, migrate

    engine = make_engine(db_url)
    try:
        migrate(engine, "0002")
        with engine.begin() as c:
            c.execute(sa.text("INSERT INTO antre_users (name, role, password_hash, created_at, "
                              "disabled) VALUES ('old', 'admin', 'h', '2026-01-01', false)"))
        migrate(engine)
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT session_gen FROM antre_users")).scalar_one() == 0
        assert "antre_revoked_sessions" in sa.inspect(engine).get_table_names()
        cfg = alembic_config()
        with engine.begin() as c:
            cfg.attributes["connection"] = c
            command.downgrade(cfg, "0002")
        assert "antre_revoked_sessions" not in sa.inspect(engine).get_table_names()
        assert "session_gen" not in {c["name"] for c in sa.inspect(engine).get_columns("antre_users")}
    finally:
        engine.dispose()


def test_6_old_name_based_cookies_are_not_accepted(web):
    c = web.app.test_client()
    with c.session_transaction() as s:
        s.update({"user": "admin", "role": "admin", "csrf": "t"})
    assert c.get("/users/").status_code == 302


@pytest.mark.parametrize("change", ["role", "disable", "password", "delete"])
def test_6_changes_to_a_user_end_their_sessions(web, change):
    admin, op = web.client("admin"), web.client("operator")
    saved = _cookie(op)
    url, data = {"role": ("/users/operator/role", {"role": "operator"}),
                 "disable": ("/users/operator/disable", {}),
                 "password": ("/users/operator/password", {"password": "brand-new-password"}),
                 "delete": ("/users/operator/delete", {})}[change]
    assert post(admin, url, data).status_code == 303
    assert _replay(web, saved).get("/").status_code == 302
    assert admin.get("/").status_code == 200  # the admin's own session goes on


def test_6_sessions_have_an_absolute_lifetime(web):
    c = web.client("viewer")
    for _ in range(4):  # in steady use: each request within the hour
        web.clock.advance(3 * 3600 * 1000 - 60_000)
        assert c.get("/").status_code == 200
    web.clock.advance(5 * 60_000)  # 12 hours since the login
    assert c.get("/").status_code == 302


def test_6_password_change_self_dashboard_api_and_audit(web):
    c, other = web.client("viewer"), web.client("viewer")
    resp = post(c, "/account/password", {"current_password": "wrong", "new_password":
                                         "a-new-password-1", "confirm_password": "a-new-password-1"})
    assert resp.status_code == 303 and web.svc.users.verify("viewer", PASSWORD)
    for bad in ("short", "viewer", "VIEWER"):
        post(c, "/account/password", {"current_password": PASSWORD, "new_password": bad,
                                      "confirm_password": bad})
        assert web.svc.users.verify("viewer", PASSWORD)
    post(c, "/account/password", {"current_password": PASSWORD, "new_password": "a-new-password-1",
                                  "confirm_password": "a-new-password-1"})
    assert web.svc.users.verify("viewer", "a-new-password-1")
    assert c.get("/").status_code == 200  # this session goes on
    assert other.get("/").status_code == 302  # the other one ended
    resp = web.app.test_client().post(
        "/api/account/password", json={"current_password": "a-new-password-1",
                                       "new_password": "another-password-2"},
        headers=basic("viewer", "a-new-password-1"))
    assert resp.status_code == 200 and web.svc.users.verify("viewer", "another-password-2")
    outcomes = [(e.user, e.target, e.outcome) for e in web.audit("users.password.change")]
    assert outcomes.count(("viewer", "viewer", "ok")) == 2 and ("viewer", "viewer", "refused") in outcomes
    assert not any("a-new-password-1" in json.dumps(e.to_dict()) for e in web.audit())


def test_6_password_reset_by_an_admin_api_and_roles(web):
    c = web.app.test_client()
    resp = c.post("/api/users/viewer/password", json={"password": "reset-password-1",
                                                      "reason": "forgot"}, headers=basic("admin"))
    assert resp.status_code == 200 and web.svc.users.verify("viewer", "reset-password-1")
    resp = c.post("/api/users/viewer/password", json={"password": "x"}, headers=basic("admin"))
    assert resp.status_code == 400 and "at least 12" in resp.get_json()["message"]
    resp = c.post("/api/users/admin/password", json={"password": "operator-takes-it"},
                  headers=basic("operator"))
    assert resp.status_code == 403
    resp = c.post("/api/users/viewer/logout-everywhere", json={}, headers=basic("admin"))
    assert resp.status_code == 200
    entry = web.audit("users.password.reset")
    assert [(e.user, e.target, e.outcome) for e in entry] == [
        ("operator", "admin", "refused"), ("admin", "viewer", "refused"),
        ("admin", "viewer", "ok")]
    assert entry[-1].reason == "forgot"


def test_6_cli_passwd_delete_and_logout(redis_url, sqlite_url, monkeypatch, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ANTRE_PASSWORD", raising=False)
    app = Antre(redis_url=redis_url, database_url=sqlite_url)
    assert cli(["user", "add", "carol", "--role", "operator"]) == 0
    gen = app.users.get("carol").session_gen
    assert cli(["user", "passwd", "carol", "--password", "short"]) == 1
    assert "at least 12 characters" in capsys.readouterr().err
    assert cli(["user", "passwd", "carol", "--password", "carol-new-password",
                "--reason", "rotated"]) == 0
    assert app.users.verify("carol", "carol-new-password") is not None
    assert cli(["user", "logout-everywhere", "carol"]) == 0
    assert app.users.get("carol").session_gen == gen + 2
    assert cli(["user", "delete", "carol"]) == 0 and app.users.get("carol") is None
    assert cli(["user", "delete", "carol"]) == 1
    actions = [(e.action, e.reason) for e in app.audit.list()]
    assert ("users.password.reset", "rotated") in actions
    assert ("users.logout_everywhere", "") in actions and ("users.delete", "") in actions
