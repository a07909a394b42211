"""Where a login lands: on the incident view while an open incident is critical, on the
overview otherwise; a safe ``next`` wins either way."""

from __future__ import annotations

import re

from test_web_incident_view import _open_breaker, fire_dlq_alert
from webtools import PASSWORD


def _login(web, nxt=""):
    c = web.app.test_client()
    page = c.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    data = {"username": "viewer", "password": PASSWORD, "csrf_token": token}
    if nxt:
        data["next"] = nxt
    return c.post("/login", data=data)


def test_login_lands_on_the_overview_when_nothing_is_critical(web):
    _open_breaker(web)  # a major incident only
    resp = _login(web)
    assert resp.status_code == 302 and resp.headers["Location"] == "/"


def test_login_lands_on_the_incident_view_when_an_incident_is_critical(web):
    fire_dlq_alert(web, "payments-eu")
    resp = _login(web)
    assert resp.status_code == 302 and resp.headers["Location"] == "/incident/"


def test_a_safe_next_wins_over_a_critical_incident(web):
    fire_dlq_alert(web, "payments-eu")
    resp = _login(web, "/dlq/?queue=payments-eu")
    assert resp.headers["Location"] == "/dlq/?queue=payments-eu"
