"""Scheduled retries: next attempt, attempt/max, last error; run now."""

from __future__ import annotations

from flask import Blueprint, Response, flash, redirect, request, url_for

from . import actions, services
from .common import check_queue, page_args, queue_arg, render, safe_next
from .security import requires

bp = Blueprint("scheduled", __name__, url_prefix="/scheduled")


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    queue = queue_arg(busiest="scheduled")
    page = svc.reads.scheduled(queue, *page_args())
    return render("scheduled.html", "_scheduled.html", queue=queue, page=page,
                  as_of=page.as_of, queues=svc.reads.queue_names())


@bp.post("/<queue>/<job_id>/run-now")
@requires("operator", "scheduled.run_now")
def run_now(queue: str, job_id: str) -> Response:
    check_queue(queue)
    result = actions.run_now(queue, job_id, request.form.get("reason"))
    flash(result.message, "ok" if result.ok else "error")
    return redirect(safe_next(url_for("scheduled.index", queue=queue)), code=303)
