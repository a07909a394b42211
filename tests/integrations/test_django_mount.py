"""The dashboard mounted in Django's own WSGI application (``get_wsgi_application()``) under
/antre with ``antre_web.wsgi_mount``, its users Django's: the host's login view sets a cookie
Django signs, the callable reads it with Django's own request object over the same environ."""

from __future__ import annotations

import re
from typing import Any

from django.core.handlers.wsgi import WSGIRequest
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.test import override_settings
from django.urls import path
from werkzeug.test import Client
from webtools import TEST_SECRET_KEY

import antre
from antre.clock import ManualClock, system_ms
from antre_web import HostAuth, create_app, wsgi_mount

ROLES = {"alice": "operator"}


def login(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        resp = HttpResponseRedirect(request.GET.get("next") or "/")
        resp.set_signed_cookie("host_user", request.POST["username"], salt="host-login")
        return resp
    return HttpResponse("<h1>Django login</h1>")


urlpatterns = [path("login/", login)]


def user_of(request: Any) -> tuple[str, str] | None:
    """Who Django says is logged in: its signed cookie, read by Django's own request."""
    name = WSGIRequest(request.environ).get_signed_cookie("host_user", default=None,
                                                          salt="host-login")
    role = ROLES.get(name) if name else None
    return (name, role) if name and role else None


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["localhost"])
def test_the_dashboard_inside_djangos_wsgi_app(redis_url: str, sqlite_url: str) -> None:
    clock = ManualClock(system_ms())
    producer = antre.Antre(redis_url=redis_url, clock=clock)
    try:
        dashboard = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                                "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": clock},
                               auth=HostAuth(user=user_of, login_url="/login/"))
        c = Client(wsgi_mount(get_wsgi_application(), "/antre", dashboard))
        q = producer.queue("default")
        job_id = q.enqueue("email", {"to": "a@x"}, idempotency_key="dj:1")
        (job,) = q.reserve("w1")
        q.bury(job, reason="permanent failure", error="smtp down")

        away = c.get(f"/antre/dlq/default/{job_id}")
        assert away.status_code == 302
        assert away.headers["Location"] == f"/login/?next=%2Fantre%2Fdlq%2Fdefault%2F{job_id}"
        assert "Django login" in c.get("/login/").get_data(as_text=True)  # Django answers
        assert c.post("/login/?next=/antre/", data={"username": "alice"}).status_code == 302
        page = c.get(f"/antre/dlq/default/{job_id}").get_data(as_text=True)
        assert "alice" in page and 'href="/antre/static/antre.css' in page
        token = re.search(r'name="csrf-token" content="([^"]+)"', page)
        assert token
        done = c.post(f"/antre/dlq/default/{job_id}/replay",
                      data={"reason": "from django", "csrf_token": token.group(1)})
        assert done.status_code == 303 and q.get(job_id).state == "ready"
        (entry,) = [e for e in dashboard.extensions["antre"].audit.list(action="dlq.replay")
                    if e.outcome == "ok"]
        assert (entry.user, entry.role) == ("alice", "operator")
    finally:
        producer.redis.close()
