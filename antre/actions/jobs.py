"""Operator actions on one job: replay or discard a dead job (also with an edited payload),
delete a ready or scheduled one, run a scheduled one now, extend or cancel a running one.
"""

from __future__ import annotations

from antre.control import edit
from antre.control.cancel import CancelError
from antre.control.edit import EditPlan, ReplayEdits
from antre.control.purge import PurgeError
from antre.errors import LeaseLost

from .base import CANCEL_TO_PARAM, Action, Actor, Args, Html, Ops, Param, Result, _job_target, _note


MAX_EXTEND_S = 24 * 3600


def replay(ops: Ops, who: Actor, a: Args) -> Result:
    queue, job_id = a["queue"], a["job_id"]
    before = ops.reads.count_dead(queue)
    job = ops.reads.job(queue, job_id)
    spec = ops.app.handlers.get(job.type) if job is not None else None
    warn = ""
    if job is not None and spec is not None and not spec.idempotent:
        warn = (f" Warning: handler '{job.type}' is marked not idempotent; its effects may "
                "happen twice.")
    if not ops.app.job_queue(queue, job_id).replay(job_id, who.name, _note(a)):
        return Result(False, f"job {job_id} is not in the dead-letter queue of {queue} "
                             "(already replayed or discarded?); nothing was changed", 409,
                      {"dead_before": before})
    return Result(True, f"job {job_id} replayed: back in the ready list with its "
                        f"attempts reset and its idempotency key kept.{warn}", 200,
                  {"dead_before": before, "dead_after": ops.reads.count_dead(queue)})


def discard(ops: Ops, who: Actor, a: Args) -> Result:
    queue, job_id = a["queue"], a["job_id"]
    before = ops.reads.count_dead(queue)
    if not ops.app.job_queue(queue, job_id).discard(job_id, who.name, _note(a)):
        return Result(False, f"job {job_id} is not in the dead-letter queue of {queue}; "
                             "nothing was changed", 409, {"dead_before": before})
    return Result(True, f"job {job_id} discarded", 200,
                  {"dead_before": before, "dead_after": ops.reads.count_dead(queue)})

def delete_job(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        where = ops.purger.delete(a["queue"], a["job_id"])
    except PurgeError as exc:
        return Result(False, str(exc), 409)
    return Result(True, f"job {a['job_id']} deleted from {where}", 200, {"was": where})


def run_now(ops: Ops, who: Actor, a: Args) -> Result:
    if not ops.app.job_queue(a["queue"], a["job_id"]).run_now(a["job_id"], who.name, _note(a)):
        return Result(False, f"job {a['job_id']} is no longer scheduled (it already ran or "
                             "moved); nothing was changed", 409)
    return Result(True, f"job {a['job_id']} moved to the ready list")


def extend(ops: Ops, who: Actor, a: Args) -> Result:
    queue, job_id, epoch, seconds = a["queue"], a["job_id"], a["epoch"], a["seconds"]
    if not 1 <= seconds <= MAX_EXTEND_S:
        return Result(False, f"seconds must be between 1 and {MAX_EXTEND_S}", 400)
    before = ops.reads.job(queue, job_id)
    detail = {"epoch": epoch, "seconds": seconds,
              "deadline_before": before.deadline if before else None}
    try:
        deadline = ops.app.job_queue(queue, job_id).extend(
            job_id, epoch, seconds * 1000, mode="add", actor=who.name, note=_note(a))
    except LeaseLost as exc:
        return Result(False, "the lease changed under you (job was re-delivered/finished); "
                             f"nothing was changed. ({exc})", 409, detail)
    return Result(True, f"lease of job {job_id} extended by {seconds}s", 200,
                  {**detail, "deadline_after": deadline})


def cancel_job(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        req = ops.cancels.request(a["queue"], a["job_id"], who.name, a["to"], a["reason"])
    except CancelError as exc:
        return Result(False, str(exc), 409 if "not running" in str(exc) else 400)
    where = "the dead-letter queue" if req.to == "dlq" else "discarded"
    return Result(True, f"cancel of job {a['job_id']} requested: its worker stops it within "
                        f"the handler's grace period, then it is {where}", 200, {"to": req.to})

def edit_plan(ops: Ops, a: Args) -> EditPlan | Result:
    """The dry run of a replay of ``a['job_id']`` with ``a['payload']`` (JSON text)."""
    job = ops.reads.job(a["queue"], a["job_id"])
    if job is None:
        return Result(False, f"no job {a['job_id']} in queue {a['queue']}", 404)
    new_key = a["new_key"] or ""
    store = ops.idempotency
    record = store.lookup(new_key.strip() or job.idempotency_key) if store else None
    known = (job.type in ops.app.handlers) if ops.app.handlers else None
    task = ops.app.tasks.get(job.type)
    return edit.plan(a["queue"], job, a["payload"] or "", new_key, record, known,
                     ReplayEdits(ops.app.job_queue(a["queue"], job.id)).unique(job.id),
                     task.problem if task is not None else None)


def replay_edited(ops: Ops, who: Actor, a: Args) -> Result:
    p = edit_plan(ops, a)
    if isinstance(p, Result):
        return p
    detail = {"diff": "\n".join(p.diff), "new_key": p.new_key, "key": p.key,
              "reset_failed_key": p.resets_failed}
    if not a["reason"]:
        return Result(False, "say why (the reason is required); nothing was changed", 400,
                      detail)
    if not p.ok:
        return Result(False, "refused: " + "; ".join(p.problems) + "; nothing was changed",
                      400, detail)
    if ReplayEdits(ops.app.job_queue(a["queue"], p.job_id)).replay(p, who.name, a["reason"],
                                                     ops.idempotency) != 1:
        return Result(False, f"job {p.job_id} is no longer in the dead-letter queue (or a "
                             "unique job's key cannot change); nothing was changed", 409,
                      detail)
    return Result(True, f"job {p.job_id} replayed with the edited payload under key "
                        f"{p.key}; the original is on its timeline", 200, detail)


def replay_edited_dry_run(ops: Ops, a: Args) -> Result:
    p = edit_plan(ops, a)
    if isinstance(p, Result):
        return p
    lines = ["\n".join(p.diff) or "(no change)",
             f"key {p.key}: idempotency record {p.record_status or 'none'}"]
    lines += [f"refused: {problem}" for problem in p.problems]
    return Result(p.ok, "\n".join(lines), 200 if p.ok else 400,
                  {"diff": "\n".join(p.diff), "problems": list(p.problems)})


ENTRIES: list[Action] = [
    Action("dlq.replay", "operator",
           "Replay one dead job (attempts reset, idempotency key kept).",
           "/queues/<queue>/jobs/<job_id>/replay", "replay_one",
           Html("/dlq/<queue>/<job_id>/replay", "dlq.replay", "dlq.index"),
           ("job", "replay"), replay, _job_target),
    Action("dlq.discard", "operator", "Discard one dead job.",
           "/queues/<queue>/jobs/<job_id>/discard", "discard_one",
           Html("/dlq/<queue>/<job_id>/discard", "dlq.discard", "dlq.index"),
           ("job", "discard"), discard, _job_target),
    Action("job.delete", "operator",
           "Delete one ready, scheduled or waiting job, or a held job of a failed flow (which "
           "gives the flow up); 409 when it is running, dead, done, gone or held in a running "
           "flow.",
           "/queues/<queue>/jobs/<job_id>/delete", "delete_job",
           Html("/queues/<queue>/jobs/<job_id>/delete", "control.delete_job",
                "scheduled.index"),
           ("job", "delete"), delete_job, _job_target),
    Action("scheduled.run_now", "operator", "Move a scheduled job to the ready list now.",
           "/queues/<queue>/jobs/<job_id>/run-now", "run_now",
           Html("/scheduled/<queue>/<job_id>/run-now", "scheduled.run_now", "scheduled.index"),
           ("job", "run-now"), run_now, _job_target),
    Action("inflight.extend", "operator",
           "Extend an in-flight lease by N seconds; 409 if the lease epoch changed.",
           "/queues/<queue>/jobs/<job_id>/extend", "extend",
           Html("/inflight/<queue>/<job_id>/extend", "inflight.extend", "inflight.index"),
           ("job", "extend"), extend, _job_target,
           (Param("epoch", int, "the lease epoch you saw", required=True, default=-1,
                  cli_required=True),
            Param("seconds", int, "how many seconds to add", required=True, default=0,
                  cli_default=30))),
    Action("job.cancel", "operator",
           "Stop a running job: ``to`` 'dlq' (default; reason 'cancelled by NAME') or "
           "'discard'; 409 when the job is not running.",
           "/queues/<queue>/jobs/<job_id>/cancel", "cancel_job",
           Html("/queues/<queue>/jobs/<job_id>/cancel", "control.cancel_job", "inflight.index"),
           ("job", "cancel"), cancel_job, _job_target,
           (CANCEL_TO_PARAM,)),
    Action("dlq.replay_edited", "operator",
           "Replay a dead job with an edited payload (JSON) and optionally a new idempotency "
           "key; refused for a key whose effect completed unless a new key is given.",
           "/queues/<queue>/jobs/<job_id>/replay-edited", "replay_edited",
           Html("/jobs/<queue>/<job_id>/edit/replay", "edit.replay", "find.job",
                follow_next=False, back_args=lambda a: {"job_id": a["job_id"]}),
           ("job", "replay-edited"), replay_edited,
           lambda a: f"{a['queue']}/{a['job_id']}",
           (Param("payload", help="the new payload, as JSON", required=True, default="",
                  strip=False),
            Param("new_key", help="a new idempotency key (empty: keep the job's)",
                  default="")),
           reason_required_on_cli=True, dry_run=replay_edited_dry_run),
]
