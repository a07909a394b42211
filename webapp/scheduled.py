"""Scheduled retries: next attempt, attempt/max, last error; run now."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, request, url_for
from werkzeug.wrappers import Response

from . import actions, services
from .common import answer, check_queue, page_args, queue_arg, render, selected_ids
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
def selected(queue: str) -> str | Response:
    """Run the ticked retries now, or delete them: one audit entry per job."""
    check_queue(queue)
    op = request.form.get("op", "run_now")
    if op not in ("run_now", "delete"):
        abort(400, "op must be 'run_now' or 'delete'")
    ids = selected_ids(actions.MAX_SELECTED)
    reason = request.form.get("reason")
    if op == "delete":  # incident controls: one audit entry (job.delete) per job
        result = actions.each_selected("deleted", ids,
                                       lambda i: actions.delete_job(queue, i, reason))
    else:
        result = actions.each_selected("moved to the ready list", ids,
                                       lambda i: actions.run_now(queue, i, reason))
    return answer(result, lambda r: _page(queue, r, request.form),
                  url_for("scheduled.index", queue=queue))


