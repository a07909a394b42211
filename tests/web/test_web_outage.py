"""Redis or the database unreachable: pages and partials render with a banner, never a 500."""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher
from sqlalchemy.exc import OperationalError
from webtools import PASSWORD, TEST_SECRET_KEY, basic, htmx, login, post


import antre
from antre.embedded import free_port
from antre_web import create_app

PAGES = ["/", "/inflight/", "/scheduled/", "/dlq/", "/dlq/tasks", "/locks/", "/workers/",
         "/charts?queue=default&window=1h", "/dlq/default/abc"]


def _app(redis_url, sqlite_url):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    svc.users.add("operator", "operator", PASSWORD)
    return app


def test_redis_down_pages_render_with_banner(sqlite_url):
    url = f"redis://127.0.0.1:{free_port()}/0"
    app = _app(url, sqlite_url)
    c = app.test_client()
    assert login(c, "operator").status_code == 302
    for page in PAGES:
        resp = c.get(page)
        body = resp.get_data(as_text=True)
        assert resp.status_code == 200, page
        assert f"Redis at {url} is unreachable since" in body, page
        assert "the numbers below are not live; workers keep retrying" in body
        part = c.get(page, headers=htmx())
        assert part.status_code == 200 and "is unreachable since" in part.get_data(as_text=True)
    # pages that read only SQL still work, with the banner
    audit = c.get("/audit/")
    assert audit.status_code == 200 and "is unreachable since" in audit.get_data(as_text=True)
    resp = c.get("/api/overview", headers=basic("operator"))
    assert resp.status_code == 503 and resp.get_json()["backend"] == "redis"
    # an action is answered (banner), and the failed attempt is audited
    resp = post(c, "/dlq/default/j1/replay", {"reason": "r"})
    assert resp.status_code == 200
    entry = app.extensions["antre"].audit.list(action="dlq.replay")[0]
    assert entry.outcome == "failed" and "Redis unreachable" in entry.detail["message"]


def test_redis_outage_shows_last_known_values_and_recovers(embedded_redis_factory, sqlite_url):
    server = embedded_redis_factory(tcp=True)
    producer = antre.Antre(redis_url=server.url)
    producer.enqueue("email", {}, idempotency_key="k1")
    app = _app(server.url, sqlite_url)
    c = app.test_client()
    login(c, "operator")
    assert c.get("/", headers=htmx()).status_code == 200
    producer.redis.close()
    server.stop()
    body = c.get("/", headers=htmx()).get_data(as_text=True)
    assert "is unreachable since" in body and "Last values seen before the outage" in body
    assert "as of" in body
    server.start()
    body = c.get("/").get_data(as_text=True)
    assert "is unreachable" not in body


def test_database_down_banner_and_changes_refused(web, monkeypatch):
    c = web.client("operator")
    dead = web.dead_job()

    def boom(*a, **k):
        raise OperationalError("SELECT", {}, Exception("connection refused"))

    monkeypatch.setattr(web.svc.fences, "current_many", boom)
    web.producer.locks.acquire("sku:1", 30_000)
    locks = c.get("/locks/")  # Redis still answers: the page shows what it knows
    assert locks.status_code == 200 and "database unreachable" in locks.get_data(as_text=True)
    # the user database too: nobody can be authenticated, so nothing is served (503), not
    # even reads on the strength of the role the cookie once had
    for name in ("get", "for_session", "verify"):
        monkeypatch.setattr(web.svc.users, name, boom)
    monkeypatch.setattr(web.svc.audit, "list", boom)
    monkeypatch.setattr(web.svc.audit, "record", boom)
    for url in ("/", "/audit/", "/locks/"):
        resp = c.get(url)
        body = resp.get_data(as_text=True)
        assert resp.status_code == 503 and "The database at" in body and "is unreachable" in body
    resp = web.app.test_client().get("/api/overview", headers=basic("operator"))
    assert resp.status_code == 503 and resp.get_json()["backend"] == "database"
    resp = post(c, f"/dlq/default/{dead}/replay")
    assert resp.status_code == 503
    assert web.svc.reads.count_dead("default") == 1
    monkeypatch.undo()
    assert "The database at" not in c.get("/").get_data(as_text=True)


@pytest.mark.parametrize("url", ["/login"])
def test_login_page_when_database_down(sqlite_url, url, monkeypatch):
    app = _app(f"redis://127.0.0.1:{free_port()}/0", sqlite_url)
    svc = app.extensions["antre"]

    def boom(*a, **k):
        raise OperationalError("SELECT", {}, Exception("down"))

    monkeypatch.setattr(svc.users, "verify", boom)
    c = app.test_client()
    resp = login(c, "operator")
    assert resp.status_code == 503 and "unreachable" in resp.get_data(as_text=True)


def test_app_starts_when_the_database_is_down(redis_url):
    db = f"postgresql+psycopg://u@127.0.0.1:{free_port()}/nope?connect_timeout=2"
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": db, "TESTING": True,
                      "SECRET_KEY": TEST_SECRET_KEY})
    c = app.test_client()
    page = c.get("/login")
    assert page.status_code == 200 and "The database at" in page.get_data(as_text=True)
    assert "u@127.0.0.1" in page.get_data(as_text=True)
    resp = login(c, "admin")
    assert resp.status_code == 503 and "unreachable" in resp.get_data(as_text=True)


def test_login_limit_falls_back_to_memory_while_redis_is_down(sqlite_url):
    app = _app(f"redis://127.0.0.1:{free_port()}/0", sqlite_url)
    c = app.test_client()
    for _ in range(5):
        assert login(c, "operator", "nope").status_code == 401  # no 500 for want of Redis
    assert login(c, "operator").status_code == 429
