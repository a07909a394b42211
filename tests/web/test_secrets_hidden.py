"""Secrets stay out of what is shown: a Redis URL's password never reaches the outage
banner, the log or the audit, nor ``antre status``'s output; a database error never shows its
statement's parameters; a new SQLite file is readable by its owner only; ``/metrics`` asks for
credentials."""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest
from argon2 import PasswordHasher
from sqlalchemy.exc import SQLAlchemyError
from webtools import PASSWORD, TEST_SECRET_KEY, basic, login, post

from antre.embedded import free_port
from antre.stores.sql import make_engine, migrate, session_factory
from antre.stores.users import UserStore
from antre_cli.main import main as cli
from antre_web import create_app


SECRET = "hunter22-redis"


def _app_with_operator(redis_url, sqlite_url, **config):
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, **config})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    svc.users.add("operator", "operator", PASSWORD)
    return app


def test_outage_banner_log_and_audit_never_show_a_query_password(sqlite_url, caplog):
    url = f"redis://127.0.0.1:{free_port()}/0?password={SECRET}"
    app = _app_with_operator(url, sqlite_url)
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


def test_status_does_not_print_the_redis_password(monkeypatch, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0")
    assert cli(["status"]) == 2
    captured = capsys.readouterr()
    assert "hunter2" not in captured.err + captured.out and "***" in captured.err


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


def test_anonymous_metrics_is_a_401_with_a_challenge(web):
    resp = web.app.test_client().get("/metrics")
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Basic")
    assert web.app.test_client().get("/metrics", headers=basic("viewer")).status_code == 200
