"""Groups (issue 23): a queue's fair-share groups, the busiest by waiting jobs and by slots
held, the ones held (paused, at a limit, held by an operator) and why, search by name, one
group's jobs in order; pause / resume a group and override its slots (operators, audited)."""

from __future__ import annotations

from flask import Blueprint, abort, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from antre.engine.keys import valid_name

from . import actions, services
from .common import check_queue, page_args, queue_arg, render, safe_next
from .security import requires

bp = Blueprint("groups", __name__, url_prefix="/groups")


def _group(name: str) -> str:
    if not valid_name(name):
        abort(400, "bad group name: use 1-100 of A-Z a-z 0-9 _ . : - (e.g. tenant:7)")
    return name


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    queue = queue_arg()
    search = (request.args.get("q") or "").strip()
    found, searched = None, False
    if search:
        searched = True
        found = svc.group_reads.find(queue, search) if valid_name(search) else None
    view = svc.group_reads.view(queue)
    return render("groups.html", "_groups.html", queue=queue, view=view, search=search,
                  found=found, searched=searched, as_of=view.as_of,
                  queues=svc.reads.queue_names())


@bp.get("/<queue>/<group>")
@requires("viewer")
def group(queue: str, group: str) -> str:
    svc = services.get()
    check_queue(queue)
    offset, limit = page_args()
    row = svc.group_reads.rows(queue, [_group(group)])[0]
    held, line = svc.group_reads.jobs(queue, group, offset, limit)
    return render("group.html", "_group.html", queue=queue, row=row, held=held, line=line,
                  offset=offset, limit=limit, as_of=svc.clock())


def _back(queue: str, group: str) -> Response:
    return redirect(safe_next(url_for("groups.group", queue=queue, group=group)), code=303)


def _flash(result: actions.Result) -> None:
    flash(result.message, "ok" if result.ok else "error")


@bp.post("/<queue>/<group>/pause")
@requires("operator", "group.pause")
def pause(queue: str, group: str) -> Response:
    _flash(actions.group_pause(check_queue(queue), _group(group), True,
                               request.form.get("reason")))
    return _back(queue, group)


@bp.post("/<queue>/<group>/resume")
@requires("operator", "group.resume")
def resume(queue: str, group: str) -> Response:
    _flash(actions.group_pause(check_queue(queue), _group(group), False,
                               request.form.get("reason")))
    return _back(queue, group)


@bp.post("/<queue>/<group>/slots")
@requires("operator", "group.slots")
def slots(queue: str, group: str) -> Response:
    clear = request.form.get("clear") == "1"
    _flash(actions.group_slots(check_queue(queue), _group(group),
                               None if clear else request.form.get("slots", ""),
                               request.form.get("reason"), request.form.get("revert_after_s")))
    return _back(queue, group)
