"""Replay a dead job with an edited payload, from its job page: edit the JSON
and dry run it (a ``POST`` with the CSRF token, so the payload stays out of URLs, logs and
the history; it changes nothing: the diff, the handler, the idempotency record of the key it
would run under, and why it would be refused); the page then offers to replay exactly what was
dry-run.
The replay itself is the table entry ``dlq.replay_edited`` (``antre/actions/``: operator,
POST + CSRF, audited with the diff; its API route and ``antre job replay-edited``)."""

from __future__ import annotations

from flask import Blueprint, abort, request
from flask.typing import ResponseReturnValue

from antre.actions import Ops, Result, edit_plan
from antre.control.edit import pretty

from . import services
from .common import job_or_404, render
from .security import requires

bp = Blueprint("edit", __name__)


@bp.get("/jobs/<queue>/<job_id>/edit")
@requires("operator")
def form(queue: str, job_id: str) -> ResponseReturnValue:
    return _page(queue, job_id, None, "")


@bp.post("/jobs/<queue>/<job_id>/edit")
@requires("operator")
def dry_run(queue: str, job_id: str) -> ResponseReturnValue:
    """A read (it changes nothing) that is a POST: the payload is never in a URL."""
    return _page(queue, job_id, request.form.get("payload") or "",
                 request.form.get("new_key") or "")


def _page(queue: str, job_id: str, text: str | None, new_key: str) -> ResponseReturnValue:
    svc = services.get()
    job = job_or_404(queue, job_id)
    plan = None
    if text is not None:  # a dry run
        found = edit_plan(Ops(svc.antre, svc.clock, svc.reads, svc.idempotency),
                          {"queue": queue, "job_id": job_id, "payload": text,
                           "new_key": new_key})
        if isinstance(found, Result):
            abort(found.status, found.message)
        plan = found
    return render("edit.html", "_edit.html", queue=queue, job=job,
                  text=pretty(job.payload) if text is None else text, new_key=new_key,
                  plan=plan, as_of=svc.clock(), json_schema=svc.task_json_schema(job.type))
