"""JSON API for scripts: every read view and every action of the dashboard.

Authentication: the session cookie (then POSTs need the ``X-CSRF-Token`` header, as in the
browser), or HTTP Basic with a dashboard user's name and password. Every POST takes a JSON
body (``Content-Type: application/json``; anything else is 415) and is refused when the browser
says it comes from another site (``Origin`` / ``Sec-Fetch-Site``). Roles as in the
dashboard. ``GET /api/openapi.json`` describes every route below; it is generated from the URL
map, so a route cannot be left out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, abort, current_app, jsonify, request

from antre.engine.keys import valid_name
from antre.flows import FlowReader
from antre.observe.finder import Finder
from antre.stores.sql import ROLES

from .sealed import shown, shown_log
from . import actions, services
from .common import arg_int, audit_filter, check_queue, dead_filter, job_or_404, page_args
from .control import dead_tally, purge_filter, purge_tally
from .overview import overview_data
from .security import requires

bp = Blueprint("api", __name__, url_prefix="/api")

# OpenAPI details per endpoint: query parameters and JSON body properties.
DOCS: dict[str, dict[str, Any]] = {}


def doc(query: dict[str, str] | None = None, body: dict[str, str] | None = None,
        required: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        DOCS[f"api.{fn.__name__}"] = {"query": query or {}, "body": body or {},
                                      "required": required}
        return fn
    return deco


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "string[]": (list,)}


def _body() -> dict[str, Any]:
    """The request's JSON object, checked against the fields this endpoint documents in the
    OpenAPI document: a field of the wrong type is a 400 that names it. (A form body never gets
    here: ``security`` refuses API writes that are not JSON.)"""
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        abort(400, "the body must be a JSON object")
    spec = DOCS.get(request.endpoint or "", {})
    for name in spec.get("required", ()):
        if data.get(name) in (None, ""):
            abort(400, f"'{name}' is required")
    for name, kind in spec.get("body", {}).items():
        value = data.get(name)
        if value is None:
            continue
        ok = isinstance(value, JSON_TYPES.get(kind, (object,)))
        if kind in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            abort(400, f"'{name}' must be a JSON {kind}, not {type(value).__name__}")
    return data


def _answer(result: actions.Result) -> Response:
    resp = jsonify(result.to_json())
    resp.status_code = result.status
    return resp


PAGE_Q = {"offset": "integer", "limit": "integer"}
FILTER_Q = {"type": "string", "group": "string", "window": "string", "since_ms": "integer",
            "until_ms": "integer"}


# -- reads ------------------------------------------------------------------------------------
@bp.get("/overview")
@requires("viewer")
def overview() -> Response:
    """Depth per queue, rates per minute, flow control, lock conflicts (last 5 minutes, hour,
    ever; the most contended keys), live workers."""
    return jsonify(_plain(overview_data()))


@bp.get("/queues")
@requires("viewer")
def queues() -> Response:
    """Names of the known queues."""
    return jsonify({"queues": services.get().reads.queue_names()})


@bp.get("/queues/<queue>/inflight")
@requires("viewer")
@doc(query=PAGE_Q)
def inflight(queue: str) -> Response:
    """In-flight jobs, soonest lease deadline first."""
    svc = services.get()
    return jsonify(_plain(svc.reads.inflight(check_queue(queue), *page_args())))


@bp.get("/queues/<queue>/scheduled")
@requires("viewer")
@doc(query=PAGE_Q)
def scheduled(queue: str) -> Response:
    """Scheduled retries, next attempt first."""
    svc = services.get()
    return jsonify(_plain(svc.reads.scheduled(check_queue(queue), *page_args())))


@bp.get("/queues/<queue>/dead")
@requires("viewer")
@doc(query={**PAGE_Q, **FILTER_Q})
def dead(queue: str) -> Response:
    """Dead-letter queue, newest first, filtered by type / error group / time window."""
    svc = services.get()
    flt = dead_filter(request.args, svc.clock())
    page = svc.reads.dead(check_queue(queue), flt, *page_args())
    return jsonify({**_plain(page), "filter": _plain(flt)})


@bp.get("/queues/<queue>/dead/count")
@requires("viewer")
@doc(query={**FILTER_Q, "count_cursor": "string"})
def dead_count(queue: str) -> Response:
    """Dry run: how many dead jobs match the filter, within a budget (``exact`` false with
    both a type and a group until the group is walked: pass ``cursor`` back as
    ``count_cursor``)."""
    svc = services.get()
    flt = dead_filter(request.args, svc.clock())
    tally = dead_tally(check_queue(queue), flt, request.args)
    return jsonify({"count": tally.matched, "exact": tally.exact, "looked": tally.looked,
                    "cursor": None if tally.exact else tally.token(), "filter": _plain(flt),
                    "as_of": svc.clock()})


@bp.get("/queues/<queue>/dead/groups")
@requires("viewer")
def error_groups(queue: str) -> Response:
    """Error groups: normalised signature, count in the DLQ, first and last seen."""
    svc = services.get()
    return jsonify({"groups": _plain(svc.reads.error_groups(check_queue(queue))),
                    "as_of": svc.clock()})


@bp.get("/queues/<queue>/jobs/<job_id>")
@requires("viewer")
def job(queue: str, job_id: str) -> Response:
    """One job with payload, errors of every attempt, its idempotency record and its own log
    (``log``: what its handler logged, oldest first: at_ms, level, text, attempt, logger)."""
    svc = services.get()
    found = job_or_404(queue, job_id)
    record = svc.idempotency.lookup(found.idempotency_key) if found.idempotency_key else None
    turn = svc.reads.turn(queue, found)
    links = FlowReader(svc.redis).links(queue, found.id)  # its flow, parents, children
    own_log, log_hidden = shown_log(found, svc.reads.job_log(queue, found.id))
    return jsonify({"job": _plain(shown(found)), "idempotency": record.to_dict() if record else None,
                    "log": [_plain(line) for line in own_log], "log_hidden": log_hidden or None,
                    "flow": _plain(links) if links else None,
                    "turn": None if turn is None else {**_plain(turn), "text": turn.describe()},
                    "idempotent_handler": svc.idempotent(found.type), "as_of": svc.clock()})


@bp.get("/queues/<queue>/replays")
@requires("viewer")
def replays(queue: str) -> Response:
    """Bulk replay tasks of a queue, newest first."""
    return jsonify({"tasks": [t.to_dict() for t in services.get().bulk.list(check_queue(queue))]})


@bp.get("/queues/<queue>/replays/<task_id>")
@requires("viewer")
def replay_task(queue: str, task_id: str) -> Response:
    """One bulk replay task with its progress."""
    task = services.get().bulk.get(check_queue(queue), task_id)
    if task is None:
        abort(404, f"no bulk replay {task_id} in {queue}")
    return jsonify(task.to_dict())


@bp.get("/locks")
@requires("viewer")
def locks() -> Response:
    """Held locks (holder token, TTL, fencing token) and contention by key."""
    svc = services.get()
    now = svc.clock()
    return jsonify({"held": _plain(svc.locks.held()),
                    "top_conflicts": [{"key": k, "conflicts": n}
                                      for k, n in svc.locks.top_conflicts(20)],
                    "contention": _plain(svc.locks.contention(20)),
                    "conflicts_1m": svc.locks.conflicts_since(now - 60_000),
                    "conflicts_5m": svc.locks.conflicts_since(now - 300_000),
                    "conflicts_1h": svc.locks.conflicts_since(now - 3_600_000), "as_of": now})


@bp.get("/workers")
@requires("viewer")
def workers() -> Response:
    """Workers with heartbeat, counters and whether they are alive."""
    svc = services.get()
    now = svc.clock()
    return jsonify({"workers": [{**_plain(w), "alive": w.alive(now),
                                 "heartbeat_age_ms": now - w.heartbeat_at}
                                for w in svc.registry.list()], "as_of": now})


@bp.get("/idempotency")
@requires("viewer")
@doc(query={"key": "string"}, required=("key",))
def idempotency() -> Response:
    """An idempotency key's status, result, fence and timestamps."""
    key = request.args.get("key") or ""
    if not key:
        abort(400, "key is required")
    svc = services.get()
    record = svc.idempotency.lookup(key)
    if record is None:
        abort(404, f"no idempotency record for {key!r}")
    gone = Finder(svc.redis, svc.clock, svc.idempotency).abandoned(key)
    return jsonify({**record.to_dict(), "abandoned": None if gone is None else
                    {"since_ms": gone.since_ms, "message": gone.message}})


@bp.get("/audit")
@requires("viewer")
@doc(query={**PAGE_Q, "action": "string", "user": "string", "window": "string",
             "since_ms": "integer", "until_ms": "integer"})
def audit_log() -> Response:
    """Audit log entries, newest first; ``window`` (15m, 1h, 6h, 24h, 7d) or ``since_ms`` /
    ``until_ms`` narrow them in time."""
    svc = services.get()
    flt = audit_filter(request.args, svc.clock())
    rows = svc.audit.list(limit=arg_int("limit", 100, 1, 1000), offset=arg_int("offset", 0), **flt)
    return jsonify({"entries": [r.to_dict() for r in rows], "total": svc.audit.count(**flt)})


@bp.get("/users")
@requires("admin")
def users() -> Response:
    """Dashboard users (admin)."""
    return jsonify({"users": _plain(services.get().users.list())})


# -- actions ----------------------------------------------------------------------------------
REASON = {"reason": "string"}


# -- fair-share groups ----------------------------------------------------------------------------
# (pause, resume and slots are entries of the table of actions: antre/actions/)
def _group_name(name: str) -> str:
    if not valid_name(name):
        abort(400, "bad group name: use 1-100 of A-Z a-z 0-9 _ . : - (e.g. tenant:7)")
    return name


@bp.get("/queues/<queue>/groups")
@requires("viewer")
@doc(query={"q": "string"})
def groups(queue: str) -> Response:
    """The busiest groups by waiting jobs and by slots held, the paused ones, the counts; with
    ``q`` the group of that name."""
    svc = services.get()
    queue = check_queue(queue)
    view = svc.group_reads.view(queue)
    out: dict[str, Any] = {**_plain(view)}
    name = (request.args.get("q") or "").strip()
    if name:
        found = svc.group_reads.find(queue, _group_name(name))
        out["found"] = _plain(found) if found else None
    return jsonify(out)


@bp.get("/queues/<queue>/groups/<group>")
@requires("viewer")
@doc(query=PAGE_Q)
def group(queue: str, group: str) -> Response:
    """One group: its counts, pause, operator's limit, why it is held, its jobs in order."""
    svc = services.get()
    queue, group = check_queue(queue), _group_name(group)
    row = svc.group_reads.rows(queue, [group])[0]
    held, line = svc.group_reads.jobs(queue, group, *page_args())
    return jsonify({"group": _plain(row), "held_why": row.held_why(svc.clock()),
                    "holding": [j.id for j in held], "waiting": [j.id for j in line],
                    "as_of": svc.clock()})


# -- selections: the dashboard's action bar; one audit entry per job ---------------------------


def _ids() -> list[str]:
    """``ids`` of the body: a JSON list of strings, or repeated form fields."""
    body = _body()
    ids = body.get("ids") if request.is_json else request.form.getlist("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        abort(400, "'ids' must be a non-empty list of job ids")
    if len(ids) > actions.MAX_SELECTED:
        abort(400, f"{len(ids)} ids; at most {actions.MAX_SELECTED} at a time")
    return list(dict.fromkeys(ids))


# -- periodic schedules ---------------------------------------------------------------------
@bp.get("/schedules")
@requires("viewer")
def schedules() -> Response:
    """Periodic schedules: trigger, next and last runs, the last run's outcome, paused."""
    return jsonify({"schedules": _plain(services.get().schedules.list())})


BULK_BODY = {"type": "string", "group": "string", "window": "string", "since_ms": "integer",
             "until_ms": "integer", "maximum": "integer", **REASON}


# -- incident controls: pause / resume, delete, purge ---------------------------------------
PAUSE_BODY = {"type": "string", **REASON}
PURGE_Q = {"source": "string", "type": "string", "group": "string", "older_than_s": "number",
           "field": "string", "value": "string"}


def _job_type(body: dict[str, Any]) -> str | None:
    value = str(body.get("type") or "").strip()
    return value or None


@bp.get("/pauses")
@requires("viewer")
def pauses() -> Response:
    """Every paused queue and job type: who paused it, when and why."""
    svc = services.get()
    return jsonify({"paused": _plain(svc.pauses.all()), "as_of": svc.clock()})


@bp.get("/queues/<queue>/purge/count")
@requires("viewer")
@doc(query={**PURGE_Q, "count_cursor": "string"})
def purge_count(queue: str) -> Response:
    """Dry run: how many jobs of ``source`` (ready, scheduled, dead) match the filter, within
    a budget. ``exact`` false: ``count`` is "at least"; pass ``cursor`` back as
    ``count_cursor`` to go on counting (null once the walk is over)."""
    svc = services.get()
    flt = purge_filter(request.args)
    tally = purge_tally(check_queue(queue), flt, request.args)
    return jsonify({"count": tally.matched, "exact": tally.exact, "looked": tally.looked,
                    "cursor": None if tally.exact else tally.token(), "filter": flt.to_dict(),
                    "as_of": svc.clock()})


@bp.get("/queues/<queue>/purges")
@requires("viewer")
def purges(queue: str) -> Response:
    """Purge tasks of a queue, newest first, with their progress."""
    tasks = services.get().bulk.list(check_queue(queue), kind="purge")
    return jsonify({"tasks": [t.to_dict() for t in tasks]})


# -- the OpenAPI document ---------------------------------------------------------------------
def _schema(kind: str) -> dict[str, Any]:
    if kind.endswith("[]"):
        return {"type": "array", "items": {"type": kind[:-2]}}
    return {"type": kind}


def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rule in current_app.url_map.iter_rules():
        if not rule.rule.startswith("/api/") or rule.endpoint == "api.openapi":
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        view = current_app.view_functions[rule.endpoint]
        extra = DOCS.get(rule.endpoint, {})
        role = getattr(view, "required_role", "viewer")
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            op: dict[str, Any] = {
                "operationId": rule.endpoint.split(".", 1)[1],
                "summary": (view.__doc__ or "").strip().splitlines()[0] if view.__doc__ else "",
                "description": f"Needs the role '{role}' (roles: {', '.join(ROLES)}).",
                "parameters": [{"name": a, "in": "path", "required": True,
                                "schema": _schema("string")} for a in sorted(rule.arguments)],
                "responses": {"200": {"description": "OK",
                                      "content": {"application/json": {"schema": {"type": "object"}}}},
                              "401": {"description": "not logged in"},
                              "403": {"description": f"role below '{role}'"},
                              "503": {"description": "Redis or the database is unreachable"}},
            }
            req = [n for n in extra.get("required", ()) if n in extra.get("query", {})]
            op["parameters"] += [{"name": n, "in": "query", "required": n in req,
                                  "schema": _schema(t)} for n, t in extra.get("query", {}).items()]
            if method == "POST":
                op["requestBody"] = {"required": bool(extra.get("body")), "content": {
                    "application/json": {"schema": {
                        "type": "object",
                        "properties": {n: _schema(t) for n, t in extra.get("body", {}).items()},
                        "required": [n for n in extra.get("required", ())
                                     if n in extra.get("body", {})]}}}}
                op["responses"]["400"] = {"description": "bad input or missing CSRF token"}
                op["responses"]["409"] = {"description": "the state changed; nothing was changed"}
            paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "Antre dashboard API", "version": "1",
                 "description": (__doc__ or "").strip()},
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"},
                                           "session": {"type": "apiKey", "in": "cookie",
                                                       "name": current_app.config.get(
                                                           "SESSION_COOKIE_NAME", "session")}}},
        "security": [{"basic": []}, {"session": []}],
        "paths": dict(sorted(paths.items())),
    }


@bp.get("/openapi.json")
@requires("viewer")
def openapi() -> Response:
    """This document."""
    return jsonify(openapi_document())
