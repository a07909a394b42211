"""The dashboard mounted inside a host Flask app under /antre, its users the host's
(``antre_web.mount``, ``webapp/antre_web/delegated.py``; the host is ``examples/flask_host.py``), driven
through the host with Flask's test client."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from werkzeug.test import Client
from webtools import TEST_SECRET_KEY, htmx

import antre
from antre.clock import ManualClock, system_ms
from antre_web import HostAuth, create_app, wsgi_mount
from examples.flask_host import create_host
from tests.web.test_web import populate
from webtools import Web

PAGES = ["/antre/", "/antre/inflight/", "/antre/scheduled/", "/antre/dlq/", "/antre/locks/",
         "/antre/workers/", "/antre/audit/", "/antre/find?q=type%3Demail", "/antre/groups/",
         "/antre/incident/", "/antre/browse/default/dead"]
LINK = re.compile(r'(?:href|action|src|hx-get|hx-post|data-url)="([^"#][^"]*)"')


@pytest.fixture
def hosted(redis_url: str, sqlite_url: str) -> Iterator[tuple[Flask, Web]]:
    clock = ManualClock(system_ms())
    producer = antre.Antre(redis_url=redis_url, clock=clock)
    host = create_host({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                        "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": clock})
    dashboard = host.wsgi_app.mounts["/antre"]  # type: ignore[attr-defined]
    yield host, Web(dashboard, dashboard.extensions["antre"], producer, clock)
    producer.redis.close()


def host_login(host: Flask, name: str) -> Any:
    c = host.test_client()
    resp = c.post("/login", data={"username": name, "password": "letmein", "next": "/antre/"})
    assert resp.status_code == 302 and resp.headers["Location"] == "/antre/"
    return c


def csrf(c: Any, page: str = "/antre/") -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', c.get(page).get_data(as_text=True))
    assert found
    return found.group(1)


def test_nobody_logged_in_goes_to_the_host_login_never_antres(hosted):
    host, _ = hosted
    c = host.test_client()
    resp = c.get("/antre/dlq/?queue=default")
    assert resp.status_code == 302
    assert resp.headers["Location"] == "/login?next=%2Fantre%2Fdlq%2F%3Fqueue%3Ddefault"
    assert c.get("/antre/api/overview").status_code == 401  # scripts: no redirect
    own = c.get("/antre/login")  # Antre's own form is never served
    assert own.status_code == 302 and own.headers["Location"] == "/login"
    assert c.post("/antre/login", data={"username": "x"}).status_code == 404
    assert "Host app login" in c.get("/login").get_data(as_text=True)


def test_every_link_form_and_htmx_url_on_the_main_pages_carries_the_prefix(hosted):
    host, web = hosted
    made = populate(web)
    c = host_login(host, "alice")
    job = f"/antre/jobs/default/{made['dead']}"
    for page in [*PAGES, job, f"/antre/dlq/default/{made['dead']}"]:
        resp = c.get(page)
        assert resp.status_code == 200, page
        body = resp.get_data(as_text=True)
        urls = LINK.findall(body)
        assert len(urls) > 5, page
        bad = [u for u in urls if not u.startswith(("/antre/", "/logout", "data:", "https:"))]
        assert not bad, (page, bad)
    assert c.get("/antre/static/antre.css").status_code == 200
    assert c.get("/antre/static/vendor/htmx.min.js").status_code == 200
    part = c.get("/antre/inflight/", headers=htmx()).get_data(as_text=True)
    assert "<html" not in part and all(u.startswith("/antre/") for u in LINK.findall(part))


def test_a_post_with_csrf_runs_and_is_audited_under_the_hosts_user(hosted):
    host, web = hosted
    job_id = web.dead_job()
    c = host_login(host, "alice")
    token = csrf(c)
    refused = c.post(f"/antre/dlq/default/{job_id}/replay", data={"reason": "no token"})
    assert refused.status_code == 400 and web.svc.reads.count_dead("default") == 1
    resp = c.post(f"/antre/dlq/default/{job_id}/replay",
                  data={"reason": "smtp fixed", "csrf_token": token})
    assert resp.status_code == 303 and resp.headers["Location"].startswith("/antre/dlq/")
    assert web.svc.reads.count_dead("default") == 0
    (entry,) = [e for e in web.audit("dlq.replay") if e.outcome == "ok"]
    assert (entry.user, entry.role, entry.reason) == ("alice", "operator", "smtp fixed")
    assert web.svc.users.get("alice") is None  # no Antre user was made or needed


def test_the_json_api_under_the_prefix_with_the_hosts_session(hosted):
    host, web = hosted
    job_id = web.dead_job()
    c = host_login(host, "alice")
    assert c.get("/antre/api/overview").get_json() is not None
    url = f"/antre/api/queues/default/jobs/{job_id}/replay"
    assert c.post(url, json={"reason": "x"}).status_code == 400  # a delegated user needs CSRF
    resp = c.post(url, json={"reason": "api"}, headers={"X-CSRF-Token": csrf(c)})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert web.svc.reads.count_dead("default") == 0
    assert c.get("/antre/api/openapi.json").status_code == 200


def test_a_viewer_cannot_post_and_the_refusal_is_audited(hosted):
    host, web = hosted
    job_id = web.dead_job()
    c = host_login(host, "vera")
    body = c.get(f"/antre/dlq/default/{job_id}").get_data(as_text=True)
    assert ">Replay this job<" not in body
    resp = c.post(f"/antre/dlq/default/{job_id}/replay",
                  data={"reason": "try", "csrf_token": csrf(c)})
    assert resp.status_code == 403 and "viewer" in resp.get_data(as_text=True)
    assert web.svc.reads.count_dead("default") == 1
    (entry,) = web.audit("dlq.replay")
    assert (entry.user, entry.role, entry.outcome) == ("vera", "viewer", "refused")


def test_the_dashboard_cookie_is_its_own_and_the_hosts_logout_ends_access(hosted):
    host, _ = hosted
    c = host_login(host, "alice")
    page = c.get("/antre/")
    cookie = page.headers.get("Set-Cookie", "")
    assert cookie.startswith("antre_session=") and "Path=/antre" in cookie
    assert 'href="/logout"' in page.get_data(as_text=True)  # the host's logout in the menu
    assert c.get("/antre/account").status_code == 404  # Antre's account page is not served
    c.get("/logout")
    assert c.get("/antre/").headers["Location"].startswith("/login?next=")


def test_a_role_the_host_should_not_return_is_a_403_saying_what_to_return(redis_url,
                                                                          sqlite_url):
    roles = iter([("mallory", "superuser"), ("", "admin"), "bob"])
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "SECRET_KEY": TEST_SECRET_KEY},
                     auth=HostAuth(user=lambda request: next(roles)))  # type: ignore[arg-type]
    c = app.test_client()
    first = c.get("/").get_data(as_text=True)
    assert "must be one of viewer, operator, admin" in first
    assert "empty user name" in c.get("/").get_data(as_text=True)
    resp = c.get("/api/overview")
    assert resp.status_code == 403 and "(name, role) or None" in resp.get_json()["error"]


def test_without_a_login_url_a_page_is_a_401(redis_url, sqlite_url):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "SECRET_KEY": TEST_SECRET_KEY}, auth=HostAuth(user=lambda request: None))
    resp = app.test_client().get("/dlq/")
    assert resp.status_code == 401 and "log in to the host" in resp.get_data(as_text=True)


def test_any_wsgi_host_through_wsgi_mount(redis_url, sqlite_url):
    """A host that is not Flask (Django's WSGI app, here a bare WSGI callable): the callable
    reads the host's own cookie from the request."""
    def host(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the host's own page"]

    def user(request: Any) -> tuple[str, str] | None:
        return ("dana", "admin") if request.cookies.get("hostid") == "dana-ok" else None

    dashboard = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                            "SECRET_KEY": TEST_SECRET_KEY},
                           auth=HostAuth(user=user, login_url="/accounts/login/"))
    c = Client(wsgi_mount(host, "/ops/antre/", dashboard))
    assert c.get("/elsewhere").get_data() == b"the host's own page"
    away = c.get("/ops/antre/workers/")
    assert away.headers["Location"] == "/accounts/login/?next=%2Fops%2Fantre%2Fworkers%2F"
    c.set_cookie("hostid", "dana-ok")
    page = c.get("/ops/antre/workers/").get_data(as_text=True)
    assert "dana" in page and 'href="/ops/antre/users/"' in page  # admin: the Users page


def test_the_csrf_token_is_made_anew_when_the_hosts_user_changes(hosted):
    host, web = hosted
    job_id = web.dead_job()
    c = host_login(host, "alice")
    alices = csrf(c)
    c.get("/logout")
    resp = c.post("/login", data={"username": "root", "password": "letmein", "next": "/antre/"})
    assert resp.status_code == 302
    stale = c.post(f"/antre/dlq/default/{job_id}/replay",
                   data={"reason": "alice's page", "csrf_token": alices})
    assert stale.status_code == 400 and web.svc.reads.count_dead("default") == 1
    roots = csrf(c)
    assert roots != alices
    resp = c.post(f"/antre/dlq/default/{job_id}/replay",
                  data={"reason": "root's page", "csrf_token": roots})
    assert resp.status_code == 303 and web.svc.reads.count_dead("default") == 0


@pytest.mark.parametrize("nxt", ["/\t/evil.example", "/\n/evil.example", "/\\evil.example",
                                 "//evil.example", "https://evil.example/", "/ /evil.example"])
def test_the_example_hosts_login_sends_only_to_its_own_paths(hosted, nxt):
    host, _ = hosted
    resp = host.test_client().post("/login", data={"username": "alice", "password": "letmein",
                                                   "next": nxt})
    assert resp.status_code == 302 and resp.headers["Location"] == "/"
    ok = host.test_client().post("/login", data={"username": "alice", "password": "letmein",
                                                 "next": "/antre/dlq/?queue=default"})
    assert ok.headers["Location"] == "/antre/dlq/?queue=default"
    wrong = host.test_client().post("/login", data={"username": "alice", "password": "lëtmein"})
    assert wrong.status_code == 200 and "Wrong user or password" in wrong.get_data(as_text=True)
