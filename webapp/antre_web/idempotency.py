"""Idempotency lookup: a key's status, stored result, fence and timestamps; an abandoned
record (stuck in processing, no job left) says so, and an operator resolves it here (the
table of actions' ``idempotency.resolve``, routes in ``table_routes``)."""

from __future__ import annotations

from flask import Blueprint, request

from antre.observe.finder import Finder

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
    abandoned = (Finder(svc.redis, svc.clock, svc.idempotency).abandoned(key)
                 if record is not None and record.status == "processing" else None)
    return render("idempotency.html", "_idempotency.html", redis_read=False, key=key, record=record,
                  counts=counts, as_of=svc.clock(), abandoned=abandoned)


