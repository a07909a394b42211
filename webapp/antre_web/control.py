"""Incident controls in the browser: pause / resume a queue or a job type, cancel a running
job (to the DLQ or discarded), delete one ready or scheduled job, purge a filtered set of ready, scheduled or dead jobs (dry-run count, typed
confirmation, a paced task with pause and cancel). Every change goes through ``actions``."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, request

from antre.control.purge import SOURCES, PurgeError, PurgeFilter, Tally
from antre.observe.readmodels import DeadFilter, PauseInfo
from antre.engine import states

from . import services
from .common import is_htmx, queue_arg, render
from .security import requires

bp = Blueprint("control", __name__)


def _type_arg(src: Any) -> str | None:
    value = (src.get("type") or "").strip()
    return value or None


# -- purge ------------------------------------------------------------------------------------
def purge_filter(src: Any, check: bool = True) -> PurgeFilter:
    """A purge filter from query/form fields (source, type, group, older_than_s, field,
    value); 400 with the reason when it is not valid (``check=False``: the action checks it,
    so the refusal is audited)."""
    older = src.get("older_than_s") or None
    try:
        older_s = float(older) if older is not None else None
    except ValueError:
        abort(400, "older_than_s must be a number of seconds")
    field = (src.get("field") or "").strip() or None
    flt = PurgeFilter(source=src.get("source") or states.READY, job_type=_type_arg(src),
                      group=(src.get("group") or "").strip() or None, older_than_s=older_s,
                      field=field, value=str(src.get("value", "")) if field else None)
    if not check:
        return flt
    try:
        return flt.check()
    except PurgeError as exc:
        abort(400, str(exc))


def start_tally(src: Any) -> Tally | None:
    """The count to go on from (``count_cursor``), or None to start; 400 when it is bad."""
    token = (src.get("count_cursor") or "").strip()
    if not token:
        return None
    try:
        return Tally.from_token(token)
    except PurgeError as exc:
        abort(400, str(exc))


def dead_tally(queue: str, flt: DeadFilter, src: Any) -> Tally:
    """The DLQ dry run within a budget (exact unless both a type and a group are given),
    going on from the request's ``count_cursor``."""
    try:
        return services.get().bulk.dry_run_tally(queue, flt, start_tally(src))
    except PurgeError as exc:
        abort(400, str(exc))


def purge_tally(queue: str, flt: PurgeFilter, src: Any) -> Tally:
    """A dry run within a budget, going on from the request's ``count_cursor``."""
    try:
        return services.get().purger.tally(queue, flt, start_tally(src))
    except PurgeError as exc:
        abort(400, str(exc))


def _purge_args(flt: PurgeFilter) -> dict[str, Any]:
    pairs = (("source", flt.source), ("type", flt.job_type), ("group", flt.group),
             ("older_than_s", flt.older_than_s), ("field", flt.field), ("value", flt.value))
    return {k: v for k, v in pairs if v is not None}


@bp.get("/purge/")
@requires("viewer")
def purge_page() -> str:
    """The purge form, a dry run within a budget ("at least N so far" with a link to count
    further) and the purges of the queue. The polled partial is the purges table only: a poll
    never counts."""
    svc = services.get()
    queue = queue_arg()
    flt = purge_filter(request.args)
    tally = None if is_htmx() else purge_tally(queue, flt, request.args)
    return render("purge.html", "_purges.html", queue=queue, flt=flt, sources=SOURCES,
                  fargs=_purge_args(flt), tally=tally,
                  dry_run=tally.matched if tally else 0,
                  queues=svc.reads.queue_names(), types=svc.reads.dead_types(queue),
                  tasks=svc.bulk.list(queue, kind="purge"), as_of=svc.clock())


def queue_pauses(queue: str) -> list[PauseInfo]:
    try:
        return services.get().pauses.of_queue(queue)
    except services.REDIS_ERRORS:
        return []


def install_globals(app: Any) -> None:
    app.jinja_env.globals["queue_pauses"] = queue_pauses
