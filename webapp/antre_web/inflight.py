"""In-flight leases: owner, deadline, time left, the owner's last heartbeat; extend a lease."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, request

from . import actions, find, services
from .common import page_args, queue_arg, render
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




def selection_partial(path: dict[str, Any], result: actions.Result) -> str:
    """The in-flight table after an action on its ticked rows (its page from the form)."""
    return render("_inflight.html", "_inflight.html", outcome=result,
                  **inflight_data(path["queue"], *page_args(src=request.form)))
