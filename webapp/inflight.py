"""In-flight leases: owner, deadline, time left, the owner's last heartbeat; extend a lease."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, request, url_for
from werkzeug.wrappers import Response

from . import actions, find, services
from .common import (
    answer,
    arg_int,
    check_queue,
    lease_ref,
    page_args,
    queue_arg,
    render,
    selected_ids,
)
from .security import requires

bp = Blueprint("inflight", __name__, url_prefix="/inflight")

EXPIRING_MS = 5_000


SORTS = ("deadline", "silent", "running")  # worst first: lease ending, no heartbeat, longest


def inflight_data(queue: str, offset: int, limit: int, sort: str = "deadline") -> dict[str, Any]:
    svc = services.get()
    if sort == "deadline":
        page = svc.reads.inflight(queue, offset, limit)
    else:
        page = find.finder().inflight_worst_first(queue, sort, offset, limit)
    owners = {}
    for wid in {r.worker_id for r in page.rows if r.worker_id}:
        owners[wid] = svc.registry.get(wid)
    return {"queue": queue, "page": page, "owners": owners, "as_of": page.as_of,
            "expiring_ms": EXPIRING_MS, "queues": svc.reads.queue_names(), "sort": sort,
            "sorts": SORTS}


@bp.get("/")
@requires("viewer")
def index() -> str:
    queue = queue_arg(busiest="inflight")
    sort = request.args.get("sort") or "deadline"
    if sort not in SORTS:
        abort(400, f"sort must be one of {', '.join(SORTS)}")
    return render("inflight.html", "_inflight.html",
                  **inflight_data(queue, *page_args(), sort=sort))


@bp.post("/<queue>/selected")
@requires("operator", "inflight.selected")
def selected(queue: str) -> str | Response:
    """Extend the leases of the ticked rows by ``seconds``, or cancel them (``op=cancel``, to
    ``to``): one audit entry per job."""
    check_queue(queue)
    op = request.form.get("op", "extend")
    if op not in ("extend", "cancel"):
        abort(400, "op must be 'extend' or 'cancel'")
    rows = [lease_ref(v) for v in selected_ids(actions.MAX_SELECTED)]
    seconds = arg_int("seconds", 0, 0, src=request.form)
    reason = request.form.get("reason")
    by_id = {job_id: epoch for epoch, job_id in rows}
    if op == "cancel":  # incident controls: one audit entry (job.cancel) per job
        to = request.form.get("to") or "dlq"
        result = actions.each_selected("asked to stop", list(by_id),
                                       lambda i: actions.cancel_job(queue, i, to, reason))
    else:
        result = actions.each_selected(
            "extended", list(by_id),
            lambda i: actions.extend(queue, i, by_id[i], seconds, reason))
    return answer(result, lambda r: render("_inflight.html", "_inflight.html", outcome=r,
                                           **inflight_data(queue, *page_args(src=request.form))),
                  url_for("inflight.index", queue=queue))


