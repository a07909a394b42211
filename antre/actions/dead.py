"""Operator actions on the dead-letter queue's filtered set (a paced bulk replay, a replay
now, a discard) and on the paced tasks (bulk replays and purges: pause, resume, cancel).
"""

from __future__ import annotations

from antre.control import redrive
from antre.control.bulk import TaskNotFound, TaskStateError
from antre.observe.readmodels import MAX_EPOCH_MS, WINDOWS_MS, DeadFilter

from .base import (MAX_BULK, Action, Actor, Args, BadInput, confirmed, Html, Ops, Param, Result,
                   _how_to_confirm)


def _task_change(ops: Ops, a: Args, op: str, kind: str) -> Result:
    """Pause, resume or cancel a paced task; ``kind``: 'replay' (the DLQ's bulk replays, as
    the DLQ page always did: any task of the queue) or 'purge' (purges only)."""
    bulk, queue, task_id = ops.bulk, a["queue"], a["task_id"]
    if kind == "purge" and not _is_purge(ops, a):
        return Result(False, f"no purge {task_id} in {queue}", 409)
    change = {"pause": bulk.pause, "resume": bulk.resume, "cancel": bulk.cancel}[op]
    try:
        task = change(queue, task_id)
    except TaskNotFound:
        return Result(False, f"no bulk replay {task_id} in {queue}", 409)
    except TaskStateError as exc:
        return Result(False, str(exc), 409)
    message = (f"purge {task_id}: {task.state} ({task.replayed} removed)" if kind == "purge"
               else f"bulk {task.kind} {task_id}: {task.state} (done {task.replayed}, "
                    f"skipped {task.skipped})")
    return Result(True, message, 200, {"task": task.to_dict()})


def _is_purge(ops: Ops, a: Args) -> bool:
    task = ops.bulk.get(a["queue"], a["task_id"])
    return task is not None and task.kind == "purge"


def _task_target(a: Args) -> str:
    return f"{a['queue']}/{a['task_id']}"


def _task_controls() -> list[Action]:
    """Pause, resume and cancel of the DLQ's bulk replays and of purges: six entries, one
    ``antre task OP QUEUE TASK_ID`` each op (the task's kind picks the entry)."""
    what = {"pause": "Pause a running {}.", "resume": "Resume a paused {}.",
            "cancel": "Cancel a {}."}
    out: list[Action] = []
    for op in ("pause", "resume", "cancel"):
        def replay(ops: Ops, who: Actor, a: Args, op: str = op) -> Result:
            return _task_change(ops, a, op, "replay")

        def purge(ops: Ops, who: Actor, a: Args, op: str = op) -> Result:
            return _task_change(ops, a, op, "purge")
        out.append(Action(
            f"dlq.bulk_replay.{op}", "operator", what[op].format("bulk replay"),
            f"/queues/<queue>/replays/<task_id>/{op}", f"bulk_{op}",
            Html(f"/dlq/<queue>/bulk/<task_id>/{op}", f"dlq.bulk_{op}", "dlq.index",
                 partial="bulk"),
            ("task", op), replay, _task_target, cli_help=f"{op} a bulk replay or purge"))
        cancel_note = " (what it removed stays removed)" if op == "cancel" else ""
        out.append(Action(
            f"purge.{op}", "operator", what[op].format("purge")[:-1] + cancel_note + ".",
            f"/queues/<queue>/purges/<task_id>/{op}", f"purge_{op}",
            Html(f"/purge/<queue>/<task_id>/{op}", f"control.purge_{op}",
                 "control.purge_page", follow_next=False),
            ("task", op), purge, _task_target, cli_owns=_is_purge,
            cli_help=f"{op} a bulk replay or purge"))
    return out

# -- the DLQ's filtered set: paced bulk replay, replay now, discard --------------------------
def dead_filter(ops: Ops, a: Args) -> Args:
    """``a`` with ``filter``: the DLQ filter of its type, group and time window (``window``
    15m..7d from the app's clock, or ``since_ms`` / ``until_ms``, which win)."""
    since: int | None = None
    if (a["window"] or "") in WINDOWS_MS:
        since = ops.clock() - WINDOWS_MS[a["window"]]
    until = a["until_ms"]
    if a["since_ms"] is not None:
        since = a["since_ms"]
    for name in ("since_ms", "until_ms"):
        if a[name] is not None and not 0 <= a[name] <= MAX_EPOCH_MS:
            raise BadInput(f"{name} must be epoch milliseconds from 0 to {MAX_EPOCH_MS}")
    for v in (a["type"], a["group"]):
        if v and (len(v) > 200 or "{" in v or "}" in v):
            raise BadInput("bad filter value")
    return {**a, "filter": DeadFilter(job_type=a["type"] or None, group=a["group"] or None,
                                      since_ms=since, until_ms=until)}


def _dead_target(a: Args) -> str:
    return f"{a['queue']} [{a['filter'].describe()}]"


def _not_idempotent_warning(ops: Ops, flt: DeadFilter) -> str:
    bad = [name for name, spec in ops.app.handlers.items()
           if not spec.idempotent and (flt.job_type in (None, name))]
    if not bad:
        return ""
    return (" Warning: not idempotent handlers in this set may repeat effects: "
            + ", ".join(sorted(bad)) + ".")


def bulk_start(ops: Ops, who: Actor, a: Args) -> Result:
    queue, flt = a["queue"], a["filter"]
    try:
        task = ops.bulk.start(queue, flt, a["rate"], min(max(a["maximum"], 0), MAX_BULK),
                              who.name, a["reason"], stop_pct=a["stop_pct"],
                              min_sample=a["min_sample"], target=a["to_queue"])
    except ValueError as exc:
        return Result(False, str(exc), 400)
    into = (f" into queue {task.target} ("
            + redrive.TARGET_NOTE.format(target=task.target, queue=queue) + ")"
            if task.target else "")
    guard = (f"; it pauses itself if more than {task.stop_pct:g}% of the replayed jobs fail "
             f"again (judged after {task.min_sample})" if task.stop_pct else "")
    return Result(True, f"bulk replay {task.id} started: {task.total} jobs match "
                        f"({ops.bulk.named(queue, flt)}), at most {task.maximum} at "
                        f"{task.rate_per_s:g} jobs/s{into}{guard}."
                        f"{_not_idempotent_warning(ops, flt)}", 200,
                  {"task": task.to_dict(), "filter": flt.describe(), "dry_run": task.total,
                   "dead_before": ops.reads.count_dead(queue)})


def replay_filtered_now(ops: Ops, who: Actor, a: Args) -> Result:
    flt = a["filter"]
    named = ops.bulk.named(a["queue"], flt)  # before the replay empties its error group
    out = ops.bulk.replay_filtered_now(a["queue"], flt, max(0, min(a["maximum"], MAX_BULK)),
                                       who.name)
    return Result(True, f"replayed {out.done} dead jobs ({named})"
                        + _not_idempotent_warning(ops, flt), 200,
                  {"filter": flt.describe(), **out.to_dict()})


def discard_filtered_dry_run(ops: Ops, a: Args) -> Result:
    flt = a["filter"]
    return Result(True, f"{ops.bulk.dry_run(a['queue'], flt)} dead jobs match "
                        f"({ops.bulk.named(a['queue'], flt)}) in {a['queue']}")


def discard_filtered(ops: Ops, who: Actor, a: Args) -> Result:
    queue, flt = a["queue"], a["filter"]
    count = ops.bulk.dry_run(queue, flt)
    if not confirmed(a["confirm"], count, "discard"):
        return Result(False, f"not confirmed: {_how_to_confirm(who, count, 'discard')}; "
                             "nothing was changed", 400, {"dry_run": count})
    named = ops.bulk.named(queue, flt)  # before the discard empties its error group
    out = ops.bulk.discard_filtered(queue, flt, max(0, min(a["maximum"], MAX_BULK)), who.name)
    return Result(True, f"discarded {out.done} dead jobs ({named})", 200,
                  {"dry_run": count, "filter": flt.describe(), **out.to_dict()})


DEAD_FILTER = (Param("type", help="only this job type"),
               Param("group", help="only this error group"),
               Param("window", help="only jobs dead in the last 15m, 1h, 6h, 24h or 7d"),
               Param("since_ms", int, "dead at or after (epoch ms; wins over window)"),
               Param("until_ms", int, "dead at or before (epoch ms)"))


def _dead_set_actions() -> list[Action]:
    return [
        Action("dlq.bulk_replay.start", "operator",
               "Start a paced bulk replay of the filtered DLQ set (tracked task).",
               "/queues/<queue>/replays", "bulk_start",
               Html("/dlq/<queue>/bulk", "dlq.bulk_start", "dlq.index"),
               ("bulk-replay",), bulk_start, _dead_target,
               (*DEAD_FILTER,
                Param("rate", float, "jobs per second", required=True, default=0.0,
                      cli_default=5.0),
                Param("maximum", int, "at most this many jobs", required=True, default=0,
                      cli_default=1000),
                Param("stop_pct", float, "pause itself when more than this percent of the "
                      "replayed jobs fail again (0: never)", default=20.0, cli_default=20.0),
                Param("min_sample", int, "judge after this many replayed jobs", default=20,
                      cli_default=20),
                Param("to_queue", help="replay into this queue instead (one that exists)",
                      default="")),
               cli_help="paced replay of the filtered dead-letter set", prepare=dead_filter),
        Action("dlq.replay_filtered_now", "operator",
               "Replay up to ``maximum`` jobs of the filtered set at once (no pacing).",
               "/queues/<queue>/dead/replay-now", "replay_filtered_now",
               Html("/dlq/<queue>/replay-now", "dlq.replay_filtered_now", "dlq.index"),
               ("filtered", "replay-now"), replay_filtered_now, _dead_target,
               (*DEAD_FILTER,
                Param("maximum", int, "at most this many jobs", required=True, default=0,
                      cli_required=True)),
               prepare=dead_filter),
        Action("dlq.discard_filtered", "operator",
               "Discard the filtered set; ``confirm`` must be the matching count or "
               "'discard'.",
               "/queues/<queue>/dead/discard", "discard_filtered",
               Html("/dlq/<queue>/discard-filtered", "dlq.discard_filtered", "dlq.index"),
               ("filtered", "discard"), discard_filtered, _dead_target,
               (*DEAD_FILTER,
                Param("maximum", int, "at most this many jobs", default=MAX_BULK),
                Param("confirm", help="the matching count, or the word discard",
                      required=True, default="")),
               dry_run=discard_filtered_dry_run, prepare=dead_filter),
    ]


ENTRIES: list[Action] = [
    *_task_controls(),
    *_dead_set_actions(),
]
