"""Dead-letter queue: browse and filter, error groups, job detail, replay/discard one, paced
bulk replay of a filtered set (tracked task), discard a filtered set (typed confirmation)."""

from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, abort, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from antre.control.retention import Retention

from . import actions, find, services
from .common import (
    WINDOWS_MS,
    answer,
    selected_ids,
    arg_int,
    check_queue,
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


@bp.post("/<queue>/<job_id>/replay")
@requires("operator", "dlq.replay")
def replay(queue: str, job_id: str) -> Response:
    _flash(actions.replay_one(check_queue(queue), job_id, request.form.get("reason")))
    return _back(queue)


@bp.post("/<queue>/<job_id>/discard")
@requires("operator", "dlq.discard")
def discard(queue: str, job_id: str) -> Response:
    _flash(actions.discard_one(check_queue(queue), job_id, request.form.get("reason")))
    return _back(queue)


@bp.post("/<queue>/selected")
@requires("operator", "dlq.selected")
def selected(queue: str) -> str | Response:
    """Replay or discard the ticked rows: one audit entry per job, one answer for all."""
    check_queue(queue)
    op = request.form.get("op")
    if op not in ("replay", "discard"):
        abort(400, "op must be 'replay' or 'discard'")
    ids = selected_ids(actions.MAX_SELECTED)
    reason = request.form.get("reason")
    if op == "replay":
        result = actions.each_selected("replayed", ids,
                                       lambda i: actions.replay_one(queue, i, reason))
    else:
        result = actions.each_selected("discarded", ids,
                                       lambda i: actions.discard_one(queue, i, reason))
    return answer(result, lambda r: render("_dlq.html", "_dlq.html", outcome=r,
                                           **dlq_data(queue, request.form)),
                  safe_next(url_for("dlq.index", queue=queue)))


@bp.post("/<queue>/bulk")
@requires("operator", "dlq.bulk_replay.start")
def bulk_start(queue: str) -> Response:
    svc = services.get()
    flt = dead_filter(request.form, svc.clock())
    try:
        rate = float(request.form.get("rate") or 0)
    except ValueError:
        abort(400, "rate must be a number of jobs per second")
    if not math.isfinite(rate):
        abort(400, "rate must be a finite number of jobs per second")
    maximum = arg_int("maximum", 0, 0, src=request.form)
    _flash(actions.bulk_start(check_queue(queue), flt, rate, maximum, request.form.get("reason")))
    return _back(queue)


def _bulk_change(queue: str, task_id: str, op: str) -> str | Response:
    result = actions.bulk_change(check_queue(queue), task_id, op, request.form.get("reason"))
    svc = services.get()
    return answer(result, lambda r: render("_bulk.html", "_bulk.html", queue=queue, outcome=r,
                                           tasks=svc.bulk.list(queue), as_of=svc.clock()),
                  safe_next(url_for("dlq.index", queue=queue)))


@bp.post("/<queue>/bulk/<task_id>/pause")
@requires("operator", "dlq.bulk_replay.pause")
def bulk_pause(queue: str, task_id: str) -> str | Response:
    return _bulk_change(queue, task_id, "pause")


@bp.post("/<queue>/bulk/<task_id>/resume")
@requires("operator", "dlq.bulk_replay.resume")
def bulk_resume(queue: str, task_id: str) -> str | Response:
    return _bulk_change(queue, task_id, "resume")


@bp.post("/<queue>/bulk/<task_id>/cancel")
@requires("operator", "dlq.bulk_replay.cancel")
def bulk_cancel(queue: str, task_id: str) -> str | Response:
    return _bulk_change(queue, task_id, "cancel")


@bp.post("/<queue>/discard-filtered")
@requires("operator", "dlq.discard_filtered")
def discard_filtered(queue: str) -> Response:
    svc = services.get()
    flt = dead_filter(request.form, svc.clock())
    maximum = arg_int("maximum", 1_000_000, 0, src=request.form)
    _flash(actions.discard_filtered(check_queue(queue), flt, maximum,
                                    request.form.get("confirm", ""), request.form.get("reason")))
    return _back(queue)
