"""Idempotency lookup: a key's status, stored result, fence and timestamps."""

from __future__ import annotations

from flask import Blueprint, request

from . import services
from .common import render
from .security import requires

bp = Blueprint("idempotency", __name__, url_prefix="/idempotency")


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    key = (request.args.get("key") or "").strip()[:500]
    record = svc.idempotency.lookup(key) if key else None
    svc.outages.ok("database")
    counts = svc.idempotency.counts()
    return render("idempotency.html", "_idempotency.html", redis_read=False, key=key, record=record,
                  counts=counts, as_of=svc.clock())
