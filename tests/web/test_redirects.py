"""No redirect leaves the site: a login's or an action's ``next`` never points elsewhere (a
path on the site still works), a redirect never reflects the ``Host`` header, and with
``ANTRE_TRUSTED_HOSTS`` any other host is refused."""

from __future__ import annotations

import re

import pytest
from argon2 import PasswordHasher
from webtools import PASSWORD, TEST_SECRET_KEY, post

from antre_web import create_app


BAD_NEXT = ["/\t/evil.example", "/%09/evil.example", "/\n/evil.example", "//evil.example",
            "/\\evil.example", "https://evil.example/", "/ /evil.example", "/\x7f/evil.example",
            "javascript:alert(1)"]


def _app_with_operator(redis_url, sqlite_url, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    svc.users.add("operator", "operator", PASSWORD)
    return app


@pytest.mark.parametrize("nxt", BAD_NEXT)
def test_login_next_never_leaves_the_site(web, nxt):
    c = web.app.test_client()
    page = c.get("/login")
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.get_data(as_text=True))
    resp = c.post("/login", data={"username": "viewer", "password": PASSWORD,
                                  "csrf_token": token.group(1), "next": nxt.replace("%09", "\t")})
    assert resp.status_code == 302
    assert resp.headers["Location"] == "/", resp.headers["Location"]


def test_actions_next_never_leaves_the_site(web):
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


@pytest.mark.parametrize("path", ["/dlq", "/inflight"])
def test_redirects_never_reflect_the_host_header(web, path):
    c = web.client("viewer")
    resp = c.get(path, headers={"Host": "evil.example"})
    assert resp.status_code in (301, 302, 303, 307, 308)
    assert "evil.example" not in resp.headers["Location"]
    assert resp.headers["Location"].startswith("/")


def test_trusted_hosts_refuse_any_other_host(redis_url, sqlite_url, monkeypatch):
    monkeypatch.setenv("ANTRE_TRUSTED_HOSTS", "antre.example.org, localhost")
    app = _app_with_operator(redis_url, sqlite_url)
    c = app.test_client()
    assert c.get("/login", headers={"Host": "evil.example"}).status_code == 400
    assert c.get("/login", headers={"Host": "antre.example.org"}).status_code == 200
