"""Transport protections: the Content-Security-Policy forbids ``<base>``, HSTS is sent behind
TLS (a trusted proxy's ``X-Forwarded-Proto``), and ``ANTRE_SECURE_COOKIES`` makes the session
cookie Secure and HttpOnly (the settings documented)."""

from __future__ import annotations

from pathlib import Path

from argon2 import PasswordHasher
from webtools import PASSWORD, TEST_SECRET_KEY, login

from antre_web import create_app


FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def _app(redis_url: str, sqlite_url: str, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    app.extensions["antre"].users.hasher = FAST
    return app


REPO = Path(__file__).resolve().parents[2]


def test_headers_hsts_behind_tls_and_csp_base_uri(redis_url, sqlite_url):
    app = _app(redis_url, sqlite_url, ANTRE_TRUSTED_PROXIES=1)
    c = app.test_client()
    plain = c.get("/login")
    assert "base-uri 'none'" in plain.headers["Content-Security-Policy"]
    assert "Strict-Transport-Security" not in plain.headers
    tls = c.get("/login", headers={"X-Forwarded-Proto": "https"})
    assert tls.headers["Strict-Transport-Security"].startswith("max-age=")


def test_secure_cookies_setting_is_documented_and_works(redis_url, sqlite_url, monkeypatch):
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
