"""Flows: a queue's chains, groups, chords and batches by state (running, waiting,
failed, succeeded, cancelled) with their progress, search by flow id, and one flow's jobs laid
out by depth (``antre.flows.layout``), each linking to its job page. Replaying a flow's dead
members and cancelling a flow are entries of the table of actions (``antre/actions/``; routes
in ``table_routes``). The read model is ``antre.flows.FlowReader``; reads are bounded (a page
of one state's index, a page of one flow's jobs)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, redirect, request, url_for

from antre.actions.table import by_name
from antre.engine.keys import valid_job_id
from antre.flows import FLOW_STATES, FlowReader
from antre.flows.layout import levels
from antre.engine import states

from . import services
from .common import arg_int, check_queue, page_args, queue_arg, render
from .security import requires

bp = Blueprint("flows", __name__, url_prefix="/flows")
TREE_LIMIT = 200  # jobs of one flow per page (at most 1000: FlowReader's bound)
CANCEL_ENTRY = by_name("flow.cancel")  # its form route, from the table of actions


def reader() -> FlowReader:
    return FlowReader(services.get().redis)


def state_arg() -> str:
    state = request.args.get("state") or "running"
    if state not in FLOW_STATES:
        abort(400, f"state must be one of {', '.join(FLOW_STATES)}")
    return state


def flow_id_of(text: str) -> str:
    if not valid_job_id(text):  # a flow of partition p > 0: its id ends with ~p
        abort(400, "bad flow id: use 1-100 of A-Z a-z 0-9 _ . : -")
    return text


def busiest_queue() -> str | None:
    """Without ``queue``: the queue with the most flows (a ZCARD per state and queue), so the
    page opens where the flows are (the demo's are on ``webhooks``); None when none has any."""
    names = services.get().reads.queue_names()
    totals = {n: sum(reader().counts(n).values()) for n in names[:50]}
    best = max(totals, key=lambda n: totals[n], default=None)
    return best if best is not None and totals[best] else None


@bp.get("/")
@requires("viewer")
def index() -> Any:
    svc = services.get()
    if not request.args.get("queue"):
        best = busiest_queue()
        if best is not None:
            return redirect(url_for("flows.index", queue=best, state=request.args.get("state")
                                    or "running"))
    queue, state = queue_arg(), state_arg()
    offset, limit = page_args()
    search = (request.args.get("q") or "").strip()
    found = reader().get(queue, search) if search and valid_job_id(search) else None
    return render("flows.html", "_flows.html", queue=queue, state=state,
                  counts=reader().counts(queue),
                  page=reader().list_flows(queue, state, offset, limit), search=search,
                  found=found, states=FLOW_STATES, as_of=svc.clock(),
                  queues=svc.reads.queue_names())


@bp.get("/<queue>/<flow_id>")
@requires("viewer")
def flow(queue: str, flow_id: str) -> str:
    svc = services.get()
    check_queue(queue)
    offset = arg_int("offset", 0)
    limit = arg_int("limit", TREE_LIMIT, 1, 1000)
    tree = reader().tree(queue, flow_id_of(flow_id), offset, limit)
    if tree is None:
        abort(404, f"no flow {flow_id} in queue {queue} (finished flows are kept as long as "
                   "the queue's done jobs)")
    dead = sum(1 for j in tree.jobs if j.state == states.DEAD)
    return render("flow.html", "_flow.html", queue=queue, tree=tree, row=tree.flow,
                  levels=levels(tree.jobs), dead_on_page=dead, cancel=CANCEL_ENTRY,
                  as_of=svc.clock())
