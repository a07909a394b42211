"""Dead-letter queue: browse and filter, error groups, job detail, replay/discard one, paced
bulk replay of a filtered set (tracked task), discard a filtered set (typed confirmation)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from antre.maintenance.retention import Retention

from . import actions, find, services
from .common import (
    WINDOWS_MS,
    dead_filter,
    filter_args,
    is_htmx,
    page_args,
    queue_arg,
    render,
    safe_next,
)
from .control import dead_tally
from .security import requires

bp = Blueprint("dlq", __name__, url_prefix="/dlq")


def dlq_data(queue: str, src: Any = None) -> dict[str, Any]:
    """The page's data; ``src``: where the filter and page come from (the query string, or
    the form of an action on selected rows, which carries them)."""
    svc = services.get()
    now = svc.clock()
    src = request.args if src is None else src
    flt = dead_filter(src, now)
    window = src.get("window") or ""
    offset, limit = page_args(src=src)
    page = svc.reads.dead(queue, flt, offset, limit)
    tally = None if is_htmx() else dead_tally(queue, flt, src)  # a poll never counts
    return {"queue": queue, "flt": flt, "window": window if window in WINDOWS_MS else "",
            "windows": list(WINDOWS_MS), "page": page, "as_of": page.as_of,
            "fargs": filter_args(flt, window), "groups": svc.reads.error_groups(queue),
            "filter_name": flt.describe(svc.reads.group_signature(queue, flt.group)),
            "types": svc.reads.dead_types(queue), "dry_run": tally.matched if tally else 0,
            "tally": tally,
            "queues": svc.reads.queue_names(), "tasks": svc.bulk.list(queue),
            "not_idempotent": sorted(n for n, s in svc.antre.handlers.items()
                                     if not s.idempotent),
            "retention": Retention(svc.redis, clock=svc.clock,
                                   scripts=svc.antre.scripts).info(queue)}


@bp.get("/")
@requires("viewer")
def index() -> str:
    return render("dlq.html", "_dlq.html", **dlq_data(queue_arg(busiest="dead")))


@bp.get("/tasks")
@requires("viewer")
def tasks() -> str:
    svc = services.get()
    queue = queue_arg(busiest="dead")
    return render("_bulk.html", "_bulk.html", queue=queue, tasks=svc.bulk.list(queue),
                  as_of=svc.clock())


@bp.get("/<queue>/<job_id>")
@requires("viewer")
def job(queue: str, job_id: str) -> str:
    return find.job_page(queue, job_id)  # the job page with its timeline


def _back(queue: str) -> Response:
    return redirect(safe_next(url_for("dlq.index", queue=queue)), code=303)


def _flash(result: actions.Result) -> None:
    flash(result.message, "ok" if result.ok else "error")


def selection_partial(path: dict[str, Any], result: actions.Result) -> str:
    """The DLQ table after an action on its ticked rows (its filter and page from the form)."""
    return render("_dlq.html", "_dlq.html", outcome=result, **dlq_data(path["queue"],
                                                                        request.form))


def bulk_partial(path: dict[str, Any], result: actions.Result) -> str:
    """The bulk tasks' piece of the DLQ page with ``result`` shown in place (htmx)."""
    svc = services.get()
    queue = path["queue"]
    return render("_bulk.html", "_bulk.html", queue=queue, outcome=result,
                  tasks=svc.bulk.list(queue), as_of=svc.clock())
