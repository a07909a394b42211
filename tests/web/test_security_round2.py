"""Security, second round (issue 24, items 10-15), against the real stack: the Flask test
client on a real Redis and SQLite."""

from __future__ import annotations

import json
import logging

import pytest
from argon2 import PasswordHasher
from webtools import PASSWORD, TEST_SECRET_KEY, basic, csrf_of, htmx, login, post

from antre.embedded import free_port
from antre_web import create_app

SECRET = "hunter22-redis"


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
