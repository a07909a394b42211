"""CLI parity for the user actions: ``antre user role|disable|enable|delete|
logout-everywhere`` run the table's entries (``antre/actions/``) against a real SQLite,
audited like the dashboard's (same action names, ``cli:NAME`` as the actor); an unknown user
or role is refused, audited, and changes nothing."""

from __future__ import annotations

import getpass

import pytest
from webtools import TEST_SECRET_KEY, basic

from antre import Antre
from antre_cli.main import main

ACTOR = f"cli:{getpass.getuser()}"
PASSWORD = "a-long-enough-password"


@pytest.fixture
def env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    app = Antre(redis_url=redis_url, database_url=sqlite_url)
    app.users.add("carol", "viewer", PASSWORD)
    return app


def audited(app, action):
    return [(e.user, e.role, e.outcome, e.target, e.reason)
            for e in app.audit.list(action=action)]


def test_user_role_changes_the_role_audited_as_the_dashboard_does(env, capsys):
    assert main(["user", "role", "carol", "operator", "--reason", "on call"]) == 0
    assert "user carol is now operator" in capsys.readouterr().out
    assert env.users.get("carol").role == "operator"
    assert audited(env, "users.set_role") == [(ACTOR, "cli", "ok", "carol", "on call")]
    (entry,) = env.audit.list(action="users.set_role")
    assert entry.detail["role_before"] == "viewer" and entry.detail["role_after"] == "operator"


def test_user_disable_and_enable(env, capsys):
    assert main(["user", "disable", "carol", "--reason", "left"]) == 0
    assert "user carol disabled" in capsys.readouterr().out
    assert env.users.get("carol").disabled
    assert env.users.verify("carol", PASSWORD) is None  # no login while disabled
    assert main(["user", "enable", "carol"]) == 0
    assert not env.users.get("carol").disabled
    assert env.users.verify("carol", PASSWORD) is not None
    assert audited(env, "users.disable") == [(ACTOR, "cli", "ok", "carol", "left")]
    assert audited(env, "users.enable") == [(ACTOR, "cli", "ok", "carol", "")]


@pytest.mark.parametrize("argv, action", [
    (["user", "role", "nosuch", "admin"], "users.set_role"),
    (["user", "disable", "nosuch"], "users.disable"),
    (["user", "enable", "nosuch"], "users.enable"),
    (["user", "delete", "nosuch"], "users.delete"),
    (["user", "logout-everywhere", "nosuch"], "users.logout_everywhere"),
])
def test_an_unknown_user_is_refused_and_audited(env, capsys, argv, action):
    assert main(argv) == 1
    assert "error: no user nosuch" in capsys.readouterr().err
    assert audited(env, action) == [(ACTOR, "cli", "refused", "nosuch", "")]
    assert [u.name for u in env.users.list()] == ["carol"]


def test_an_unknown_role_is_refused_and_audited(env, capsys):
    assert main(["user", "role", "carol", "root"]) == 1
    assert "role must be one of viewer, operator, admin, not 'root'" in capsys.readouterr().err
    assert env.users.get("carol").role == "viewer"
    assert audited(env, "users.set_role") == [(ACTOR, "cli", "refused", "carol", "")]


def test_the_same_entries_serve_the_dashboard(env, redis_url, sqlite_url):
    """The API route of the entry the CLI ran: same audit name, the admin role."""
    from antre_web import create_app
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "SECRET_KEY": TEST_SECRET_KEY, "TESTING": True})
    env.users.add("root", "admin", PASSWORD)
    env.users.add("olga", "operator", PASSWORD)
    c = app.test_client()
    assert c.post("/api/users/carol/disable", json={},
                  headers=basic("olga", PASSWORD)).status_code == 403
    assert c.post("/api/users/carol/disable", json={"reason": "api"},
                  headers=basic("root", PASSWORD)).status_code == 200
    assert env.users.get("carol").disabled
    assert [(u, o) for u, _, o, _, _ in audited(env, "users.disable")] == [
        ("root", "ok"), ("olga", "refused")]
