"""The incident view: what is wrong now, ranked, with evidence and the action that
usually helps. The header's count (``incident_count``) opens it. Its data is
``antre.observe.incidents.IncidentView``; the JSON is ``GET /api/incidents``. Its changes,
acknowledge / silence / reopen (operator) and per-queue alert thresholds (admin), are entries of
the table of actions (``antre/actions/``: ``incident.*``, ``alerts.threshold``), which makes
their form routes, API routes and ``antre incident|alerts`` commands."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask import Blueprint, Flask, abort, g, jsonify, request
from flask.typing import ResponseReturnValue

from antre.actions import SILENCES
from antre.observe.alerts import PER_QUEUE, AlertThresholds
from antre.observe.changes import ChangeLog
from antre.observe.incidents import IncidentView, incident_view

from . import services
from .common import render
from .security import current_user, requires

bp = Blueprint("incident", __name__)
HOUR_MS = 3_600_000
RECENT_SHOWN = 50  # of the last hour's changes, newest first (all of them: GET /api/changes)


def view(with_changes: bool = False) -> IncidentView:
    """This request's incident view (read once: the header's count and the page share it);
    ``with_changes``: with what changed before each incident (the page and its API only)."""
    found: IncidentView | None = g.get("antre_incidents")
    if found is None or with_changes and not g.get("antre_incident_changes"):
        svc = services.get()
        found = g.antre_incidents = incident_view(svc.redis, svc.clock, svc.audit,
                                                  with_changes=with_changes)
        g.antre_incident_changes = with_changes
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
    iv = view(with_changes=True)
    svc = services.get()
    recent = ChangeLog(svc.redis, svc.clock, svc.audit).between(iv.as_of - HOUR_MS, iv.as_of)
    return render("incident.html", "_incident.html", iv=iv, as_of=iv.as_of, silences=SILENCES,
                  thresholds=_thresholds(), recent=recent[::-1][:RECENT_SHOWN])


@bp.get("/api/incidents")
@requires("viewer")
def api_list() -> ResponseReturnValue:
    """What is wrong now: open incidents ranked worst first, and the quiet ones; each with
    ``changes``, what changed in the 15 minutes before its onset, ranked by what it touched."""
    iv = view(with_changes=True)
    return jsonify({"count": iv.count, "worst": iv.worst, "as_of": iv.as_of,
                    "open": [asdict(i) for i in iv.open],
                    "quiet": [asdict(i) for i in iv.quiet]})


@bp.get("/api/changes")
@requires("viewer")
def api_changes() -> ResponseReturnValue:
    """What changed (deploys, worker starts, limit and group overrides, pauses, operators'
    actions), oldest first, from ``since_ms`` (default: an hour ago) to ``until_ms`` (now)."""
    svc = services.get()
    now = svc.clock()
    since, until = _ms_arg("since_ms", now - HOUR_MS), _ms_arg("until_ms", now)
    changes = ChangeLog(svc.redis, svc.clock, svc.audit).between(since, until)
    return jsonify({"since_ms": since, "until_ms": until, "as_of": now,
                    "changes": [asdict(c) for c in changes]})


def _ms_arg(name: str, default: int) -> int:
    raw = (request.args.get(name) or "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        abort(400, f"{name} must be a time in ms since the epoch, not {raw[:40]!r}")


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
