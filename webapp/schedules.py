"""Periodic schedules: next and last runs, the last run's outcome; pause, resume, run now."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from . import actions, services
from .common import render, safe_next
from .security import requires

bp = Blueprint("schedules", __name__, url_prefix="/schedules")


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    return render("schedules.html", "_schedules.html", rows=svc.schedules.list(),
                  as_of=svc.clock())


def _back(result: actions.Result) -> Response:
    flash(result.message, "ok" if result.ok else "error")
    return redirect(safe_next(url_for("schedules.index")), code=303)


@bp.post("/<name>/pause")
@requires("operator", "schedules.pause")
def pause(name: str) -> Response:
    return _back(actions.schedule_pause(name, True, request.form.get("reason")))


@bp.post("/<name>/resume")
@requires("operator", "schedules.resume")
def resume(name: str) -> Response:
    return _back(actions.schedule_pause(name, False, request.form.get("reason")))


@bp.post("/<name>/run-now")
@requires("operator", "schedules.run_now")
def run_now(name: str) -> Response:
    return _back(actions.schedule_run_now(name, request.form.get("reason")))
