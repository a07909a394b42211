"""Scheduled retries: next attempt, attempt/max, last error. Run now and delete (one job or
the ticked rows) are the table of actions' (``antre/actions/``, routes in ``table_routes``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from . import actions, services
from .common import page_args, queue_arg, render
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




def selection_partial(path: dict[str, Any], result: actions.Result) -> str:
    """The scheduled table after an action on its ticked rows (its page from the form)."""
    return _page(path["queue"], result, request.form)
