"""The table of operator actions (``antre/actions/``) is the single source of the dashboard's
HTML route, its JSON API route with the OpenAPI entry, and the ``antre`` subcommand of each
action: every entry has all four, no change route or command exists outside it (but for the
ones outside it by design: reads, processes, authentication), and a toy entry added to the
table shows up in all of them, role-checked and audited."""

from __future__ import annotations

import argparse
import getpass
import re
from collections.abc import Iterator
from typing import Any

import pytest
from webtools import basic, post

from antre import actions as table
from antre.actions import Action, Actor, Args, Html, Ops, Param, Result
from antre_cli.main import build_parser, main
from antre_web import create_app
from antre_web.api import openapi_document

# POST routes outside the table by design: authentication is not an operator action.
AUTHENTICATION = "authentication: who you are, not a change an operator makes"
OUTSIDE_BY_DESIGN_ROUTES = {
    "auth.login_post": AUTHENTICATION,
    "auth.logout": AUTHENTICATION,
    # ends your own sessions and logs you out (it runs the table's users.logout_everywhere)
    "auth.logout_everywhere": AUTHENTICATION,
    # the edited replay's dry run changes nothing; a POST so the payload is in no URL
    "edit.dry_run": "a read: it changes nothing (a POST, so the payload stays out of URLs)",
}
READ, PROCESS = "a read: it changes nothing", "a process, not a change"
# re-sealing needs the key ring, which is the CLI process's own (ANTRE_PAYLOAD_KEYS), not the
# dashboard's: audited by the CLI itself (keys.rotate), no dashboard route
KEY_RING = "needs the key ring of the process that runs it"
OUTSIDE_BY_DESIGN_COMMANDS = {
    "demo": PROCESS, "worker": PROCESS, "sweep": PROCESS, "web": PROCESS,
    "status": READ, "find": READ, "result": READ, "tasks": READ, "dlq list": READ,
    "dlq show": READ, "schedules list": READ, "group list": READ, "group show": READ,
    "user list": READ, "flow list": READ, "flow show": READ, "keys rotate": KEY_RING,
    "config": READ,
}
# Entries without a command: the CLI's actor is an OS user (cli:NAME), not a dashboard one.
NO_COMMAND_BY_DESIGN = {
    "users.password.change": "your own password, the current one asked again: on your "
                             "account page or POST /api/account/password (an admin sets "
                             "another's with antre user passwd)",
}


def cli_commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, Any]:
    """Every leaf subcommand of ``parser`` (``"job extend"``) with its parser."""
    found: dict[str, Any] = {}
    for act in parser._actions:  # argparse keeps its subcommands here
        if isinstance(act, argparse._SubParsersAction):
            for name, sub in act.choices.items():
                inner = cli_commands(sub, f"{prefix}{name} ")
                found.update(inner or {f"{prefix}{name}": sub})
    return found


def flask_rule(path: str) -> str:
    return re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", path)


def test_every_entry_has_its_api_route_openapi_entry_html_route_and_command(web):
    rules = {r.endpoint: r for r in web.app.url_map.iter_rules()}
    with web.app.test_request_context():
        doc = openapi_document()
    commands = cli_commands(build_parser())
    for action in table.TABLE:
        api = rules[f"api.{action.api_name}"]
        assert api.rule == f"/api{action.api}" and "POST" in api.methods, action.name
        op = doc["paths"][flask_rule(f"/api{action.api}")]["post"]
        assert op["summary"] == action.summary.splitlines()[0]
        assert f"'{action.role}'" in op["description"]
        assert set(op["requestBody"]["content"]["application/json"]["schema"]["properties"]) \
            == {p.name for p in action.params} | {"reason"}
        html = rules[action.html.endpoint]
        assert html.rule == action.html.path and "POST" in html.methods, action.name
        if not action.cli:
            assert action.name in NO_COMMAND_BY_DESIGN, action.name
            continue
        parser = commands[" ".join(action.cli)]
        assert action in parser.get_default("table_actions")


def test_every_selection_has_its_html_route_and_api_routes_over_table_entries(web):
    rules = {r.endpoint: r for r in web.app.url_map.iter_rules()}
    with web.app.test_request_context():
        doc = openapi_document()
    names = {a.name for a in table.TABLE}
    commands = cli_commands(build_parser())
    for sel in table.SELECTIONS:
        assert rules[sel.html.endpoint].rule == sel.html.path
        for op in sel.ops:
            assert op.action in names, op  # a selection runs table entries only
            if op.cli:
                assert commands[" ".join(op.cli)].get_default("table_selection") == (sel, op)
            if op.api is None:
                continue
            assert rules[f"api.{op.api_name}"].rule == f"/api{op.api}"
            body = doc["paths"][flask_rule(f"/api{op.api}")]["post"]["requestBody"]
            assert "ids" in body["content"]["application/json"]["schema"]["required"]


def test_no_change_route_or_command_exists_outside_the_table(web):
    made = {a.name for a in table.TABLE} | {s.name for s in table.SELECTIONS}
    for rule in web.app.url_map.iter_rules():
        if "POST" not in rule.methods:
            continue
        view = web.app.view_functions[rule.endpoint]
        from_table = getattr(view, "table_action", None)
        assert from_table in made or rule.endpoint in OUTSIDE_BY_DESIGN_ROUTES, rule.endpoint
    for words, parser in cli_commands(build_parser()).items():
        from_table = parser.get_default("table_actions") or ()
        selection = parser.get_default("table_selection")
        assert (from_table and {a.name for a in from_table} <= made) or \
            (selection is not None and selection[0].name in made) or \
            words in OUTSIDE_BY_DESIGN_COMMANDS, words


# -- one toy entry shows up in all three ------------------------------------------------------
TOUCHED: list[tuple[str, str, str]] = []


def _touch(ops: Ops, who: Actor, a: Args) -> Result:
    if a["times"] < 1:
        return Result(False, "times must be at least 1; nothing was changed", 400)
    TOUCHED.append((who.name, a["job_id"], a["colour"]))
    return Result(True, f"job {a['job_id']} touched {a['times']}x ({a['colour']})", 200,
                  {"times": a["times"]})


TOY = Action("toy.touch", "operator", "Touch a job (a toy action of the table's test).",
             "/queues/<queue>/jobs/<job_id>/touch", "toy_touch",
             Html("/toy/<queue>/<job_id>/touch", "control.toy_touch", "overview.index"),
             ("toy", "touch"), _touch, lambda a: f"{a['queue']}/{a['job_id']}",
             (Param("colour", help="which colour", default="red"),
              Param("times", int, "how many times", required=True, default=0,
                    cli_default=1)))


@pytest.fixture
def toy_web(web, monkeypatch) -> Iterator[Any]:
    """``web`` rebuilt with the toy entry in the table."""
    monkeypatch.setattr(table, "TABLE", [*table.TABLE, TOY])
    import antre_web.table_routes as routes
    import antre_cli.actions as incident
    monkeypatch.setattr(routes, "TABLE", table.TABLE)
    monkeypatch.setattr(incident, "TABLE", table.TABLE)
    config = dict(web.app.config)
    web.app = create_app(config)
    web.svc = web.app.extensions["antre"]
    TOUCHED.clear()
    yield web


def test_a_toy_entry_gets_an_api_route_with_openapi_entry(toy_web):
    c = toy_web.app.test_client()
    resp = c.post("/api/queues/default/jobs/j1/touch", json={"times": 2, "colour": "blue",
                                                             "reason": "because"},
                  headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json() == {
        "ok": True, "message": "job j1 touched 2x (blue)", "times": 2}
    assert c.post("/api/queues/default/jobs/j1/touch", json={"times": "two"},
                  headers=basic("operator")).status_code == 400  # the OpenAPI type
    assert c.post("/api/queues/default/jobs/j1/touch", json={"colour": "red"},
                  headers=basic("operator")).status_code == 400  # times is required
    assert c.post("/api/queues/default/jobs/j1/touch", json={"times": 1},
                  headers=basic("viewer")).status_code == 403
    with toy_web.app.test_request_context():
        op = openapi_document()["paths"]["/api/queues/{queue}/jobs/{job_id}/touch"]["post"]
    assert op["operationId"] == "toy_touch"
    assert op["requestBody"]["content"]["application/json"]["schema"]["required"] == ["times"]
    assert TOUCHED == [("operator", "j1", "blue")]
    audited = [(e.user, e.outcome, e.reason, e.target) for e in toy_web.audit("toy.touch")]
    assert ("operator", "ok", "because", "default/j1") in audited
    assert ("viewer", "refused", None, "default/j1") in audited


def test_a_toy_entry_gets_an_html_route(toy_web):
    c = toy_web.client("operator")
    resp = post(c, "/toy/default/j2/touch", {"times": "3", "reason": "<b>x</b>"},
                follow_redirects=True)
    assert resp.status_code == 200 and "job j2 touched 3x (red)" in resp.get_data(as_text=True)
    refused = post(c, "/toy/default/j2/touch", {"times": "0"}, follow_redirects=True)
    assert "times must be at least 1" in refused.get_data(as_text=True)
    assert post(c, "/toy/default/j2/touch", {"times": "many"}).status_code == 400
    assert post(c, "/toy/default/j2/touch", {"times": "1"}, csrf=False).status_code in (400, 403)
    assert TOUCHED == [("operator", "j2", "red")]
    # newest first: "many" (bad input, 400), "0" (refused by the entry), "3"
    assert [e.outcome for e in toy_web.audit("toy.touch")] == ["refused", "refused", "ok"]
    with toy_web.app.test_request_context():
        from flask import url_for
        assert url_for("control.toy_touch", queue="q", job_id="j") == "/toy/q/j/touch"


def test_a_toy_entry_gets_a_cli_command(toy_web, monkeypatch, redis_url, capsys):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", toy_web.svc.database_url)
    assert main(["toy", "touch", "default", "j3", "--colour", "green", "--reason", "r"]) == 0
    assert "job j3 touched 1x (green)" in capsys.readouterr().out
    assert main(["toy", "touch", "default", "j3", "--times", "0"]) == 1
    assert "error: times must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["toy", "touch", "default", "j3", "--times", "x"])  # argparse: not an int
    actor = f"cli:{getpass.getuser()}"
    assert TOUCHED == [(actor, "j3", "green")]
    assert [(e.user, e.outcome) for e in toy_web.audit("toy.touch")] == [
        (actor, "refused"), (actor, "ok")]


def test_parse_converts_each_kind_and_names_a_bad_value():
    action = Action("toy.kinds", "operator", "Kinds.", "/toy/<queue>/kinds", "toy_kinds",
                    Html("/toy/<queue>/kinds", "control.toy_kinds", "overview.index"),
                    ("toy", "kinds"), _touch, lambda a: a["queue"],
                    (Param("n", int, default=0), Param("rate", float, default=1.0),
                     Param("word", default="dlq")))
    args = table.parse(action, {"queue": "q"}, {"n": " 7 ", "rate": "2.5", "word": " x ",
                                                 "reason": "  why  "})
    assert args == {"queue": "q", "n": 7, "rate": 2.5, "word": "x", "reason": "why"}
    assert table.parse(action, {"queue": "q"}, {})["rate"] == 1.0  # the default
    for body, field in (({"n": "2.5"}, "n"), ({"n": True}, "n"), ({"rate": "inf"}, "rate"),
                        ({"rate": "fast"}, "rate")):
        with pytest.raises(table.BadInput, match=field):
            table.parse(action, {"queue": "q"}, body)


def test_an_html_route_goes_back_to_its_page_with_the_entrys_back_args(web):
    web.q.enqueue("email", {"tenant": "t1"}, idempotency_key="e1")
    c = web.client("operator")
    resp = post(c, "/purge/default/start", {"source": "ready", "type": "email",
                                            "field": "tenant", "value": "t1", "rate": "5",
                                            "confirm": "7", "next": "/elsewhere"})
    assert resp.status_code == 303
    location = resp.headers["Location"]
    assert location.startswith("/purge/?") and "next" not in location  # follow_next=False
    for part in ("queue=default", "source=ready", "type=email", "field=tenant", "value=t1"):
        assert part in location, location
    assert [e.outcome for e in web.audit("purge.start")] == ["refused"]  # not confirmed
