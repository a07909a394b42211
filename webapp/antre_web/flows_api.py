"""JSON API of the Flows pages: a queue's flows of one state with the counts (and
one flow by id: ``q``), one flow with a page of its jobs and their depths, a job's place in
its flow. Routes live under ``/api/`` and appear in ``/api/openapi.json`` like the others;
replaying a flow's dead jobs and cancelling a flow are table entries (``POST`` routes made by
``table_routes``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, abort, jsonify, request

from antre.flows.layout import depths

from . import services
from .api import DOCS, PAGE_Q, _plain
from .common import arg_int, check_queue, page_args
from .flows import TREE_LIMIT, flow_id_of, reader, state_arg
from .security import requires

bp = Blueprint("flows_api", __name__, url_prefix="/api")

DOCS["flows_api.flows"] = {"query": {**PAGE_Q, "state": "string", "q": "string"}, "body": {},
                           "required": ()}
DOCS["flows_api.flow"] = {"query": PAGE_Q, "body": {}, "required": ()}


@bp.get("/queues/<queue>/flows")
@requires("viewer")
def flows(queue: str) -> Response:
    """A queue's flows of one state (``state``: running, waiting, failed, succeeded,
    cancelled; newest first, paged) and the count of each state; ``q``: the flow of that id."""
    queue, state = check_queue(queue), state_arg()
    offset, limit = page_args()
    out: dict[str, Any] = {"queue": queue, "counts": reader().counts(queue),
                           **_plain(reader().list_flows(queue, state, offset, limit)),
                           "as_of": services.get().clock()}
    search = (request.args.get("q") or "").strip()
    if search:
        found = reader().get(queue, flow_id_of(search))
        out["found"] = _plain(found) if found else None
    return jsonify(out)


@bp.get("/queues/<queue>/flows/<flow_id>")
@requires("viewer")
def flow(queue: str, flow_id: str) -> Response:
    """One flow: its state, counters and why it stopped, and a page of its jobs in the order
    made, each with its depth (0: a first step; a chord's callback one below its group)."""
    check_queue(queue)
    offset = arg_int("offset", 0)
    limit = arg_int("limit", TREE_LIMIT, 1, 1000)
    tree = reader().tree(queue, flow_id_of(flow_id), offset, limit)
    if tree is None:
        abort(404, f"no flow {flow_id} in queue {queue}")
    d = depths(tree.jobs)
    return jsonify({"flow": {**_plain(tree.flow), "progress": tree.flow.progress},
                    "jobs": [{**_plain(j), "depth": d[j.id]} for j in tree.jobs],
                    "total_jobs": tree.total_jobs, "offset": tree.offset, "limit": tree.limit,
                    "as_of": services.get().clock()})
