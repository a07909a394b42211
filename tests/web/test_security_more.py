"""Issue 12, items 7-13 (items 1-6 in test_security.py): each test here fails on the code before the fix. HTTP-level against
the real app (Flask test client), a real Redis and SQLite; the cross-site POST with cached Basic
credentials is also driven in Chromium (tests/browser/test_security_browser.py)."""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from webtools import (
    PASSWORD,
    TEST_SECRET_KEY,
    basic,
    login,
    post,
)

from antre import Antre
from antre.observe.alerts import post_json
from antre.clock import ManualClock
from antre.engine.queue import Queue
from antre_cli.main import main as cli
from antre_cli.web import serve
from antre_web import create_app
from antre_web.security import MEMORY_LIMITER_KEYS, MemoryLimiter


REPO = Path(__file__).resolve().parents[2]
FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def _app(redis_url: str, sqlite_url: str, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    app.extensions["antre"].users.hasher = FAST
    return app


# -- 7. CSV formula neutralisation ----------------------------------------------------------------
@pytest.mark.parametrize("value", [" =1+1", "\t=1+1", "\r\n=cmd", "\x00=1", "\u00a0@SUM(A1)",
                                   "  +1", "-1", "=1;=2"])
def test_7_csv_cells_that_a_spreadsheet_could_run_are_neutralised(web, value):
    web.svc.audit.record("bob", "operator", "t", value, value, "ok")
    text = web.client("viewer").get("/audit/export.csv?action=t").get_data(as_text=True)
    assert text.startswith('"id","at"')
    row = list(csv.DictReader(io.StringIO(text)))[0]
    assert row["target"].startswith("'") and row["reason"].startswith("'")
    body = text.split("\n", 1)[1]
    assert body.startswith('"') and '","' in body  # every cell quoted: a ';' stays inside it


# -- 8. argon2 only after the address throttle; bounded memory ------------------------------------
def test_8_new_names_from_one_address_are_throttled_before_hashing(web):
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


def test_8_the_in_memory_limiter_is_bounded():
    m = MemoryLimiter(max_keys=100)
    for i in range(1000):
        m.failed(f"addr{i}")
    assert len(m) == 100
    assert MEMORY_LIMITER_KEYS <= 100_000


# -- 9. database down: 503, not the cookie's role --------------------------------------------------
def test_9_reads_are_refused_while_the_user_database_is_down(web, monkeypatch):
    from sqlalchemy.exc import OperationalError

    c = web.client("admin")

    def boom(*a, **k):
        raise OperationalError("SELECT", {}, Exception("down"))

    monkeypatch.setattr(web.svc.users, "for_session", boom)
    for url in ("/", "/users/", "/api/users", "/audit/"):
        resp = c.get(url)
        assert resp.status_code == 503, url
    resp = c.get("/api/overview")
    assert resp.get_json()["backend"] == "database"


# -- 10. user names --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ghost/admin", "a b", "x:y", " ", "-lead", "é", "a" * 65,
                                  "<b>", "..", "a\tb"])
def test_10_bad_user_names_are_refused(web, name):
    resp = web.app.test_client().post("/api/users", json={
        "name": name, "role": "viewer", "password": "a-good-password-1"}, headers=basic("admin"))
    assert resp.status_code == 400 and "user name must be" in resp.get_json()["message"]
    assert [u.name for u in web.svc.users.list()] == ["admin", "operator", "viewer"]


def test_10_good_names_work_end_to_end(web):
    c = web.app.test_client()
    for name in ("alice.smith", "bob_2", "ops@example.org", "x-y"):
        resp = c.post("/api/users", json={"name": name, "role": "viewer",
                                          "password": "a-good-password-1"}, headers=basic("admin"))
        assert resp.status_code == 200
        assert c.post(f"/api/users/{name}/delete", json={}, headers=basic("admin")).status_code == 200


# -- 11. bad numbers in queries and bodies are 400s -------------------------------------------------
@pytest.mark.parametrize("url", [
    "/api/audit?limit=inf", "/api/audit?offset=-1e400", "/api/audit?limit=nan",
    "/api/queues/default/dead?limit=1e400", "/api/queues/default/inflight?offset=abc",
    "/audit/?limit=inf", "/dlq/?queue=default&offset=-1e400"])
def test_11_non_numbers_in_the_query_are_400(web, url):
    c = web.client("viewer")
    resp = c.get(url)
    assert resp.status_code == 400, url
    assert "whole number" in resp.get_data(as_text=True)


def test_11_non_numbers_in_forms_and_bodies_are_400(web):
    web.dead_job()
    op = web.client("operator")
    for data in ({"maximum": "abc", "rate": "1"}, {"maximum": "1", "rate": "inf"},
                 {"maximum": "1e400", "rate": "1"}):
        assert post(op, "/dlq/default/bulk", data).status_code == 400, data
    assert post(op, "/dlq/default/discard-filtered", {"maximum": "abc",
                                                      "confirm": "1"}).status_code == 400
    c = web.app.test_client()
    for body in ({"maximum": "abc"}, {"maximum": 1e300}):
        resp = c.post("/api/queues/default/dead/replay-now", json=body, headers=basic("operator"))
        assert resp.status_code == 400, body
    resp = c.post("/api/queues/default/replays", data='{"rate": 1e400, "maximum": 1}',
                  headers={**basic("operator"), "Content-Type": "application/json"})
    assert resp.status_code == 400
    assert web.svc.reads.count_dead("default") == 1


# -- 12. the alert webhook -----------------------------------------------------------------------------
@pytest.fixture
def hook_server():
    """A local HTTP server: ``mode`` 'ok', 'redirect' (to /elsewhere) or 'slow' (drips bytes)."""
    state = {"mode": "ok", "got": [], "stop": threading.Event()}

    class Handler(BaseHTTPRequestHandler):
        def _record(self):
            n = int(self.headers.get("Content-Length") or 0)
            state["got"].append((self.command, self.path, dict(self.headers), self.rfile.read(n)))

        def do_POST(self):
            self._record()
            if state["mode"] == "redirect":
                self.send_response(302)
                self.send_header("Location", "/elsewhere")
                self.end_headers()
            elif state["mode"] == "slow":  # the status line, then a header a byte at a time
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(100):  # each byte well within any socket timeout
                    if state["stop"].wait(0.1):
                        return
                    self.wfile.write(b"x")
                    self.wfile.flush()
                self.wfile.write(b"\r\nContent-Length: 0\r\n\r\n")
            else:
                self.send_response(204)
                self.end_headers()

        do_GET = _record

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", state
    finally:
        state["stop"].set()
        server.shutdown()
        server.server_close()


def test_12_webhook_redirects_are_not_followed(hook_server):
    url, state = hook_server
    state["mode"] = "redirect"
    with pytest.raises(OSError, match="302"):
        post_json(url, {"a": 1})
    assert [(m, p) for m, p, _, _ in state["got"]] == [("POST", "/hook")]  # no GET /elsewhere


def test_12_webhook_call_is_bounded_as_a_whole(hook_server):
    url, state = hook_server
    state["mode"] = "slow"  # 10 s to send the headers, 0.1 s per byte
    with pytest.raises(TimeoutError):
        post_json(url, {"a": 1}, deadline_s=0.5)


def test_12_webhook_body_is_signed(hook_server):
    url, state = hook_server
    post_json(url, {"rule": "x"}, secret="s3cr3t", now_s=lambda: 1_700_000_000)
    _, _, headers, body = state["got"][0]
    assert headers["X-Antre-Timestamp"] == "1700000000"
    expected = hmac.new(b"s3cr3t", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert headers["X-Antre-Signature"] == f"sha256={expected}"
    with pytest.raises(ValueError):
        post_json("file:///etc/passwd", {})


def test_12_the_worker_duty_signs_with_the_configured_secret(r, hook_server, monkeypatch):
    from antre_worker.duties import DUTIES
    url, state = hook_server
    monkeypatch.setenv("ANTRE_ALERT_WEBHOOK", url)
    monkeypatch.setenv("ANTRE_ALERT_WEBHOOK_SECRET", "duty-secret")
    clock = ManualClock()
    app = Antre(redis_client=r, clock=clock)
    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")  # ready, no worker alive

    class D:  # the duty's context: only what _alerts reads
        pass

    d = D()
    d.app, d.clock = app, clock
    (duty,) = [x for x in DUTIES if x.name == "alerts"]
    events = duty.fn(d)
    assert "no_live_worker" in [e.rule for e in events]
    _, _, headers, body = state["got"][0]
    ts = headers["X-Antre-Timestamp"].encode()
    assert headers["X-Antre-Signature"] == "sha256=" + hmac.new(
        b"duty-secret", ts + b"." + body, hashlib.sha256).hexdigest()


# -- 13. the rest -----------------------------------------------------------------------------------
def test_13_dockerignore_keeps_secrets_and_history_out():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    for needed in (".git", "antre-data/", ".env", "*.db", "test-artifacts/"):
        assert needed in lines


def test_13_status_does_not_print_the_redis_password(monkeypatch, capsys):
    from antre.embedded import free_port
    monkeypatch.setenv("ANTRE_REDIS_URL", f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0")
    assert cli(["status"]) == 2
    captured = capsys.readouterr()
    assert "hunter2" not in captured.err + captured.out and "***" in captured.err


def test_13_headers_hsts_behind_tls_and_csp_base_uri(redis_url, sqlite_url):
    app = _app(redis_url, sqlite_url, ANTRE_TRUSTED_PROXIES=1)
    c = app.test_client()
    plain = c.get("/login")
    assert "base-uri 'none'" in plain.headers["Content-Security-Policy"]
    assert "Strict-Transport-Security" not in plain.headers
    tls = c.get("/login", headers={"X-Forwarded-Proto": "https"})
    assert tls.headers["Strict-Transport-Security"].startswith("max-age=")


def test_13_secure_cookies_setting_is_documented_and_works(redis_url, sqlite_url, monkeypatch):
    docs = "\n".join(p.read_text() for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md")])
    assert "ANTRE_SECURE_COOKIES" in docs and "ANTRE_TRUSTED_PROXIES" in docs
    assert "ANTRE_ALERT_WEBHOOK_SECRET" in docs
    monkeypatch.setenv("ANTRE_SECURE_COOKIES", "1")
    app = _app(redis_url, sqlite_url)
    app.extensions["antre"].users.add("viewer", "viewer", PASSWORD)
    c = app.test_client()
    resp = login(c, "viewer")
    assert "Secure" in resp.headers["Set-Cookie"] and "HttpOnly" in resp.headers["Set-Cookie"]
    assert "Strict-Transport-Security" in resp.headers


@pytest.mark.parametrize("password", ["x", "short", "elevenchars", "           "])
def test_13_short_passwords_are_refused(web, password):
    resp = web.app.test_client().post("/api/users", json={
        "name": "newbie", "role": "viewer", "password": password}, headers=basic("admin"))
    assert resp.status_code == 400 and "at least 12" in resp.get_json()["message"]
    assert web.svc.users.get("newbie") is None


def test_13_the_user_name_is_refused_as_password(web):
    resp = web.app.test_client().post("/api/users", json={
        "name": "longusername1", "role": "viewer", "password": "LongUserName1"},
        headers=basic("admin"))
    assert resp.status_code == 400 and "not be the user name" in resp.get_json()["message"]


def test_13_the_demo_first_admin_gets_a_long_password(redis_url, tmp_path, monkeypatch):
    from antre_cli.demo import _ensure_admin
    monkeypatch.delenv("ANTRE_ADMIN_PASSWORD", raising=False)
    app = Antre(redis_url=redis_url, database_url=f"sqlite:///{tmp_path / 'd.db'}")
    password = _ensure_admin(app)
    assert len(password) >= 12 and app.users.verify("admin", password) is not None
    monkeypatch.setenv("ANTRE_ADMIN_PASSWORD", "short")
    with pytest.raises(ValueError, match="at least 12"):
        _ensure_admin(app)


def test_13_antre_web_refuses_a_weak_first_admin_password(redis_url, sqlite_url, monkeypatch,
                                                          capsys):
    import antre_cli.web

    def no_gunicorn(self):
        raise AssertionError("gunicorn was started")

    monkeypatch.setattr(antre_cli.web._Gunicorn, "run", no_gunicorn)
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("ANTRE_SECRET_KEY", TEST_SECRET_KEY)
    monkeypatch.setenv("ANTRE_ADMIN_PASSWORD", "change-me")
    assert serve(None, port=1) == 2
    assert "at least 12 characters" in capsys.readouterr().err
    assert Antre(redis_url=redis_url, database_url=sqlite_url).users.count() == 0
