"""Workers: heartbeat age, host/pid, processes/threads, current jobs, counters, restarts."""

from __future__ import annotations

from flask import Blueprint

from antre.observe.registry import STALE_AFTER_MS

from . import services
from .common import render
from .security import requires

bp = Blueprint("workers", __name__, url_prefix="/workers")


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    workers = svc.registry.list()
    now = svc.clock()
    return render("workers.html", "_workers.html", workers=workers, as_of=now,
                  stale_after_ms=STALE_AFTER_MS,
                  live=sum(1 for w in workers if w.alive(now)))
