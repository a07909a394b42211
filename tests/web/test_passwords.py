"""Passwords: at least 12 characters and not the user name, for a new user, a change, a
reset and the first admin (the demo's, ``antre web``'s); a user changes their own with the
current one (an admin too), an admin resets another's, from the dashboard, the API and the CLI,
audited without the password."""

from __future__ import annotations

import json

import pytest
from webtools import PASSWORD, TEST_SECRET_KEY, basic, post

from antre import Antre
from antre_cli.main import main as cli
from antre_cli.web import serve


def test_password_change_self_dashboard_api_and_audit(web):
    c, other = web.client("viewer"), web.client("viewer")
    resp = post(c, "/account/password", {"current_password": "wrong", "new_password":
                                         "a-new-password-1", "confirm_password": "a-new-password-1"})
    assert resp.status_code == 303 and web.svc.users.verify("viewer", PASSWORD)
    for bad in ("short", "viewer", "VIEWER"):
        post(c, "/account/password", {"current_password": PASSWORD, "new_password": bad,
                                      "confirm_password": bad})
        assert web.svc.users.verify("viewer", PASSWORD)
    post(c, "/account/password", {"current_password": PASSWORD, "new_password": "a-new-password-1",
                                  "confirm_password": "a-new-password-1"})
    assert web.svc.users.verify("viewer", "a-new-password-1")
    assert c.get("/").status_code == 200  # this session goes on
    assert other.get("/").status_code == 302  # the other one ended
    resp = web.app.test_client().post(
        "/api/account/password", json={"current_password": "a-new-password-1",
                                       "new_password": "another-password-2"},
        headers=basic("viewer", "a-new-password-1"))
    assert resp.status_code == 200 and web.svc.users.verify("viewer", "another-password-2")
    outcomes = [(e.user, e.target, e.outcome) for e in web.audit("users.password.change")]
    assert outcomes.count(("viewer", "viewer", "ok")) == 2 and ("viewer", "viewer", "refused") in outcomes
    assert not any("a-new-password-1" in json.dumps(e.to_dict()) for e in web.audit())


def test_password_reset_by_an_admin_api_and_roles(web):
    c = web.app.test_client()
    resp = c.post("/api/users/viewer/password", json={"password": "reset-password-1",
                                                      "reason": "forgot"}, headers=basic("admin"))
    assert resp.status_code == 200 and web.svc.users.verify("viewer", "reset-password-1")
    resp = c.post("/api/users/viewer/password", json={"password": "x"}, headers=basic("admin"))
    assert resp.status_code == 400 and "at least 12" in resp.get_json()["message"]
    resp = c.post("/api/users/admin/password", json={"password": "operator-takes-it"},
                  headers=basic("operator"))
    assert resp.status_code == 403
    resp = c.post("/api/users/viewer/logout-everywhere", json={}, headers=basic("admin"))
    assert resp.status_code == 200
    entry = web.audit("users.password.reset")
    assert [(e.user, e.target, e.outcome) for e in entry] == [
        ("operator", "admin", "refused"), ("admin", "viewer", "refused"),
        ("admin", "viewer", "ok")]
    assert entry[-1].reason == "forgot"


def test_an_admin_changes_their_own_password_only_with_the_current_one(web):
    c = web.app.test_client()
    resp = c.post("/api/users/admin/password", headers=basic("admin"),
                  json={"password": "taken-over-password", "reason": "x"})
    assert resp.status_code == 403 and "/account" in resp.get_json()["message"]
    assert web.svc.users.verify("admin", PASSWORD) is not None
    resp = c.post("/api/users/viewer/password", headers=basic("admin"),
                  json={"password": "reset-by-admin-1", "reason": "x"})
    assert resp.status_code == 200


def test_cli_passwd_delete_and_logout(redis_url, sqlite_url, monkeypatch, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ANTRE_PASSWORD", raising=False)
    app = Antre(redis_url=redis_url, database_url=sqlite_url)
    assert cli(["user", "add", "carol", "--role", "operator"]) == 0
    gen = app.users.get("carol").session_gen
    assert cli(["user", "passwd", "carol", "--password", "short"]) == 1
    assert "at least 12 characters" in capsys.readouterr().err
    assert cli(["user", "passwd", "carol", "--password", "carol-new-password",
                "--reason", "rotated"]) == 0
    assert app.users.verify("carol", "carol-new-password") is not None
    assert cli(["user", "logout-everywhere", "carol"]) == 0
    assert app.users.get("carol").session_gen == gen + 2
    assert cli(["user", "delete", "carol"]) == 0 and app.users.get("carol") is None
    assert cli(["user", "delete", "carol"]) == 1
    actions = [(e.action, e.reason) for e in app.audit.list()]
    assert ("users.password.reset", "rotated") in actions
    assert ("users.logout_everywhere", "") in actions and ("users.delete", "") in actions


@pytest.mark.parametrize("password", ["x", "short", "elevenchars", "           "])
def test_short_passwords_are_refused(web, password):
    resp = web.app.test_client().post("/api/users", json={
        "name": "newbie", "role": "viewer", "password": password}, headers=basic("admin"))
    assert resp.status_code == 400 and "at least 12" in resp.get_json()["message"]
    assert web.svc.users.get("newbie") is None


def test_the_user_name_is_refused_as_password(web):
    resp = web.app.test_client().post("/api/users", json={
        "name": "longusername1", "role": "viewer", "password": "LongUserName1"},
        headers=basic("admin"))
    assert resp.status_code == 400 and "not be the user name" in resp.get_json()["message"]


def test_the_demo_first_admin_gets_a_long_password(redis_url, tmp_path, monkeypatch):
    from antre_cli.demo import _ensure_admin
    monkeypatch.delenv("ANTRE_ADMIN_PASSWORD", raising=False)
    app = Antre(redis_url=redis_url, database_url=f"sqlite:///{tmp_path / 'd.db'}")
    password = _ensure_admin(app)
    assert len(password) >= 12 and app.users.verify("admin", password) is not None
    monkeypatch.setenv("ANTRE_ADMIN_PASSWORD", "short")
    with pytest.raises(ValueError, match="at least 12"):
        _ensure_admin(app)


def test_antre_web_refuses_a_weak_first_admin_password(redis_url, sqlite_url, monkeypatch,
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


def test_the_demo_keeps_its_generated_admin_password_across_restarts(redis_url, tmp_path,
                                                                      monkeypatch):
    from antre_cli.demo import PASSWORD_FILE, _ensure_admin
    monkeypatch.delenv("ANTRE_ADMIN_PASSWORD", raising=False)
    app = Antre(redis_url=redis_url, database_url=f"sqlite:///{tmp_path / 'd.db'}")
    first = _ensure_admin(app, str(tmp_path))
    kept = tmp_path / PASSWORD_FILE
    assert kept.read_text() == first and kept.stat().st_mode & 0o077 == 0
    again = _ensure_admin(app, str(tmp_path))  # the next start of the demo
    assert again == first and app.users.verify("admin", first) is not None
    monkeypatch.setenv("ANTRE_ADMIN_PASSWORD", "an-admin-chosen-one")  # the environment wins
    assert _ensure_admin(app, str(tmp_path)) is None
    assert app.users.verify("admin", "an-admin-chosen-one") is not None
    assert kept.read_text() == first
