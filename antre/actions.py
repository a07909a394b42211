"""The table of operator actions: each change an operator makes (pause, cancel, extend,
release, ...) declared once, with its audit name, minimum role, arguments (typed, with help
text), target and ``run`` against the core objects. The dashboard's HTML route, its JSON API
route with the OpenAPI entry (``webapp/table_routes.py``) and the ``antre`` subcommand
(``antre_cli/incident.py``) are all built from ``TABLE``: a new action is one ``Action`` in it.

This module knows no Flask and no argparse; a surface parses its input into ``Args`` (with
``parse``), runs the action with ``Ops`` and the ``Actor`` who asked, and writes the audit
entry with ``record``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from antre.app import Antre
from antre.clock import Clock
from antre.control.abandoned import RESOLUTIONS, AbandonedRecords, ResolveError
from antre.control.bulk import BulkReplays, TaskNotFound, TaskStateError
from antre.control import edit
from antre.control.cancel import CancelError, Cancels
from antre.control.groups import GroupControl, GroupError
from antre.control.edit import EditPlan, ReplayEdits
from antre.control.pause import PauseError, Pauses, unknown_target
from antre.control.periodic import Schedules
from antre.control.purge import SOURCES, PurgeError, PurgeFilter, Purger
from antre.engine.locks import Locks
from antre.errors import LeaseLost
from antre.limits.flow import FlowControl
from antre.observe.alerts import AlertQuiet, AlertThresholds
from antre.observe.finder import Finder
from antre.observe.incidents import Incident, incident_view
from antre.observe.readmodels import MAX_EPOCH_MS, WINDOWS_MS, DeadFilter, PauseInfo, ReadModels
from antre.stores.audit import AuditLog
from antre.stores.idempotency import IdempotencyStore
from antre.stores.sql import ROLES
from antre.stores.users import UnknownUser, UserStore

MAX_EXTEND_S = 24 * 3600
MAX_REASON_CHARS = 2000
# the CLI's help for the positionals that come from a path
PATH_HELP = {"queue": "the queue", "job_id": "the job's id", "name": "its name",
             "task_id": "the task's id (see: antre tasks QUEUE)",
             "group": "the group's name, e.g. tenant:7"}

Args = dict[str, Any]


@dataclass
class Result:
    """What came of an action: the message the operator reads, the HTTP status the API
    answers, and the figures written to the audit entry."""
    ok: bool
    message: str
    status: int = 200
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message, **self.detail}


@dataclass(frozen=True)
class Actor:
    """Who acted: a dashboard user (``via='dashboard'``) or ``cli:NAME`` (``via='cli'``)."""
    name: str
    role: str | None
    via: str = "dashboard"
    remote_addr: str = ""


@dataclass(frozen=True)
class Param:
    """One argument of an action. Path parameters (``<queue>`` in ``api``) are positionals on
    the CLI; the others are JSON body / form fields and ``--options``."""
    name: str
    kind: type = str  # str, int or float
    help: str = ""
    required: bool = False
    default: Any = None
    cli_default: Any = None
    cli_required: bool = False
    positional: bool = False  # a positional on the CLI although not in the URL path
    strip: bool = True  # text: leading and trailing blanks dropped
    choices: tuple[str, ...] = ()  # offered by the CLI; the action checks the value itself


@dataclass(frozen=True)
class Html:
    """The dashboard's form route: POST ``path`` (endpoint ``endpoint``), flash the message,
    redirect (303) to ``back`` (or the form's local ``next``). ``confirm``: the form must
    carry ``confirm`` equal to the value of that parameter or the given word."""
    path: str
    endpoint: str
    back: str
    follow_next: bool = True
    confirm: tuple[str, str, str] | None = None  # (parameter, what it is, the word)
    partial: str | None = None  # for htmx: the refreshed piece of page (webapp's PARTIALS)
    back_args: Callable[[Args], dict[str, Any]] | None = None  # ``back``'s URL arguments


class BadInput(ValueError):
    """An argument is missing or not of its kind: a 400 / exit status 1 naming it."""


@dataclass(frozen=True)
class Action:
    name: str  # the audit action name
    role: str
    summary: str  # one line: the OpenAPI summary and the CLI help
    api: str  # the JSON API path under /api, e.g. /queues/<queue>/pause
    api_name: str  # the API endpoint name (``api.<api_name>``)
    html: Html
    cli: tuple[str, ...]  # the CLI words, e.g. ("job", "extend")
    run: Callable[[Ops, Actor, Args], Result]
    target: Callable[[Args], str]
    params: tuple[Param, ...] = ()
    reason_required_on_cli: bool = False
    # what the CLI prints on success when its line predates the table (scripts parse it)
    cli_line: Callable[[Args, Result], str] | None = None
    # entries sharing CLI words (``antre task pause`` serves bulk replays and purges): the
    # first whose ``cli_owns`` says yes runs, else the one without ``cli_owns``
    cli_owns: Callable[[Ops, Args], bool] | None = None
    cli_help: str | None = None  # the command's help when it is not ``summary``
    # what ``--dry-run`` prints instead of acting (the CLI adds the flag when it is set)
    dry_run: Callable[[Ops, Args], Result] | None = None
    # the arguments completed with what needs the core (a DLQ filter's window from the
    # clock), run by every surface before ``target`` and ``run``; ``BadInput`` for bad ones
    prepare: Callable[[Ops, Args], Args] | None = None

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"<(?:[^:>]+:)?([^>]+)>", self.api))


def parse(action: Action, path: Mapping[str, Any], body: Mapping[str, Any]) -> Args:
    """The action's arguments from the URL path and a JSON body, form or CLI namespace, each
    converted to its kind (an absent or empty one is its ``default``; the CLI's defaults are
    argparse's); a value not of its kind is ``BadInput``."""
    args: Args = {name: str(path[name]) for name in action.path_params}
    for p in action.params:
        raw = body.get(p.name)
        if raw in (None, ""):  # ``required`` is the API's (OpenAPI) and the CLI's (argparse)
            raw = p.default
        args[p.name] = None if raw is None else _convert(p, raw)
    args["reason"] = str(body.get("reason") or "").strip()[:MAX_REASON_CHARS]
    return args


def _convert(p: Param, raw: Any) -> Any:
    if p.kind is int:
        if isinstance(raw, bool) or not re.fullmatch(r"-?\d{1,15}", str(raw).strip()):
            raise BadInput(f"{p.name} must be a whole number")
        return int(raw)
    if p.kind is float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(raw, bool) or not math.isfinite(value):
            raise BadInput(f"{p.name} must be a finite number")
        return value
    if p.kind is not str:
        raise TypeError(f"parameter {p.name}: kind {p.kind.__name__} is not one of str, int, "
                        "float")
    return str(raw).strip() if p.strip else str(raw)


class Ops:
    """The core objects an action works with, on one app's Redis and clock."""

    def __init__(self, app: Antre, clock: Clock | None = None,
                 reads: ReadModels | None = None,
                 idempotency: IdempotencyStore | None = None,
                 users: UserStore | None = None,
                 renew_session: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.clock: Clock = clock or app.clock
        self.reads = reads or ReadModels(app.redis, self.clock)
        self._idempotency = idempotency
        self._users = users
        # the dashboard's: a change to your own account ends your sessions but this one
        self.renew_session = renew_session

    @property
    def users(self) -> UserStore | None:
        """The dashboard's user store, else the app's (None without a database)."""
        return self._users or self.app.users

    @property
    def redis(self) -> Redis:
        return self.app.redis

    @property
    def pauses(self) -> Pauses:
        return Pauses(self.redis, self.clock, self.app.scripts)

    @property
    def cancels(self) -> Cancels:
        return Cancels(self.redis, self.clock, self.app.scripts)

    @property
    def purger(self) -> Purger:
        return Purger(self.redis, self.clock, self.app.scripts)

    @property
    def bulk(self) -> BulkReplays:
        return BulkReplays(self.redis, self.clock)

    @property
    def locks(self) -> Locks:
        return Locks(self.redis, clock=self.clock)

    @property
    def schedules(self) -> Schedules:
        return Schedules(self.redis, clock=self.clock, scripts=self.app.scripts)

    @property
    def flow(self) -> FlowControl:
        return FlowControl(self.redis, self.clock)

    @property
    def groups(self) -> GroupControl:  # fair-share groups (issue 23)
        return GroupControl(self.redis, self.clock, self.app.scripts)

    @property
    def idempotency(self) -> IdempotencyStore | None:
        """The dashboard's store, else the app's (None without a database)."""
        return self._idempotency or self.app.idempotency

    def abandoned(self) -> AbandonedRecords | None:
        store = self.idempotency
        if store is None:
            return None
        return AbandonedRecords(Finder(self.redis, self.clock, store), store)

    def unknown_target(self, queue: str, job_type: str | None) -> Result | None:
        """A 400 naming what exists when ``queue`` (or ``job_type`` in it) is not known."""
        message = unknown_target(self.redis, queue, job_type,
                                 {n: s.queue for n, s in self.app.handlers.items()},
                                 self.app.queues())
        return None if message is None else Result(False, message, 400)


# -- the audit entry --------------------------------------------------------------------------
def outcome_of(result: Result, via: str) -> str:
    """ok, refused or failed. The dashboard calls a conflict (the state changed, 404/409)
    failed and bad input or a missing service refused; the CLI answers every unsuccessful
    request as a refusal (exit status 1)."""
    if result.ok:
        return "ok"
    if via == "cli" or result.status in (400, 403, 503):
        return "refused"
    return "failed"


def record(log: AuditLog, who: Actor, action: str, target: str | None, reason: str | None,
           outcome: str, detail: dict[str, Any] | None) -> None:
    """The one writer of an audit entry for an operator's change, from any surface."""
    log.record(who.name, who.role, action, target, reason, outcome, detail, who.remote_addr)


# -- the actions ------------------------------------------------------------------------------
def _note(a: Args) -> dict[str, Any] | None:
    return {"reason": a["reason"]} if a["reason"] else None


def _job_target(a: Args) -> str:
    return f"{a['queue']}/{a['job_id']}"


def _pause_target(a: Args) -> str:
    return a["queue"] if a.get("type") is None else f"{a['queue']}/{a['type']}"


def _plain_pause(info: PauseInfo) -> dict[str, Any]:
    return {"queue": info.queue, "job_type": info.job_type, "by": info.by, "at_ms": info.at_ms,
            "reason": info.reason}


def replay(ops: Ops, who: Actor, a: Args) -> Result:
    queue, job_id = a["queue"], a["job_id"]
    before = ops.reads.count_dead(queue)
    job = ops.reads.job(queue, job_id)
    spec = ops.app.handlers.get(job.type) if job is not None else None
    warn = ""
    if job is not None and spec is not None and not spec.idempotent:
        warn = (f" Warning: handler '{job.type}' is marked not idempotent; its effects may "
                "happen twice.")
    if not ops.app.queue(queue).replay(job_id, who.name, _note(a)):
        return Result(False, f"job {job_id} is not in the dead-letter queue of {queue} "
                             "(already replayed or discarded?); nothing was changed", 409,
                      {"dead_before": before})
    return Result(True, f"job {job_id} replayed: back in the ready list with its "
                        f"attempts reset and its idempotency key kept.{warn}", 200,
                  {"dead_before": before, "dead_after": ops.reads.count_dead(queue)})


def discard(ops: Ops, who: Actor, a: Args) -> Result:
    queue, job_id = a["queue"], a["job_id"]
    before = ops.reads.count_dead(queue)
    if not ops.app.queue(queue).discard(job_id, who.name, _note(a)):
        return Result(False, f"job {job_id} is not in the dead-letter queue of {queue}; "
                             "nothing was changed", 409, {"dead_before": before})
    return Result(True, f"job {job_id} discarded", 200,
                  {"dead_before": before, "dead_after": ops.reads.count_dead(queue)})


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


def delete_job(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        where = ops.purger.delete(a["queue"], a["job_id"])
    except PurgeError as exc:
        return Result(False, str(exc), 409)
    return Result(True, f"job {a['job_id']} deleted from {where}", 200, {"was": where})


def run_now(ops: Ops, who: Actor, a: Args) -> Result:
    if not ops.app.queue(a["queue"]).run_now(a["job_id"], who.name, _note(a)):
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
        deadline = ops.app.queue(queue).extend(job_id, epoch, seconds * 1000, mode="add",
                                               actor=who.name, note=_note(a))
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


def release_lock(ops: Ops, who: Actor, a: Args) -> Result:
    key, token = a["key"], a["token"] or ""
    if not token:
        return Result(False, "the holder token is required", 400)
    if not ops.locks.release_token(key, token):
        return Result(False, f"lock {key!r} is no longer held by that token (released, "
                             "expired or re-taken since); nothing was changed", 409)
    return Result(True, f"lock {key!r} released", 200, {"token": token})


def reset_breaker(ops: Ops, who: Actor, a: Args) -> Result:
    name = a["name"]
    flow = ops.flow
    known = {b.name: b for b in flow.breakers()}
    if name not in known:
        return Result(False, f"no circuit breaker named {name!r}; known: "
                             f"{', '.join(sorted(known)) or 'none'}", 404)
    state = known[name]
    flow.breaker(name, state.failure_threshold, state.window_s, state.cooldown_s).reset()
    return Result(True, f"circuit breaker {name} closed by hand (was {state.state})", 200,
                  {"before": state.state, "after": "closed"})


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


MAX_BULK = 1_000_000


def confirmed(typed: str, count: int, word: str) -> bool:
    """The typed confirmation of a change to ``count`` jobs: the count, or ``word``."""
    typed = (typed or "").strip()
    return typed == str(count) or typed.lower() == word


def _how_to_confirm(who: Actor, count: int, word: str) -> str:
    """The confirmation asked for, in the words of the surface the operator is on."""
    if who.via == "cli":
        return (f"pass --confirm {count} (the number of matching jobs) or --confirm {word}")
    return f"type {count} (the number of matching jobs) or the word '{word}'"


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


def resolve_abandoned(ops: Ops, who: Actor, a: Args) -> Result:
    """Mark an abandoned idempotency record failed, or reset it (``antre.control.abandoned``);
    SQL only: a Redis outage does not stop it."""
    key, to = a["key"], a["to"]
    records = ops.abandoned()
    if records is None:
        return Result(False, "idempotency records live in the database: set "
                             "ANTRE_DATABASE_URL", 503)
    try:
        was = records.resolve(key, to, by=who.name, reason=a["reason"])
    except ResolveError as exc:
        return Result(False, str(exc), 409 if to in RESOLUTIONS else 400)
    done = "marked failed" if to == "failed" else "reset: a resend runs afresh"
    return Result(True, f"abandoned idempotency record {key!r} {done}", 200,
                  {"to": to, "job_id": was.job_id, "fence": was.fence,
                   "abandoned_since_ms": was.since_ms})


# -- fair-share groups (issue 23): pause / resume one, override its slots ----------------------
def _group_target(a: Args) -> str:
    return f"{a['queue']}/{a['group']}"


def _group_back(a: Args) -> dict[str, Any]:
    return {"group": a["group"]}  # (the queue is added from the path)


def _group_refused(exc: GroupError) -> Result:
    text = str(exc)
    return Result(False, f"{text}; nothing was changed",
                  409 if "already" in text or "not paused" in text else 400)


def group_pause(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        ops.groups.pause(a["queue"], a["group"], who.name, a["reason"])
    except GroupError as exc:
        return _group_refused(exc)
    return Result(True, f"group {a['group']} in {a['queue']} paused: workers start none of its "
                        "jobs until it is resumed (running ones finish)")


def group_resume(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        moved = ops.groups.resume(a["queue"], a["group"])
    except GroupError as exc:
        return _group_refused(exc)
    return Result(True, f"group {a['group']} in {a['queue']} resumed ({moved} parked jobs back "
                        "in the ready list)", 200, {"unparked": moved})


def group_slots(ops: Ops, who: Actor, a: Args) -> Result:
    if a["slots"] is None:
        return Result(False, "pass slots: a whole number, 0 holds the group; nothing was "
                             "changed", 400)
    try:
        over = ops.groups.set_slots(a["queue"], a["group"], a["slots"], who.name, a["reason"],
                                    a["revert_after_s"])
    except GroupError as exc:
        return _group_refused(exc)
    until = f" until {over.until_ms} ms" if over.until_ms else " until cleared"
    return Result(True, f"group {a['group']} in {a['queue']}: {over.slots} slots{until}", 200,
                  {"slots": over.slots, "until_ms": over.until_ms})


def group_clear(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        now = ops.groups.clear_slots(a["queue"], a["group"])
    except GroupError as exc:
        return _group_refused(exc)
    return Result(True, f"group {a['group']} in {a['queue']}: override ended, {now} slots (its "
                        "jobs' own)", 200, {"slots": now})


def _group_actions() -> list[Action]:
    base = "/queues/<queue>/groups/<group>"
    return [
        Action("group.pause", "operator",
               "Pause one fair-share group: workers start none of its jobs (running ones "
               "finish); 409 when it is paused already.",
               f"{base}/pause", "group_pause",
               Html("/groups/<queue>/<group>/pause", "groups.pause", "groups.group",
                    back_args=_group_back),
               ("group", "pause"), group_pause, _group_target, reason_required_on_cli=True),
        Action("group.resume", "operator",
               "Resume a paused group; its parked jobs go back to the ready list.",
               f"{base}/resume", "group_resume",
               Html("/groups/<queue>/<group>/resume", "groups.resume", "groups.group",
                    back_args=_group_back),
               ("group", "resume"), group_resume, _group_target),
        Action("group.slots", "operator",
               "Override a group's slots (how many of its jobs may be ready or running at "
               "once; 0 holds it), until cleared or for ``revert_after_s``; a raise starts "
               "waiting jobs at once.",
               f"{base}/slots", "group_slots",
               Html("/groups/<queue>/<group>/slots", "groups.slots", "groups.group",
                    back_args=_group_back),
               ("group", "slots"), group_slots, _group_target,
               (Param("slots", int, "slots: 0 holds the group", required=True,
                      cli_required=True),
                Param("revert_after_s", float, "the override ends by itself after this many "
                                               "seconds")),
               reason_required_on_cli=True),
        Action("group.clear", "operator",
               "End the operator's override of a group's slots (its jobs' own apply again).",
               f"{base}/slots/clear", "group_clear",
               Html("/groups/<queue>/<group>/slots/clear", "groups.clear", "groups.group",
                    back_args=_group_back),
               ("group", "clear"), group_clear, _group_target),
    ]


TYPE = Param("type", help="only this job type")
# -- the incident view and edited replays (issue 25) -------------------------------------------
#: How long a silence may last (label -> seconds), as the dashboard and the CLI offer it.
SILENCES = {"15 min": 900, "1 hour": 3600, "4 hours": 14_400, "24 hours": 86_400}


def _incident(ops: Ops, incident_id: str) -> Incident | None:
    iv = incident_view(ops.redis, ops.clock)
    return next((i for i in iv.open + iv.quiet if i.id == incident_id), None)


def _quiet_target(ops: Ops, a: Args) -> Incident | Result:
    if not a["reason"]:
        return Result(False, "say why (the reason is required); nothing was changed", 400)
    inc = _incident(ops, a["id"])
    if inc is None:
        return Result(False, f"no open incident {a['id']!r} (it resolved?); nothing was "
                             "changed", 404)
    return inc


def incident_ack(ops: Ops, who: Actor, a: Args) -> Result:
    inc = _quiet_target(ops, a)
    if isinstance(inc, Result):
        return inc
    AlertQuiet(ops.redis, ops.clock).ack(inc.id, inc.since, who.name, a["reason"])
    return Result(True, f"{inc.title} ({inc.queue}) acknowledged until it resolves")


def incident_silence(ops: Ops, who: Actor, a: Args) -> Result:
    if a["for"] not in SILENCES:
        return Result(False, f"silence for one of: {', '.join(SILENCES)}; nothing was "
                             "changed", 400)
    inc = _quiet_target(ops, a)
    if isinstance(inc, Result):
        return inc
    q = AlertQuiet(ops.redis, ops.clock).silence(inc.id, SILENCES[a["for"]], who.name,
                                                 a["reason"])
    return Result(True, f"{inc.title} ({inc.queue}) silenced for {a['for']}: its webhook "
                        "waits until then", 200, {"until_ms": q.until_ms})


def incident_reopen(ops: Ops, who: Actor, a: Args) -> Result:
    if not AlertQuiet(ops.redis, ops.clock).clear(a["id"]):
        return Result(False, f"{a['id']} was neither acknowledged nor silenced", 404)
    return Result(True, f"{a['id']} is open again")


def alert_threshold(ops: Ops, who: Actor, a: Args) -> Result:
    queue, name, raw = a["queue"], a["field"], a["value"] or ""
    if queue not in ops.reads.queue_names():
        return Result(False, f"no queue named {queue!r}; nothing was changed", 400)
    try:
        value = AlertThresholds(ops.redis).set(queue, name, raw)
    except ValueError as exc:
        return Result(False, f"{exc}; nothing was changed", 400)
    said = "the default" if raw == "" else ("off" if value is None else f"{value:g}")
    return Result(True, f"alert threshold {name} of queue {queue} set to {said}; the next "
                        "alert check uses it", 200, {"field": name, "value": raw})


def edit_plan(ops: Ops, a: Args) -> EditPlan | Result:
    """The dry run of a replay of ``a['job_id']`` with ``a['payload']`` (JSON text)."""
    job = ops.reads.job(a["queue"], a["job_id"])
    if job is None:
        return Result(False, f"no job {a['job_id']} in queue {a['queue']}", 404)
    new_key = a["new_key"] or ""
    store = ops.idempotency
    record = store.lookup(new_key.strip() or job.idempotency_key) if store else None
    known = (job.type in ops.app.handlers) if ops.app.handlers else None
    return edit.plan(a["queue"], job, a["payload"] or "", new_key, record, known,
                     ReplayEdits(ops.app.queue(a["queue"])).unique(job.id))


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
    if ReplayEdits(ops.app.queue(a["queue"])).replay(p, who.name, a["reason"],
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
    into = f" into queue {task.target}" if task.target else ""
    guard = (f"; it pauses itself if more than {task.stop_pct:g}% of the replayed jobs fail "
             f"again (judged after {task.min_sample})" if task.stop_pct else "")
    return Result(True, f"bulk replay {task.id} started: {task.total} jobs match "
                        f"({flt.describe()}), at most {task.maximum} at "
                        f"{task.rate_per_s:g} jobs/s{into}{guard}."
                        f"{_not_idempotent_warning(ops, flt)}", 200,
                  {"task": task.to_dict(), "filter": flt.describe(), "dry_run": task.total,
                   "dead_before": ops.reads.count_dead(queue)})


def replay_filtered_now(ops: Ops, who: Actor, a: Args) -> Result:
    flt = a["filter"]
    out = ops.bulk.replay_filtered_now(a["queue"], flt, max(0, min(a["maximum"], MAX_BULK)),
                                       who.name)
    return Result(True, f"replayed {out.done} dead jobs ({flt.describe()})"
                        + _not_idempotent_warning(ops, flt), 200,
                  {"filter": flt.describe(), **out.to_dict()})


def discard_filtered_dry_run(ops: Ops, a: Args) -> Result:
    flt = a["filter"]
    return Result(True, f"{ops.bulk.dry_run(a['queue'], flt)} dead jobs match "
                        f"({flt.describe()}) in {a['queue']}")


def discard_filtered(ops: Ops, who: Actor, a: Args) -> Result:
    queue, flt = a["queue"], a["filter"]
    count = ops.bulk.dry_run(queue, flt)
    if not confirmed(a["confirm"], count, "discard"):
        return Result(False, f"not confirmed: {_how_to_confirm(who, count, 'discard')}; "
                             "nothing was changed", 400, {"dry_run": count})
    out = ops.bulk.discard_filtered(queue, flt, max(0, min(a["maximum"], MAX_BULK)), who.name)
    return Result(True, f"discarded {out.done} dead jobs ({flt.describe()})", 200,
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


# -- dashboard users (admin): role, disable / enable, delete, log out everywhere -------------
def _users(ops: Ops) -> UserStore | Result:
    store = ops.users
    if store is None:
        return Result(False, "users live in the database: set ANTRE_DATABASE_URL", 503)
    return store


def user_set_role(ops: Ops, who: Actor, a: Args) -> Result:
    name, role = a["name"], a["role"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name and role != "admin":
        return Result(False, "you cannot take the admin role from yourself", 400)
    before = store.get(name)
    try:
        store.set_role(name, role)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    except ValueError as exc:
        return Result(False, f"{exc}; nothing was changed", 400)
    if who.name == name and ops.renew_session is not None:
        ops.renew_session(name)  # the change ends sessions; not this one
    return Result(True, f"user {name} is now {role}", 200,
                  {"role_before": before.role if before else None, "role_after": role})


def _set_disabled(ops: Ops, who: Actor, name: str, disabled: bool) -> Result:
    """A disabled user cannot log in (browser or HTTP Basic) and their open sessions end on
    their next request; enabling gives the same account back."""
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name and disabled:
        return Result(False, "you cannot disable yourself", 400)
    try:
        store.set_disabled(name, disabled)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    return Result(True, f"user {name} {'disabled' if disabled else 'enabled'}")


def user_disable(ops: Ops, who: Actor, a: Args) -> Result:
    return _set_disabled(ops, who, a["name"], True)


def user_enable(ops: Ops, who: Actor, a: Args) -> Result:
    return _set_disabled(ops, who, a["name"], False)


def user_delete(ops: Ops, who: Actor, a: Args) -> Result:
    name = a["name"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name:
        return Result(False, "you cannot delete yourself", 400)
    if not store.delete(name):
        return Result(False, f"no user {name}", 400)
    return Result(True, f"user {name} deleted")


def user_end_sessions(ops: Ops, who: Actor, a: Args) -> Result:
    """Log a user out everywhere: every session signed before now ends."""
    name = a["name"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    try:
        store.end_sessions(name)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    return Result(True, f"every session of {name} is logged out")


def _user_actions() -> list[Action]:
    def entry(name: str, summary: str, verb: str, endpoint: str, word: str,
              run: Callable[[Ops, Actor, Args], Result],
              params: tuple[Param, ...] = ()) -> Action:
        return Action(name, "admin", summary, f"/users/<name>/{verb}", f"user_{endpoint}",
                      Html(f"/users/<name>/{verb}", name, "users.index", follow_next=False),
                      ("user", word), run, lambda a: str(a["name"]), params,
                      cli_help=summary)
    return [
        entry("users.set_role", "Change a user's role (admin).", "role", "role", "role",
              user_set_role,
              (Param("role", help="viewer, operator or admin", required=True, default="",
                     positional=True, choices=ROLES),)),
        entry("users.disable", "Disable a user: no login, open sessions end (admin).",
              "disable", "disable", "disable", user_disable),
        entry("users.enable", "Enable a disabled user again (admin).", "enable", "enable",
              "enable", user_enable),
        entry("users.delete", "Delete a user (admin).", "delete", "delete", "delete",
              user_delete),
        entry("users.logout_everywhere", "End every open session of a user (admin).",
              "logout-everywhere", "logout_everywhere", "logout-everywhere",
              user_end_sessions),
    ]


TABLE: list[Action] = [
    Action("dlq.replay", "operator",
           "Replay one dead job (attempts reset, idempotency key kept).",
           "/queues/<queue>/jobs/<job_id>/replay", "replay_one",
           Html("/dlq/<queue>/<job_id>/replay", "dlq.replay", "dlq.index"),
           ("job", "replay"), replay, _job_target),
    Action("dlq.discard", "operator", "Discard one dead job.",
           "/queues/<queue>/jobs/<job_id>/discard", "discard_one",
           Html("/dlq/<queue>/<job_id>/discard", "dlq.discard", "dlq.index"),
           ("job", "discard"), discard, _job_target),
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
    Action("job.delete", "operator",
           "Delete one ready or scheduled job; 409 when it is running, dead, done or gone.",
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
           (Param("to", help="where the job goes: dlq or discard", default="dlq",
                  choices=("dlq", "discard")),)),
    Action("locks.release", "operator",
           "Force-release a lock, only if still held by ``token`` (compare-and-delete).",
           "/locks/release", "release_lock",
           Html("/locks/release", "locks.release", "locks.index", follow_next=False,
                confirm=("key", "lock key", "release")),
           ("lock", "release"), release_lock, lambda a: str(a["key"]),
           (Param("key", help="the lock key", required=True, default="", positional=True),
            Param("token", help="the holder token (Locks page / API)", required=True,
                  default="", cli_required=True))),
    Action("flow.reset_breaker", "operator",
           "Close a circuit breaker by hand and forget its failures.",
           "/flow/breakers/<name>/reset", "reset_breaker",
           Html("/flow/breakers/<name>/reset", "overview.reset_breaker", "overview.index"),
           ("breaker", "reset"), reset_breaker, lambda a: str(a["name"])),
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
           (Param("source", help="ready, scheduled, waiting or dead", default="ready",
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
    *_task_controls(),
    Action("idempotency.resolve", "operator",
           "Resolve an abandoned idempotency record (stuck in processing, its owner's lease "
           "expired, no job with its key): ``to`` 'failed' (the result answers failed) or "
           "'reset' (forgotten: a resend runs afresh). 409 when it is not abandoned (nothing "
           "changed).",
           "/idempotency/resolve", "idempotency_resolve",
           Html("/idempotency/resolve", "idempotency.resolve", "idempotency.index",
                follow_next=False, back_args=lambda a: {"key": a["key"]}),
           ("idempotency", "resolve"), resolve_abandoned, lambda a: str(a["key"]),
           (Param("key", help="the idempotency key", required=True, default="",
                  positional=True),
            Param("to", help="failed: result answers failed; reset: forget it, a resend runs "
                             "afresh", required=True, default="", cli_required=True,
                  choices=RESOLUTIONS)),
           reason_required_on_cli=True,
           cli_help="resolve an abandoned idempotency record (stuck in processing, no job "
                    "left): --to failed | reset"),
    *_group_actions(),
    Action("incident.ack", "operator",
           "Acknowledge an incident until it resolves (who and why are shown and audited).",
           "/incidents/ack", "incident_ack",
           Html("/incident/ack", "incident.ack", "incident.index", follow_next=False),
           ("incident", "ack"), incident_ack, lambda a: str(a["id"]),
           (Param("id", help="the incident id (GET /api/incidents)", required=True,
                  default="", positional=True),),
           reason_required_on_cli=True),
    Action("incident.silence", "operator",
           "Silence an incident for a while: it leaves the count and its webhook waits.",
           "/incidents/silence", "incident_silence",
           Html("/incident/silence", "incident.silence", "incident.index", follow_next=False),
           ("incident", "silence"), incident_silence, lambda a: str(a["id"]),
           (Param("id", help="the incident id (GET /api/incidents)", required=True,
                  default="", positional=True),
            Param("for", help="how long", required=True, default="", cli_required=True,
                  choices=tuple(SILENCES))),
           reason_required_on_cli=True),
    Action("incident.unquiet", "operator",
           "Reopen an acknowledged or silenced incident.",
           "/incidents/reopen", "incident_reopen",
           Html("/incident/unquiet", "incident.unquiet", "incident.index", follow_next=False),
           ("incident", "reopen"), incident_reopen, lambda a: str(a["id"]),
           (Param("id", help="the incident id", required=True, default="", positional=True),)),
    Action("alerts.threshold", "admin",
           "Override an alert threshold for one queue (a number, 'off', or empty: the "
           "default from the environment or code).",
           "/alerts/thresholds", "alert_threshold",
           Html("/incident/thresholds", "incident.threshold", "incident.index",
                follow_next=False),
           ("alerts", "threshold"), alert_threshold,
           lambda a: f"{a['queue']}/{a['field']}",
           (Param("queue", help="the queue", required=True, default="", positional=True),
            Param("field", help="the AlertConfig field, e.g. dlq_growth_max", required=True,
                  default="", positional=True),
            Param("value", help="a number, off, or empty for the default", default=""))),
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
    *_dead_set_actions(),
    *_user_actions(),
]


def by_name(name: str) -> Action:
    return next(a for a in TABLE if a.name == name)


# -- selections: one table entry over the ticked rows of a page --------------------------------
@dataclass(frozen=True)
class SelectOp:
    """One button of a selection: ``op`` (the form's value) runs the table entry ``action`` for
    each ticked row; ``api`` / ``api_name`` / ``summary``: its JSON route, when it has one."""
    op: str
    action: str
    verb: str  # "3 jobs <verb>"
    api: str | None = None
    api_name: str | None = None
    summary: str = ""


@dataclass(frozen=True)
class Selection:
    """The action bar of a page's table: POST ``html.path`` with ``ids`` and ``op``, each id
    run through its entry (one audit entry per job, under the entry's name), one answer for
    all. A refusal of the whole request (role) is audited as ``name``."""
    name: str
    role: str
    html: Html
    ops: tuple[SelectOp, ...]
    default_op: str | None = None  # the op when the form names none (None: op is required)
    leases: bool = False  # rows are ``<epoch>:<job id>``: the lease the operator saw

    def op(self, name: str) -> SelectOp | None:
        return next((o for o in self.ops if o.op == name), None)


MAX_SELECTED = 500  # rows one selection may act on (a page holds at most 500)


def each(verb: str, ids: list[str], one: Callable[[str], Result]) -> Result:
    """``one`` per selected job (each writes its own audit entry), summed up in one result:
    ``"3 jobs replayed"``, with what went wrong for the others."""
    results = [(job_id, one(job_id)) for job_id in ids]
    done = [job_id for job_id, r in results if r.ok]
    problems = [r.message for _, r in results if not r.ok]
    message = f"{_jobs(len(done))} {verb}"
    if problems:
        message += f"; {_jobs(len(problems))} not"
    status = 200 if not problems else max(r.status for _, r in results if not r.ok)
    return Result(not problems, message, status, {"done": done, "problems": problems})


def _jobs(n: int) -> str:
    return "1 job" if n == 1 else f"{n} jobs"


SELECTIONS: list[Selection] = [
    Selection("dlq.selected", "operator",
              Html("/dlq/<queue>/selected", "dlq.selected", "dlq.index", partial="dlq"),
              (SelectOp("replay", "dlq.replay", "replayed",
                        "/queues/<queue>/selection/replay", "replay_selected",
                        "Replay the listed dead jobs; ``done`` and ``problems`` say which "
                        "were and were not."),
               SelectOp("discard", "dlq.discard", "discarded",
                        "/queues/<queue>/selection/discard", "discard_selected",
                        "Discard the listed dead jobs."))),
    Selection("scheduled.selected", "operator",
              Html("/scheduled/<queue>/selected", "scheduled.selected", "scheduled.index",
                   follow_next=False, partial="scheduled"),
              (SelectOp("run_now", "scheduled.run_now", "moved to the ready list",
                        "/queues/<queue>/selection/run-now", "run_now_selected",
                        "Move the listed scheduled jobs to the ready list now."),
               SelectOp("delete", "job.delete", "deleted")),
              default_op="run_now"),
    Selection("inflight.selected", "operator",
              Html("/inflight/<queue>/selected", "inflight.selected", "inflight.index",
                   follow_next=False, partial="inflight"),
              (SelectOp("extend", "inflight.extend", "extended",
                        "/queues/<queue>/selection/extend", "extend_selected",
                        "Extend the listed leases (``ids``: ``<epoch>:<job id>``) by N "
                        "seconds each."),
               SelectOp("cancel", "job.cancel", "asked to stop")),
              default_op="extend", leases=True),
]
