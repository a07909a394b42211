"""Groups: a queue's fair-share groups, the busiest by waiting jobs and by slots
held, the ones held (paused, at a limit, held by an operator) and why, search by name, one
group's jobs in order. Pausing, resuming and overriding a group's slots are entries of the
table of actions (``antre/actions/``: group.pause, group.resume, group.slots, group.clear;
routes in ``table_routes``)."""

from __future__ import annotations

from flask import Blueprint, abort, request

from antre.observe.drain import DrainModel
from antre.engine.keys import valid_name

from . import services
from .common import check_queue, page_args, queue_arg, render
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
    drains = DrainModel(svc.redis, svc.clock).groups(queue, view.by_waiting + view.by_slots)
    return render("groups.html", "_groups.html", queue=queue, view=view, search=search,
                  found=found, searched=searched, as_of=view.as_of, drains=drains,
                  queues=svc.reads.queue_names(), limits=svc.gates.limits(queue))


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
