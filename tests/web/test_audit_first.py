"""Every operator action is recorded before it runs, from every surface (the dashboard's form,
the JSON API, the ``antre`` command): generated from the table of actions, for each entry the
audit log is made to refuse the entry (a real trigger in the real database) and the action
must not run and nothing may change, the operator told why (503, exit status 2); with the log
working, the entry's ``started`` row is in the database when the action runs, and then carries
its outcome. Odd input (a NUL, a lone surrogate) is still audited."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from antre_web import create_app
from sqlalchemy import create_engine, text
from webtools import PASSWORD, basic, csrf_of, post

import antre
from antre import actions as table
from antre.actions import Action, Actor, Args, Ops, Result
from antre_cli.main import main

ACTIONS = [a for a in table.TABLE]
SURFACES = ("api", "html", "cli")
SEEN: list[tuple[str, list[tuple[str, str | None, str]]]] = []  # (action, its rows at run)


def _spying(action: Action, audit: Any) -> Action:
    """``action`` whose ``run`` first notes the audit rows of its name in the database."""
    def run(ops: Ops, who: Actor, args: Args) -> Result:
        rows = [(e.action, e.target, e.outcome) for e in audit.list(action=action.name)]
        SEEN.append((action.name, rows))
        return action.run(ops, who, args)
    return dataclasses.replace(action, run=run)


@pytest.fixture
def spied(web, monkeypatch, redis_url) -> Iterator[Any]:
    """``web`` rebuilt with every entry of the table spied on, the CLI on the same stores."""
    import antre_web.table_routes as routes

    import antre.actions.table as table_module
    import antre_cli.actions as cli_actions
    spies = [_spying(a, web.svc.audit) for a in table.TABLE]
    for module in (table, table_module, routes, cli_actions):
        monkeypatch.setattr(module, "TABLE", spies)
    web.app = create_app(dict(web.app.config))
    web.svc = web.app.extensions["antre"]
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", web.svc.database_url)
    monkeypatch.setenv("ANTRE_PASSWORD", "a brand new password 42")
    web.raw = redis.Redis.from_url(redis_url)
    SEEN.clear()
    _world(web)
    yield web
    web.raw.close()


def _world(web: Any) -> None:
    """Something for the actions to change: a dead, a scheduled and an in-flight job."""
    web.dead_id = web.dead_job()
    web.q.enqueue("email", {"to": "b@x"}, idempotency_key="later", delay_s=600)
    web.q.enqueue("email", {"to": "c@x"}, idempotency_key="now")
    web.q.reserve("w1")


def refuse_audit_inserts(url: str) -> None:
    """The audit table refuses every new row (a real trigger: the database says no)."""
    engine = create_engine(url)
    with engine.begin() as c:
        if engine.dialect.name == "sqlite":
            c.execute(text("CREATE TRIGGER antre_audit_refused BEFORE INSERT ON antre_audit "
                           "BEGIN SELECT RAISE(ABORT, 'the audit log refuses'); END"))
        else:
            c.execute(text("CREATE FUNCTION antre_audit_refused() RETURNS trigger AS $$ BEGIN "
                           "RAISE EXCEPTION 'the audit log refuses'; END $$ LANGUAGE plpgsql"))
            c.execute(text("CREATE TRIGGER antre_audit_refused BEFORE INSERT ON antre_audit "
                           "FOR EACH ROW EXECUTE FUNCTION antre_audit_refused()"))
    engine.dispose()


# -- the arguments of an entry, from its declaration -------------------------------------------
def path_values(action: Action, web: Any) -> dict[str, str]:
    known = {"queue": "default", "job_id": web.dead_id, "kind": "type", "group": "tenant:7",
             "name": "viewer" if action.name.startswith("users.") else "email",
             "task_id": "t1", "flow_id": "f1"}
    return {n: known.get(n, "x") for n in action.path_params}


def param_value(p: table.Param) -> str:
    if p.choices:
        return p.choices[0]
    if p.kind is int:
        return "1"
    if p.kind is float:
        return "1.5"
    return {"role": "admin", "current_password": PASSWORD, "payload": '{"to": "d@x"}',
            "password": "a brand new password 42", "new_password": "a brand new password 42",
            "rate": "5/s", "for": "1h", "field": "ready", "id": "i1",
            "key": "lk"}.get(p.name, "x")


def body_of(action: Action) -> dict[str, str]:
    return {p.name: param_value(p) for p in action.params if p.required or p.cli_required}


def run_on(surface: str, action: Action, web: Any) -> tuple[int, str]:
    """Run ``action`` from ``surface``: the HTTP status or the exit status, and what the
    operator reads (the page after the redirect, the JSON, stderr)."""
    path = path_values(action, web)
    body = {**body_of(action), "reason": "audited first"}
    if surface == "api":
        url = "/api" + _fill(action.api, path)
        kinds = {p.name: p.kind for p in action.params}
        typed = {k: kinds.get(k, str)(v) for k, v in body.items()}  # JSON's types
        resp = web.app.test_client().post(url, json=typed, headers=basic("admin"))
        return int(resp.status_code), resp.get_data(as_text=True)
    if surface == "html":
        c = web.client("viewer" if action.self_service else "admin")
        if action.html.confirm is not None:
            body["confirm"] = body.get(action.html.confirm[0], "")
        if action.html.repeat is not None:
            body[action.html.repeat[0]] = body[action.html.repeat[1]]
        assert csrf_of(c)
        resp = post(c, _fill(action.html.path, path), body)
        with c.session_transaction() as flashed:  # what the page it goes back to shows
            said = " ".join(m for _, m in flashed.get("_flashes", []))
        return int(resp.status_code), said
    argv = list(action.cli) + [path[n] for n in action.path_params]
    for p in action.params:
        if p.secret or not (p.required or p.cli_required or p.positional):
            continue
        argv += [param_value(p)] if p.positional else \
            [f"--{p.name.replace('_', '-')}", param_value(p)]
    return main([*argv, "--reason", "audited first"]), ""


def _fill(route: str, values: dict[str, str]) -> str:
    import re
    return re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: values[m.group(1)], route)


def _surfaces(action: Action) -> list[str]:
    return [s for s in SURFACES if s != "cli" or action.cli]


CASES = [pytest.param(a, s, id=f"{a.name}-{s}") for a in ACTIONS for s in _surfaces(a)]


def snapshot(web: Any) -> dict[bytes, Any]:
    """Every Redis key (but the login throttle's) with its value, and the users table."""
    r = web.raw
    keys = sorted(k for k in r.keys("*") if b"login_failures" not in k)
    state: dict[Any, Any] = {k: _value(r, k) for k in keys}
    state["users"] = sorted((u.name, u.role, u.disabled, u.session_gen)
                            for u in web.svc.users.list())
    return state


def _value(r: Any, key: bytes) -> Any:
    kind = r.type(key)
    if kind == b"hash":
        return r.hgetall(key)
    if kind == b"zset":
        return r.zrange(key, 0, -1, withscores=True)
    if kind == b"set":
        return sorted(r.smembers(key))
    if kind == b"list":
        return r.lrange(key, 0, -1)
    return r.dump(key)


@pytest.mark.parametrize(("action", "surface"), CASES)
def test_an_action_whose_audit_entry_cannot_be_written_changes_nothing(spied, action,
                                                                       surface, capsys):
    web = spied
    if surface == "html":
        clients = {role: web.client(role) for role in ("viewer", "admin")}
        web.client = lambda role=None: clients[role]  # logged in before the log refuses
    before = snapshot(web)
    entries = len(web.audit())
    refuse_audit_inserts(web.svc.database_url)
    status, said = run_on(surface, action, web)
    assert [name for name, _ in SEEN] == []  # no entry of the table ran
    assert snapshot(web) == before
    assert len(web.audit()) == entries
    if surface == "cli":
        said = capsys.readouterr().err
    assert status == {"api": 503, "html": 303, "cli": 2}[surface]
    assert "the audit log could not be written" in said and "nothing was changed" in said


@pytest.mark.parametrize(("action", "surface"), CASES)
def test_an_action_runs_only_once_its_started_entry_is_in_the_database(spied, action,
                                                                       surface):
    web = spied
    assert run_on(surface, action, web)[0] != 500
    assert SEEN, f"{action.name} did not run from {surface}"
    for name, rows in SEEN:
        assert rows and rows[0][2] == "started", (name, rows)
        entry = web.audit(name)[0]
        assert entry.outcome in ("ok", "refused", "failed") and entry.reason == "audited first"


# -- PostgreSQL, and odd input -----------------------------------------------------------------
@pytest.fixture
def pg_web(redis_url, pg_url) -> Iterator[Any]:
    """The dashboard on PostgreSQL (a fresh schema), one user per role."""
    from argon2 import PasswordHasher
    from webtools import ROLES, TEST_SECRET_KEY, Web

    from antre.clock import ManualClock, system_ms
    clock = ManualClock(system_ms())
    producer = antre.Antre(redis_url=redis_url, clock=clock)
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": pg_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": clock})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    for role in ROLES:
        svc.users.add(role, role, PASSWORD)
    yield Web(app, svc, producer, clock)
    producer.redis.close()
    svc.antre.close() if hasattr(svc.antre, "close") else None


def test_on_postgresql_no_action_runs_while_the_audit_log_refuses_its_entry(pg_web,
                                                                            monkeypatch):
    web = pg_web
    import antre_web.table_routes as routes

    import antre.actions.table as table_module
    spies = [_spying(a, web.svc.audit) for a in table.TABLE]
    for module in (table, table_module, routes):
        monkeypatch.setattr(module, "TABLE", spies)
    web.app = create_app(dict(web.app.config))
    web.svc = web.app.extensions["antre"]
    web.dead_id = web.dead_job()
    SEEN.clear()
    refuse_audit_inserts(web.svc.database_url)
    answers = {a.name: run_on("api", a, web) for a in table.TABLE}
    assert SEEN == []
    assert {name: status for name, (status, _) in answers.items() if status != 503} == {}
    assert web.q.where(web.dead_id) == ["dead"] and web.audit() == []


def test_a_lone_surrogate_in_a_json_reason_is_audited_and_the_change_made(web):
    resp = web.app.test_client().post("/api/queues/default/pause",
                                      data='{"reason": "night \\ud800 run"}',
                                      content_type="application/json",
                                      headers=basic("operator"))
    assert resp.status_code == 200
    assert web.svc.pauses.get("default", None) is not None
    (entry,) = web.audit("queue.pause")
    assert entry.outcome == "ok" and entry.reason == "night \ufffd run"


def test_a_nul_in_a_form_field_on_postgresql_is_audited_and_the_change_made(pg_web):
    c = pg_web.client("operator")
    resp = post(c, "/queues/default/pause", {"reason": "pay\x00day"})
    assert resp.status_code == 303
    assert pg_web.svc.pauses.get("default", None) is not None
    (entry,) = pg_web.audit("queue.pause")
    assert entry.outcome == "ok" and entry.reason == "pay\ufffdday"


def test_a_logged_in_users_refused_bad_input_leaves_an_audit_entry(web):
    resp = web.app.test_client().post("/api/queues/default/jobs/j1/extend",
                                      json={"epoch": "one", "seconds": 5},
                                      headers=basic("operator"))
    assert resp.status_code == 400
    (entry,) = web.audit("inflight.extend")
    assert entry.outcome == "refused" and entry.user == "operator"
    assert entry.detail["status"] == 400 and "epoch" in entry.detail["why"]
