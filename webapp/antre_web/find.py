"""Find any job and see its whole life: the finder (header box, ``/find``), payload search in
bounded steps (``/find/more``, polled by htmx until done or stopped), the job page with its
timeline (``/jobs/<queue>/<id>``) and paged lists of every state (``/browse/<queue>/<state>``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from flask import Blueprint, abort, redirect, request, url_for
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.wrappers import Response

from antre import settings
from antre.actions import by_name
from antre.engine.envelope import STATES
from antre.observe.finder import BadQuery, Finder, Located, SearchStep
from antre.engine.keys import valid_name
from antre.flows import FlowReader
from antre.observe.readmodels import Page
from antre.engine import states

from .sealed import shown, shown_log
from . import services
from .common import arg_int, check_queue, page_args, render
from .security import database_seen, requires

bp = Blueprint("find", __name__)

MAX_TEXT = 500
BROWSE_SCAN = 1_000  # ready ids looked at per page when filtering the ready list by type
FIRST_STEP_MS = 80  # the search page's first step: first hits on screen fast
NEXT_STEP_MS = 150  # each polled step after it
PAGE_HITS = 1_000  # a search page stops adding rows here (narrow the search, or use the API)


def finder() -> Finder:
    svc = services.get()
    return Finder(svc.redis, svc.clock, svc.idempotency)


def search_filters(src: Any) -> tuple[str | None, str | None]:
    """``queue`` and ``state`` of a search ('' = all); a bad one is a 400 naming it."""
    queue = (src.get("queue") or "").strip() or None
    state = (src.get("state") or "").strip() or None
    if queue is not None and not valid_name(queue):
        abort(400, f"bad queue name {queue!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    if state is not None and state not in STATES:
        abort(400, f"state must be one of {', '.join(STATES)} (or empty for all)")
    return queue, state


def job_url(found: Located) -> str:
    return url_for("find.job", queue=found.queue, job_id=found.job_id)


def more_url(step: SearchStep, queue: str | None, state: str | None, hits: int) -> str:
    return url_for("find.more", q=step.expression, queue=queue or "", state=state or "",
                   cursor=step.cursor or "", n=hits)


def _page(status: int = 200, **ctx: Any) -> tuple[str, int]:
    svc = services.get()
    base = {"q": "", "queue": "", "state": "", "step": None, "error": "", "message": "",
            "queues": svc.reads.queue_names(), "states": STATES, "as_of": svc.clock(),
            "more_url": more_url, "hits_so_far": 0, "hit_cap": PAGE_HITS}
    return render("find.html", "_find.html", **{**base, **ctx}), status


@bp.get("/find")
@requires("viewer")
def index() -> tuple[str, int] | Response:
    """A job id or an idempotency key goes straight to the job; ``field=value`` searches."""
    text = (request.args.get("q") or "").strip()[:MAX_TEXT]
    queue, state = search_filters(request.args)
    if not text:
        return _page()
    found = finder().resolve(text)  # a key may hold '=': ids and keys first
    if found is not None:
        return redirect(job_url(found), code=303)
    if _has_record(text):  # no job left, but its idempotency record (abandoned?) is there
        return redirect(url_for("idempotency.index", key=text), code=303)
    if "=" not in text:
        return _page(404, q=text, message=f"No job has the id or the idempotency key {text!r} "
                                           "(a job done more than an hour ago is pruned). To "
                                           "search payloads, type field=value, e.g. order_id=1234.")
    try:
        step = finder().search(text, queue, state, budget_ms=FIRST_STEP_MS)
    except BadQuery as exc:
        return _page(400, q=text, queue=queue or "", state=state or "", error=str(exc))
    return _page(q=text, queue=queue or "", state=state or "", step=step,
                 hits_so_far=len(step.hits))


def _has_record(key: str) -> bool:
    try:
        return services.get().idempotency.lookup(key[:500]) is not None
    except SQLAlchemyError as exc:
        database_seen(exc)
        return False


@bp.get("/find/more")
@requires("viewer")
def more() -> str:
    """The next bounded step of a payload search (rows + the next step's trigger)."""
    text = (request.args.get("q") or "").strip()[:MAX_TEXT]
    queue, state = search_filters(request.args)
    cursor = request.args.get("cursor") or ""
    if not cursor:
        abort(400, "cursor is required: start the search from /find")
    try:
        step = finder().search(text, queue, state, cursor=cursor, budget_ms=NEXT_STEP_MS)
    except BadQuery as exc:
        abort(400, str(exc))
    so_far = arg_int("n", 0, 0, PAGE_HITS * 10) + len(step.hits)
    return render("_find_more.html", "_find_more.html", step=step, queue=queue or "",
                  state=state or "", more_url=more_url, hits_so_far=so_far, hit_cap=PAGE_HITS)


@bp.app_template_filter("ts_ms")
def ts_ms(ms: Any) -> str:
    """'2026-11-30 08:13:17.123 UTC': timeline events often share a second."""
    try:
        value = int(ms)
    except (TypeError, ValueError):
        return ""
    if value <= 0:
        return "—"
    return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] \
        + " UTC"




# -- the job page -------------------------------------------------------------------------------
def trace_link(traceparent: str) -> str:
    """``ANTRE_TRACE_URL`` with ``{trace_id}`` filled in (the 32-hex trace id of the W3C
    traceparent), e.g. ``http://jaeger:16686/trace/{trace_id}``; '' when not configured."""
    template = settings.TRACE_URL.get()
    parts = traceparent.split("-")
    if not template or len(parts) != 4:
        return ""
    return template.replace("{trace_id}", quote(parts[1]))


def _idempotency(key: str) -> tuple[Any, str]:
    svc = services.get()
    try:
        return (svc.idempotency.lookup(key) if key else None), ""
    except SQLAlchemyError as exc:
        database_seen(exc)
        return None, "the database is unreachable: idempotency status unknown"


def job_page(queue: str, job_id: str) -> str:
    """The job with its whole timeline; a discarded job's timeline alone while it is kept."""
    svc = services.get()
    check_queue(queue)
    found = svc.reads.job(queue, job_id)
    timeline = finder().timeline(queue, job_id)
    audit_url = url_for("audit.index", target=f"{queue}/{job_id}")
    if found is None and not timeline.events:
        abort(404, f"no job {job_id} in queue {queue} (discarded over a week ago, or done "
                   "and pruned): find it by idempotency key or payload field with the finder")
    if found is None:
        return render("job_gone.html", "_timeline.html", queue=queue, job_id=job_id,
                      timeline=timeline, audit_url=audit_url, trace_url="",
                      as_of=svc.clock())
    record, idem_error = _idempotency(found.idempotency_key)
    schema, schema_note = svc.task_schema(found.type)
    own_log, log_hidden = shown_log(found, svc.reads.job_log(queue, found.id))
    return render("job.html", "_job.html", queue=queue, job=shown(found), record=record,
                  own_log=own_log, log_hidden=log_hidden,
                  schema=schema, schema_note=schema_note,
                  turn=svc.reads.turn(queue, found),
                  flow=FlowReader(svc.redis).links(queue, found.id),
                  idem_error=idem_error, idempotent=svc.idempotent(found.type),
                  timeline=timeline, audit_url=audit_url, trace_url=trace_link(found.trace_id),
                  cancel_role=by_name("job.cancel").role,
                  cancelling=svc.cancels.of(queue, found.id) if found.state == states.INFLIGHT
                  else None, as_of=svc.clock())


@bp.get("/jobs/<queue>/<job_id>")
@requires("viewer")
def job(queue: str, job_id: str) -> str:
    return job_page(queue, job_id)


# -- browse every state -------------------------------------------------------------------------
def browse_page(queue: str, state: str, job_type: str, offset: int, limit: int) -> Page:
    reads = services.get().reads
    if state == states.READY and job_type:
        return finder().ready_of_type(queue, job_type, offset, limit, BROWSE_SCAN)
    pages = {states.READY: reads.ready, states.SCHEDULED: reads.scheduled,
             states.INFLIGHT: reads.inflight, states.DONE: reads.done,
             states.WAITING: reads.waiting}
    if state == states.DEAD:
        return reads.dead(queue, offset=offset, limit=limit)
    return pages[state](queue, offset, limit)


@bp.get("/browse/<queue>/<state>")
@requires("viewer")
def browse(queue: str, state: str) -> str:
    """Paged jobs of one state: ready oldest first (optionally of one type), in flight by
    deadline, scheduled by due time, dead and done newest first."""
    svc = services.get()
    check_queue(queue)
    if state not in STATES:
        abort(404, f"no state {state!r}: one of {', '.join(STATES)}")
    job_type = (request.args.get("type") or "").strip()
    if job_type and not valid_name(job_type):
        abort(400, "bad job type")
    offset, limit = page_args()
    page = browse_page(queue, state, job_type, offset, limit)
    info = svc.reads.queue_info(queue)
    return render("browse.html", "_browse.html", queue=queue, state=state, page=page,
                  info=info, job_type=job_type, types=svc.reads.dead_types(queue),
                  pargs={"queue": queue, "state": state, "type": job_type},
                  queues=svc.reads.queue_names(), as_of=page.as_of)
