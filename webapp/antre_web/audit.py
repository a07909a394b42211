"""Audit log: filter, paginate, export as CSV and JSON."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from . import services
from .common import WINDOWS_MS, audit_filter, page_args, render
from .security import requires

bp = Blueprint("audit", __name__, url_prefix="/audit")


def _filters() -> dict[str, Any]:
    return audit_filter(request.args, services.get().clock())


def _link_args() -> dict[str, Any]:
    """The filters as they were asked for (a window stays a window in export links)."""
    return {k: v for k in ("action", "user", "window", "since_ms", "until_ms", "target")
            if (v := request.args.get(k))}


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    flt = _filters()
    offset, limit = page_args()
    rows = svc.audit.list(limit=limit, offset=offset, **flt)
    total = svc.audit.count(**flt)
    svc.outages.ok("database")
    return render("audit.html", "_audit.html", redis_read=False, rows=rows, total=total, offset=offset,
                  limit=limit, action=flt["action"] or "", user=flt["user"] or "",
                  window=request.args.get("window", ""), windows=list(WINDOWS_MS),
                  link_args=_link_args(), actions=svc.audit.actions(), as_of=svc.clock())


@bp.get("/export.csv")
@requires("viewer")
def export_csv() -> Response:
    """Streamed: rows are read in batches and sent as they come."""
    body = services.get().audit.stream_csv(**_filters())
    return Response(body, mimetype="text/csv",
                    headers={"Content-Disposition": "attachment; filename=antre-audit.csv"})


@bp.get("/export.json")
@requires("viewer")
def export_json() -> Response:
    """Streamed, as the CSV export."""
    body = services.get().audit.stream_json(**_filters())
    return Response(body, mimetype="application/json",
                    headers={"Content-Disposition": "attachment; filename=antre-audit.json"})
