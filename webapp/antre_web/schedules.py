"""Periodic schedules: next and last runs, the last run's outcome. Pause, resume and run now
are entries of the table of actions (``antre/actions/``; routes in ``table_routes``)."""

from __future__ import annotations

from flask import Blueprint

from . import services
from .common import render
from .security import requires

bp = Blueprint("schedules", __name__, url_prefix="/schedules")


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    return render("schedules.html", "_schedules.html", rows=svc.schedules.list(),
                  as_of=svc.clock())
