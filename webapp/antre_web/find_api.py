"""JSON API of the finder: find by id / key / payload field, a job's timeline, the
producer's view of a job and of an idempotency key's result, paged lists of every state.
Routes live under ``/api/`` and appear in ``/api/openapi.json`` like the others."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, abort, jsonify, request

from antre.engine.envelope import STATES
from antre.observe.finder import BadQuery

from . import services
from .api import DOCS, PAGE_Q, _plain
from .common import check_queue, page_args
from .find import BROWSE_SCAN, browse_page, finder, search_filters
from .security import requires

bp = Blueprint("find_api", __name__, url_prefix="/api")

DOCS["find_api.find"] = {"query": {"q": "string", "id": "string", "key": "string",
                                   "field": "string", "queue": "string", "state": "string",
                                   "cursor": "string"}, "body": {}, "required": ()}
DOCS["find_api.result"] = {"query": {"key": "string"}, "body": {}, "required": ("key",)}
DOCS["find_api.browse"] = {"query": {**PAGE_Q, "type": "string"}, "body": {}, "required": ()}


def _located(text: str, how: str) -> Response:
    f = finder()
    found = f.locate(text) if how == "id" else f.by_key(text) if how == "key" else f.resolve(text)
    if found is None:
        what = {"id": "job id", "key": "idempotency key"}.get(how, "job id or idempotency key")
        abort(404, f"no job with the {what} {text!r} (a job done more than an hour ago is "
                   "pruned); search payloads with field=order_id=1234")
    return jsonify({"found": _plain(found), "as_of": services.get().clock()})


def _search(expression: str) -> Response:
    queue, state = search_filters(request.args)
    try:
        step = finder().search(expression, queue, state, cursor=request.args.get("cursor"))
    except BadQuery as exc:
        abort(400, str(exc))
    return jsonify({**_plain(step), "done": step.done})


@bp.get("/find")
@requires("viewer")
def find() -> Response:
    """Find a job: ``id``, ``key`` (exact) or ``q`` (either, or a field as the finder box)
    answer where it is; ``field`` (``order_id=1234``, dotted paths) runs one bounded step of a
    payload search: hits, progress and the ``cursor`` to pass back until it is null."""
    args = request.args
    for how in ("id", "key", "q"):
        text = (args.get(how) or "").strip()
        if how == "q" and "=" in text and finder().resolve(text) is None:
            return _search(text)  # as the finder box: not an id or a key, so a field
        if text:
            return _located(text, how)
    field = (args.get("field") or "").strip()
    if field:
        return _search(field)
    abort(400, "give one of id=, key=, q= (id or key) or field= (e.g. field=order_id=1234)")


@bp.get("/queues/<queue>/jobs/<job_id>/timeline")
@requires("viewer")
def timeline(queue: str, job_id: str) -> Response:
    """A job's timeline: every event with time, kind, actor and details, oldest first."""
    tl = finder().timeline(check_queue(queue), job_id)
    if not tl.events:
        abort(404, f"no job {job_id} in queue {queue}")
    return jsonify(_plain(tl))


@bp.get("/jobs/<job_id>")
@requires("viewer")
def job_status(job_id: str) -> Response:
    """The producer's view of a job (``Antre.job``): state, attempts, result."""
    status = finder().job_status(job_id)
    if status.state == "unknown":
        abort(404, f"no job {job_id} (never enqueued, discarded, or done and pruned)")
    return jsonify(_plain(status))


@bp.get("/result")
@requires("viewer")
def result() -> Response:
    """``Antre.result``: an idempotency key's status (completed with its stored result,
    pending, failed, unknown)."""
    key = (request.args.get("key") or "").strip()
    if not key or len(key) > 500:
        abort(400, "key is required (the idempotency key, 1-500 characters)")
    return jsonify(_plain(finder().result(key)))


@bp.get("/queues/<queue>/browse/<state>")
@requires("viewer")
def browse(queue: str, state: str) -> Response:
    """Paged jobs of one state (ready oldest first, optionally of one ``type``)."""
    check_queue(queue)
    if state not in STATES:
        abort(404, f"no state {state!r}: one of {', '.join(STATES)}")
    job_type = (request.args.get("type") or "").strip()
    page = browse_page(queue, state, job_type, *page_args())
    out: dict[str, Any] = _plain(page)
    if job_type:
        out["scan_window"] = BROWSE_SCAN
    return jsonify(out)
