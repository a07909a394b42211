"""The incident view (issue 25): what is wrong now, ranked, with evidence and the action that
usually helps; acknowledge or silence an incident (operator, with a reason, audited); per-queue
alert thresholds (admin, audited). The header's count (``incident_count``) opens it. Its data
is ``antre.observe.incidents.IncidentView``; the JSON is ``GET /api/incidents``."""

from __future__ import annotations

from dataclasses import asdict
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Flask, abort, flash, g, jsonify, redirect, request, url_for
from flask.typing import ResponseReturnValue

from antre.engine.keys import valid_name
from antre.observe.alerts import PER_QUEUE, AlertQuiet, AlertThresholds
from antre.observe.incidents import Incident, IncidentView, incident_view

from . import services
from .actions import Result, guarded
from .common import render
from .security import current_user, requires

bp = Blueprint("incident", __name__)

#: How long a silence may last, as the form offers it (label -> seconds).
SILENCES = {"15 min": 900, "1 hour": 3600, "4 hours": 14_400, "24 hours": 86_400}
MAX_ID = 300


def view() -> IncidentView:
    """This request's incident view (read once: the header's count and the page share it)."""
    found: IncidentView | None = g.get("antre_incidents")
    if found is None:
        svc = services.get()
        found = g.antre_incidents = incident_view(svc.redis, svc.clock)
    return found


def _thresholds() -> list[dict[str, Any]]:
    """Each queue's per-queue thresholds: the default and the admin's override."""
    svc = services.get()
    config = svc.antre.alert_config
    overrides = AlertThresholds(svc.redis).all()
    return [{"queue": q, "field": f, "default": getattr(config, f),
             "override": overrides.get((q, f), ""), "overridden": (q, f) in overrides}
            for q in svc.reads.queue_names() for f in PER_QUEUE]


@bp.get("/incident/")
@requires("viewer")
def index() -> str:
    iv = view()
    return render("incident.html", "_incident.html", iv=iv, as_of=iv.as_of, silences=SILENCES,
                  thresholds=_thresholds())


@bp.get("/api/incidents")
@requires("viewer")
def api_list() -> ResponseReturnValue:
    iv = view()
    return jsonify({"count": iv.count, "worst": iv.worst, "as_of": iv.as_of,
                    "open": [asdict(i) for i in iv.open],
                    "quiet": [asdict(i) for i in iv.quiet]})


def _find(incident_id: str) -> Incident | None:
    iv = view()
    return next((i for i in iv.open + iv.quiet if i.id == incident_id), None)


def _incident_id() -> str:
    value = (request.form.get("id") or "").strip()
    if not value or len(value) > MAX_ID or any(ord(c) < 0x20 for c in value):
        abort(400, "bad incident id")
    return value


def _why() -> str:
    return (request.form.get("reason") or "").strip()[:2000]


def _done(result: Result) -> ResponseReturnValue:
    flash(result.message, "ok" if result.ok else "error")
    return redirect(url_for("incident.index"), code=303)


def _user() -> str:
    user = current_user()
    return user.name if user else "(anonymous)"


def _quiet(action: str, incident_id: str, why: str, do: Callable[[Incident], Result]
           ) -> Result:
    def run() -> Result:
        if not why:
            return Result(False, "say why (the reason is required); nothing was changed", 400)
        inc = _find(incident_id)
        if inc is None:
            return Result(False, f"no open incident {incident_id!r} (it resolved?); nothing "
                                 "was changed", 404)
        return do(inc)
    return guarded(action, incident_id, why, run)


@bp.post("/incident/ack")
@requires("operator", "incident.ack")
def ack() -> ResponseReturnValue:
    incident_id, why = _incident_id(), _why()
    store = AlertQuiet(services.get().redis, services.get().clock)

    def do(inc: Incident) -> Result:
        store.ack(inc.id, inc.since, _user(), why)
        return Result(True, f"{inc.title} ({inc.queue}) acknowledged until it resolves")
    return _done(_quiet("incident.ack", incident_id, why, do))


@bp.post("/incident/silence")
@requires("operator", "incident.silence")
def silence() -> ResponseReturnValue:
    incident_id, why = _incident_id(), _why()
    label = request.form.get("for") or ""
    if label not in SILENCES:
        abort(400, f"silence for one of: {', '.join(SILENCES)}")
    store = AlertQuiet(services.get().redis, services.get().clock)

    def do(inc: Incident) -> Result:
        q = store.silence(inc.id, SILENCES[label], _user(), why)
        return Result(True, f"{inc.title} ({inc.queue}) silenced for {label}: its webhook "
                            "waits until then", 200, {"until_ms": q.until_ms})
    return _done(_quiet("incident.silence", incident_id, why, do))


@bp.post("/incident/unquiet")
@requires("operator", "incident.unquiet")
def unquiet() -> ResponseReturnValue:
    incident_id, why = _incident_id(), _why()
    store = AlertQuiet(services.get().redis, services.get().clock)

    def run() -> Result:
        if not store.clear(incident_id):
            return Result(False, f"{incident_id} was neither acknowledged nor silenced", 404)
        return Result(True, f"{incident_id} is open again")
    return _done(guarded("incident.unquiet", incident_id, why, run))


@bp.post("/incident/thresholds")
@requires("admin", "alerts.threshold")
def threshold() -> ResponseReturnValue:
    queue = request.form.get("queue") or ""
    field = request.form.get("field") or ""
    raw = (request.form.get("value") or "").strip()
    if not valid_name(queue) or queue not in services.get().reads.queue_names():
        abort(400, "no such queue")
    store = AlertThresholds(services.get().redis)

    def run() -> Result:
        try:
            value = store.set(queue, field, raw)
        except ValueError as exc:
            return Result(False, f"{exc}; nothing was changed", 400)
        said = "the default" if raw == "" else ("off" if value is None else f"{value:g}")
        return Result(True, f"alert threshold {field} of queue {queue} set to {said}; the "
                            "next alert check uses it", 200, {"field": field, "value": raw})
    return _done(guarded("alerts.threshold", f"{queue}/{field}", _why(), run))


def incident_count() -> IncidentView | None:
    """The header's count (None before login, or while Redis is unreachable)."""
    if current_user() is None:
        return None
    try:
        return view()
    except services.REDIS_ERRORS:
        return None


def detail_label(key: str) -> str:
    """A timeline detail's name as a reader says it: ``delay_ms`` is "delay" (the template
    shows an ``_ms`` value as a duration), ``ran_ms`` "ran", ``lock_key`` "lock key"."""
    if key.endswith("_ms") and len(key) > 3:
        key = key[:-3]
    return key.replace("_", " ")


def install_globals(app: Flask) -> None:
    app.jinja_env.globals["incident_count"] = incident_count
    app.jinja_env.filters["detail_label"] = detail_label
