"""Replay a dead job with an edited payload, from its job page (issue 25 item 4): edit the JSON,
dry run (the diff, the handler, the idempotency record of the key it would run under, and why
it would be refused), then replay. Operator role, POST + CSRF; the replay is audited with the
diff, the original stays on the job's timeline. The checks are ``antre.control.edit.plan``."""

from __future__ import annotations

from flask import Blueprint, abort, flash, redirect, request, url_for
from flask.typing import ResponseReturnValue

from antre.control.edit import EditPlan, ReplayEdits, plan, pretty

from . import services
from .actions import Result, guarded
from .common import check_queue, render
from .security import current_user, requires

bp = Blueprint("edit", __name__)


def _plan(queue: str, job_id: str) -> EditPlan:
    svc = services.get()
    job = svc.reads.job(check_queue(queue), job_id)
    if job is None:
        abort(404, f"no job {job_id} in queue {queue}")
    text = request.form.get("payload", "")
    new_key = request.form.get("new_key", "")
    record = svc.idempotency.lookup(new_key.strip() or job.idempotency_key)  # DB down: outage
    known = (job.type in svc.antre.handlers) if svc.antre.handlers else None
    return plan(queue, job, text, new_key, record, known,
                ReplayEdits(svc.antre.queue(queue)).unique(job_id))


def _page(queue: str, job_id: str, text: str, new_key: str, p: EditPlan | None,
          status: int = 200) -> ResponseReturnValue:
    svc = services.get()
    job = svc.reads.job(queue, job_id)
    html = render("edit.html", "_edit.html", queue=queue, job=job, text=text, new_key=new_key,
                  plan=p, as_of=svc.clock(), redis_read=True)
    return html, status


@bp.get("/jobs/<queue>/<job_id>/edit")
@requires("operator", "dlq.replay_edited")
def form(queue: str, job_id: str) -> ResponseReturnValue:
    job = services.get().reads.job(check_queue(queue), job_id)
    if job is None:
        abort(404, f"no job {job_id} in queue {queue}")
    return _page(queue, job_id, pretty(job.payload), "", None)


@bp.post("/jobs/<queue>/<job_id>/edit/dry-run")
@requires("operator", "dlq.replay_edited.dry_run")
def dry_run(queue: str, job_id: str) -> ResponseReturnValue:
    p = _plan(queue, job_id)
    return _page(queue, job_id, request.form.get("payload", ""),
                 request.form.get("new_key", ""), p)


@bp.post("/jobs/<queue>/<job_id>/edit/replay")
@requires("operator", "dlq.replay_edited")
def replay(queue: str, job_id: str) -> ResponseReturnValue:
    p = _plan(queue, job_id)
    reason = (request.form.get("reason") or "").strip()[:2000]
    user = current_user()

    def run() -> Result:
        detail = {"diff": "\n".join(p.diff), "new_key": p.new_key, "key": p.key,
                  "reset_failed_key": p.resets_failed}
        if not reason:
            return Result(False, "say why (the reason is required); nothing was changed", 400,
                          detail)
        if not p.ok:
            return Result(False, "refused: " + "; ".join(p.problems) + "; nothing was "
                                 "changed", 400, detail)
        svc = services.get()
        done = ReplayEdits(svc.antre.queue(queue)).replay(
            p, user.name if user else "(anonymous)", reason, svc.idempotency)
        if done != 1:
            return Result(False, f"job {job_id} is no longer in the dead-letter queue (or a "
                                 "unique job's key cannot change); nothing was changed", 409,
                          detail)
        return Result(True, f"job {job_id} replayed with the edited payload under key "
                            f"{p.key}; the original is on its timeline", 200, detail)

    result = guarded("dlq.replay_edited", f"{queue}/{job_id}", reason, run)
    if not result.ok:
        flash(result.message, "error")
        return _page(queue, job_id, request.form.get("payload", ""),
                     request.form.get("new_key", ""), p, result.status)
    flash(result.message, "ok")
    return redirect(url_for("find.job", queue=queue, job_id=job_id), code=303)
