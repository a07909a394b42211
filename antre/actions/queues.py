"""Operator actions on a queue and what feeds it: pause and resume a queue (or one job type),
start a paced purge of a filtered set, pause / resume / run a periodic schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from antre.control.pause import PauseError
from antre.control.purge import SOURCES, PurgeError, PurgeFilter
from antre.observe.readmodels import PauseInfo
from antre.engine import states

from .base import (MAX_BULK, Action, Actor, Args, confirmed, Html, Ops, Param, Result,
                   _how_to_confirm)


def _pause_target(a: Args) -> str:
    return a["queue"] if a.get("type") is None else f"{a['queue']}/{a['type']}"


def _plain_pause(info: PauseInfo) -> dict[str, Any]:
    return {"queue": info.queue, "job_type": info.job_type, "by": info.by, "at_ms": info.at_ms,
            "reason": info.reason}

def pause(ops: Ops, who: Actor, a: Args) -> Result:
    bad = ops.unknown_target(a["queue"], a["type"])
    if bad is not None:
        return bad
    try:
        info = ops.pauses.pause(a["queue"], a["type"], who.name, a["reason"])
    except PauseError as exc:
        return Result(False, f"{exc}; nothing was changed", 409 if "already" in str(exc)
                      else 400)
    return Result(True, f"{info.target} paused: workers reserve none of its jobs until it "
                        "is resumed (jobs in flight finish)", 200, {"paused": _plain_pause(info)})


def resume(ops: Ops, who: Actor, a: Args) -> Result:
    bad = ops.unknown_target(a["queue"], a["type"])
    if bad is not None:
        return bad
    before = ops.pauses.get(a["queue"], a["type"])
    try:
        moved = ops.pauses.resume(a["queue"], a["type"])
    except PauseError as exc:
        return Result(False, f"{exc}; nothing was changed", 409)
    return Result(True, f"{_pause_target(a)} resumed ({moved} parked jobs back in the ready "
                        "list)", 200,
                  {"unparked": moved, "was": _plain_pause(before) if before else None})

def _set_schedule_paused(ops: Ops, who: Actor, name: str, paused: bool) -> Result:
    try:
        info = ops.schedules.set_paused(name, paused, who.name)
    except KeyError as exc:
        return Result(False, str(exc.args[0]), 404)
    verb = "paused: its ticks are skipped until resumed" if paused else \
        "resumed: it runs from its next tick (paused ticks are not caught up)"
    return Result(True, f"schedule {name} {verb}", 200, {"paused": info.paused})


def schedule_pause(ops: Ops, who: Actor, a: Args) -> Result:
    return _set_schedule_paused(ops, who, a["name"], True)


def schedule_resume(ops: Ops, who: Actor, a: Args) -> Result:
    return _set_schedule_paused(ops, who, a["name"], False)


def schedule_run_now(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        job_id = ops.schedules.run_now(a["name"])
    except KeyError as exc:
        return Result(False, str(exc.args[0]), 404)
    return Result(True, f"schedule {a['name']}: job {job_id} enqueued now (its ticks are "
                        "unchanged)", 200, {"job_id": job_id})


def _schedule_line(verb: str) -> Callable[[Args, Result], str]:
    def line(a: Args, r: Result) -> str:
        job = f" (job {r.detail['job_id']})" if "job_id" in r.detail else ""
        return f"{a['name']}: {verb} done{job}"
    return line

def purge_filter(a: Args) -> PurgeFilter:
    field = a["field"] or None
    return PurgeFilter(source=a["source"], job_type=a["type"], group=a["group"],
                       older_than_s=a["older_than_s"], field=field,
                       value=a["value"] if field else None)


def _purge_target(a: Args) -> str:
    return f"{a['queue']} [{purge_filter(a).describe()}]"


def _purge_page_args(a: Args) -> dict[str, Any]:
    flt = purge_filter(a)
    pairs = (("source", flt.source), ("type", flt.job_type), ("group", flt.group),
             ("older_than_s", flt.older_than_s), ("field", flt.field), ("value", flt.value))
    return {k: v for k, v in pairs if v is not None}


def purge_dry_run(ops: Ops, a: Args) -> Result:
    flt = purge_filter(a)
    try:
        flt.check()
    except PurgeError as exc:
        return Result(False, str(exc), 400)
    return Result(True, f"{ops.purger.count(a['queue'], flt)} jobs match ({flt.describe()}) "
                        f"in {a['queue']}")


def purge_start(ops: Ops, who: Actor, a: Args) -> Result:
    """A paced purge of the filtered set, once ``confirm`` is the dry-run count or 'purge'."""
    queue, flt = a["queue"], purge_filter(a)
    try:
        flt.check()
    except PurgeError as exc:
        return Result(False, str(exc), 400)
    bad = ops.unknown_target(queue, None)
    if bad is not None:
        return bad
    count = ops.purger.count(queue, flt)
    if count == 0:
        return Result(False, f"no job matches ({flt.describe()}); nothing was changed", 400,
                      {"dry_run": 0, "filter": flt.describe()})
    if not confirmed(a["confirm"], count, "purge"):
        return Result(False, f"not confirmed: {_how_to_confirm(who, count, 'purge')}; nothing "
                             "was changed", 400, {"dry_run": count, "filter": flt.describe()})
    try:
        task = ops.bulk.start_purge(queue, flt, a["rate"], min(a["maximum"], MAX_BULK),
                                    who.name, a["reason"])
    except ValueError as exc:
        return Result(False, str(exc), 400)
    return Result(True, f"purge {task.id} started: {count} jobs match ({flt.describe()}), "
                        f"at most {task.maximum} at {task.rate_per_s:g} jobs/s", 200,
                  {"task": task.to_dict(), "filter": flt.to_dict(), "dry_run": count})

TYPE = Param("type", help="only this job type")


ENTRIES: list[Action] = [
    Action("queue.pause", "operator",
           "Pause a queue (or one job type with ``type``): workers reserve none of its jobs.",
           "/queues/<queue>/pause", "pause", Html("/queues/<queue>/pause", "control.pause",
                                                  "overview.index"),
           ("pause",), pause, _pause_target, (TYPE,), reason_required_on_cli=True),
    Action("queue.resume", "operator",
           "Resume a paused queue (or job type); parked jobs go back to the ready list.",
           "/queues/<queue>/resume", "resume", Html("/queues/<queue>/resume", "control.resume",
                                                    "overview.index"),
           ("resume",), resume, _pause_target, (TYPE,)),
    Action("schedules.pause", "operator",
           "Pause a schedule: its ticks are skipped (not caught up on resume).",
           "/schedules/<name>/pause", "schedule_pause",
           Html("/schedules/<name>/pause", "schedules.pause", "schedules.index"),
           ("schedules", "pause"), schedule_pause, lambda a: str(a["name"]),
           cli_line=_schedule_line("pause")),
    Action("schedules.resume", "operator", "Resume a paused schedule from its next tick.",
           "/schedules/<name>/resume", "schedule_resume",
           Html("/schedules/<name>/resume", "schedules.resume", "schedules.index"),
           ("schedules", "resume"), schedule_resume, lambda a: str(a["name"]),
           cli_line=_schedule_line("resume")),
    Action("schedules.run_now", "operator",
           "Enqueue one run of the schedule's job now (its ticks are unchanged).",
           "/schedules/<name>/run-now", "schedule_run_now",
           Html("/schedules/<name>/run-now", "schedules.run_now", "schedules.index"),
           ("schedules", "run"), schedule_run_now, lambda a: str(a["name"]),
           cli_line=_schedule_line("run")),
    Action("purge.start", "operator",
           "Start a paced purge of the filtered set; ``confirm`` is the dry-run count or "
           "'purge'.",
           "/queues/<queue>/purges", "purge_start",
           Html("/purge/<queue>/start", "control.purge_start", "control.purge_page",
                follow_next=False, back_args=_purge_page_args),
           ("purge",), purge_start, _purge_target,
           (Param("source", help="ready, scheduled, waiting or dead", default=states.READY,
                  choices=SOURCES),
            Param("type", help="only this job type"),
            Param("group", help="error group (dead only)"),
            Param("older_than_s", float, "created more than this many seconds ago"),
            Param("field", help="top-level payload field ..."),
            Param("value", help="... equal to this value (as text)", strip=False),
            Param("rate", float, "jobs per second", required=True, default=0.0,
                  cli_default=500.0),
            Param("maximum", int, "at most this many jobs", default=MAX_BULK),
            Param("confirm", help="the dry-run count, or the word purge", required=True,
                  default="")),
           cli_help="remove a filtered set of ready, scheduled, waiting or dead jobs (paced; "
                    "--dry-run counts)", dry_run=purge_dry_run),
]
