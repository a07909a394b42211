"""Adding a user and the password changes are entries of the table of actions
(``antre/actions/users.py``): ``users.add`` and ``users.password.reset`` (admin; dashboard form,
JSON API, ``antre user add|passwd``) and ``users.password.change``, self-service: any logged-in
user, on their own account whatever the request names, the current password asked again; its
form's new password typed twice, a mismatch sent back unaudited."""

from __future__ import annotations

import getpass
import io
import json

import pytest
from webtools import PASSWORD, basic, post

from antre import Antre
from antre.actions import by_name
from antre_cli.main import main

NEW = "a-brand-new-password-1"


def test_a_password_change_acts_on_the_actor_whatever_the_body_names(web):
    c = web.app.test_client()
    resp = c.post("/api/account/password", headers=basic("viewer"),
                  json={"name": "admin", "current_password": PASSWORD, "new_password": NEW})
    assert resp.status_code == 200
    assert web.svc.users.verify("viewer", NEW) is not None
    assert web.svc.users.verify("admin", PASSWORD) is not None  # not the admin's
    assert [(e.user, e.target, e.outcome) for e in web.audit("users.password.change")] == [
        ("viewer", "viewer", "ok")]


def test_the_forms_second_new_password_must_match_unaudited(web):
    c = web.client("operator")
    resp = post(c, "/account/password", {"current_password": PASSWORD, "new_password": NEW,
                                         "confirm_password": NEW + "x"}, follow_redirects=True)
    assert "The new password and its confirmation differ" in resp.get_data(as_text=True)
    assert web.svc.users.verify("operator", PASSWORD) is not None
    assert web.audit("users.password.change") == []  # a typo, not an action


def test_the_self_service_entry_has_no_command_and_the_viewers_role():
    entry = by_name("users.password.change")
    assert entry.self_service and entry.cli == () and entry.role == "viewer"
    assert by_name("users.add").role == by_name("users.password.reset").role == "admin"


@pytest.fixture
def cli_env(web, monkeypatch, redis_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", web.svc.database_url)
    monkeypatch.delenv("ANTRE_PASSWORD", raising=False)
    return Antre(redis_url=redis_url, database_url=web.svc.database_url)


def test_cli_user_add_reads_stdin_and_never_audits_a_made_password(cli_env, monkeypatch,
                                                                    capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(NEW + "\n"))
    assert main(["user", "add", "dana", "--role", "operator", "--password-stdin",
                 "--reason", "on call"]) == 0
    assert capsys.readouterr().out.strip() == "user dana (operator) added"
    assert cli_env.users.verify("dana", NEW).role == "operator"
    assert main(["user", "add", "erin"]) == 0  # no password given: one is made and shown
    made = capsys.readouterr().out.rsplit("password: ", 1)[1].strip()
    assert cli_env.users.verify("erin", made).role == "viewer"
    entries = cli_env.audit.list(action="users.add")
    actor = f"cli:{getpass.getuser()}"
    assert sorted((e.user, e.target, e.outcome) for e in entries) == [
        (actor, "dana", "ok"), (actor, "erin", "ok")]
    assert not any(made in json.dumps(e.to_dict()) or NEW in json.dumps(e.to_dict())
                   for e in cli_env.audit.list())


def test_cli_passwd_of_an_unknown_user_is_refused_and_audited(cli_env, capsys):
    assert main(["user", "passwd", "nosuch", "--password", NEW]) == 1
    assert "no user nosuch" in capsys.readouterr().err
    assert [e.outcome for e in cli_env.audit.list(action="users.password.reset")] == ["refused"]
