"""Audit log: filter, paginate, export as CSV and JSON."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from . import services
from .common import page_args, render
from .security import requires

bp = Blueprint("audit", __name__, url_prefix="/audit")


def _filters() -> tuple[str | None, str | None]:
    return (request.args.get("action") or None, request.args.get("user") or None)


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    action, user = _filters()
    offset, limit = page_args()
    rows = svc.audit.list(limit=limit, offset=offset, action=action, user=user)
    total = svc.audit.count(action=action, user=user)
    svc.outages.ok("database")
    return render("audit.html", "_audit.html", redis_read=False, rows=rows, total=total, offset=offset,
                  limit=limit, action=action or "", user=user or "",
                  actions=svc.audit.actions(), as_of=svc.clock())


@bp.get("/export.csv")
@requires("viewer")
def export_csv() -> Response:
    action, user = _filters()
    body = services.get().audit.export_csv(action=action, user=user)
    return Response(body, mimetype="text/csv",
                    headers={"Content-Disposition": "attachment; filename=antre-audit.csv"})


@bp.get("/export.json")
@requires("viewer")
def export_json() -> Response:
    action, user = _filters()
    resp = jsonify(services.get().audit.export_json(action=action, user=user))
    resp.headers["Content-Disposition"] = "attachment; filename=antre-audit.json"
    return resp
