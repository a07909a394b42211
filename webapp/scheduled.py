"""Scheduled retries: next attempt, attempt/max, last error; run now."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, abort, flash, redirect, request, url_for

from . import actions, services
from .common import answer, check_queue, page_args, queue_arg, render, safe_next, selected_ids
from .security import requires

bp = Blueprint("scheduled", __name__, url_prefix="/scheduled")


@bp.get("/")
@requires("viewer")
def index() -> str:
    return _page(queue_arg(busiest="scheduled"))


def _page(queue: str, outcome: actions.Result | None = None, src: Any = None) -> str:
    svc = services.get()
    page = svc.reads.scheduled(queue, *page_args(src=src))
    return render("scheduled.html", "_scheduled.html", queue=queue, page=page, outcome=outcome,
                  as_of=page.as_of, queues=svc.reads.queue_names())


@bp.post("/<queue>/selected")
@requires("operator", "scheduled.selected")
def selected(queue: str) -> Any:
    """Run the ticked retries now: one audit entry per job."""
    check_queue(queue)
    if request.form.get("op", "run_now") != "run_now":
        abort(400, "op must be 'run_now'")
    ids = selected_ids(actions.MAX_SELECTED)
    reason = request.form.get("reason")
    result = actions.each_selected("moved to the ready list", ids,
                                   lambda i: actions.run_now(queue, i, reason))
    return answer(result, lambda r: _page(queue, r, request.form),
                  url_for("scheduled.index", queue=queue))


@bp.post("/<queue>/<job_id>/run-now")
@requires("operator", "scheduled.run_now")
def run_now(queue: str, job_id: str) -> Response:
    check_queue(queue)
    result = actions.run_now(queue, job_id, request.form.get("reason"))
    flash(result.message, "ok" if result.ok else "error")
    return redirect(safe_next(url_for("scheduled.index", queue=queue)), code=303)
