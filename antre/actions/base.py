"""The declaration machinery of the table of operator actions: ``Action`` (one operator action:
its audit name, role, routes, CLI words, arguments and ``run``), ``Param`` and ``Html`` (its
arguments and its dashboard form route), ``parse`` (a surface's input made ``Args``), ``Ops``
(the core objects an action works with), ``Actor`` and ``Result`` (who acted and what came of
it), ``perform`` (the one runner of every action from every surface: its audit entry written
first, the action run only when it was) and ``record`` (the writer of an audit entry of a
refusal, which changes nothing), with the helpers the entries of
several modules share (the confirmation of a change to many jobs, the answer to an override of
slots and rate). It knows no Flask and no argparse, and no entry: those are in the modules
beside it, by what they act on.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from antre.app import Antre
from antre.clock import Clock
from antre.control.abandoned import AbandonedRecords
from antre.control.bulk import BulkReplays
from antre.control.cancel import Cancels
from antre.control.pause import Pauses, unknown_target
from antre.maintenance.periodic import Schedules
from antre.control.purge import Purger
from antre.engine.envelope import CANCEL_TO
from antre.engine.locks import Locks
from antre.observe.finder import Finder
from antre.observe.readmodels import ReadModels
from antre.limits.gates import Gates, GateOverride
from antre.groups.control import GroupControl
from antre.groups.read import GroupOverride
from antre.limits.admission import Limits
from antre.observe.redact import scrub
from antre.stores.audit import AuditLog, AuditUnwritable
from antre.stores.idempotency import IdempotencyStore
from antre.stores.users import UserStore


MAX_REASON_CHARS = 2000

# the CLI's help for the positionals that come from a path
PATH_HELP = {"queue": "the queue", "job_id": "the job's id", "name": "its name",
             "task_id": "the task's id (see: antre tasks QUEUE)",
             "group": "the group's name, e.g. tenant:7", "kind": "type or downstream",
             "flow_id": "the flow's id (see: antre flow list)"}

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
    # a password: never in an argument list on the CLI's advice (it reads it from stdin, a
    # prompt or $ANTRE_PASSWORD, else makes one and prints it), never in an audit entry
    secret: bool = False


# ``to`` of a job's and a flow's cancel (the value is checked where the cancel is made)
CANCEL_TO_PARAM = Param("to", help="where the cancelled job(s) go: dlq or discard", default="dlq",
                        choices=CANCEL_TO)


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
    # (form field, parameter, what it is): a value typed twice (a new password); when they
    # differ the form is sent back with a flash, unaudited: a typo, not an action
    repeat: tuple[str, str, str] | None = None


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
    cli: tuple[str, ...]  # the CLI words, e.g. ("job", "extend"); () for none (see below)
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
    # the actor acts on their own account (any logged-in user: a password change): every
    # surface sets ``name`` to the actor's name, whatever the request says; no CLI command
    # (``cli=()``), whose actor is an OS user, not a dashboard one
    self_service: bool = False

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"<(?:[^:>]+:)?([^>]+)>", self.api))


def parse(action: Action, path: Mapping[str, Any], body: Mapping[str, Any]) -> Args:
    """The action's arguments from the URL path and a JSON body, form or CLI namespace, each
    converted to its kind (an absent or empty one is its ``default``; the CLI's defaults are
    argparse's); a value not of its kind is ``BadInput``."""
    args: Args = {name: str(path[name]) for name in action.path_params}
    args.update(parse_params(action.params, body))
    reason = _LONE_SURROGATE.sub("\ufffd", str(body.get("reason") or ""))
    args["reason"] = reason.strip()[:MAX_REASON_CHARS]
    return args


# a UTF-16 surrogate with no pair: a JSON body's "\ud800" decodes to one; it is no text
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_params(params: tuple[Param, ...], body: Mapping[str, Any]) -> Args:
    """``params`` from ``body``, as ``parse`` reads them."""
    args: Args = {}
    for p in params:
        raw = body.get(p.name)
        if raw in (None, ""):  # ``required`` is the API's (OpenAPI) and the CLI's (argparse)
            raw = p.default
        args[p.name] = None if raw is None else _convert(p, raw)
    return args


def _convert(p: Param, raw: Any) -> Any:
    if p.kind is int:
        if isinstance(raw, bool) or not re.fullmatch(r"-?\d{1,15}", str(raw).strip()):
            raise BadInput(f"{p.name} must be a whole number")
        return int(raw)
    if p.kind is float:
        try:
            value = float(raw)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a huge JSON integer
            value = math.nan
        if isinstance(raw, bool) or not math.isfinite(value):
            raise BadInput(f"{p.name} must be a finite number")
        return value
    if p.kind is not str:
        raise TypeError(f"parameter {p.name}: kind {p.kind.__name__} is not one of str, int, "
                        "float")
    text = str(raw)
    if _LONE_SURROGATE.search(text):
        raise BadInput(f"{p.name} holds a lone UTF-16 surrogate (such as \\ud800), which is "
                       "not text; nothing was changed")
    return text.strip() if p.strip else text


class Ops:
    """The core objects an action works with, on one app's Redis and clock."""

    def __init__(self, app: Antre, clock: Clock | None = None,
                 reads: ReadModels | None = None,
                 idempotency: IdempotencyStore | None = None,
                 users: UserStore | None = None,
                 renew_session: Callable[[str], None] | None = None,
                 check_password: Callable[[str, str], Result | None] | None = None) -> None:
        self.app = app
        self.clock: Clock = clock or app.clock
        self.reads = reads or ReadModels(app.redis, self.clock)
        self._idempotency = idempotency
        self._users = users
        # the dashboard's: a change to your own account ends your sessions but this one
        self.renew_session = renew_session
        # the dashboard's: is this a user's current password, limited like logins (None: yes;
        # else the refusal, 403 or 429); without it nobody changes their own password
        self.check_password = check_password

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
    def flow(self) -> Limits:
        return Limits(self.redis, self.clock)

    @property
    def gates(self) -> Gates:  # type and downstream limits held at reserve
        return Gates(self.redis, self.clock, self.app.scripts)

    @property
    def groups(self) -> GroupControl:  # fair-share groups
        return GroupControl(self.redis, self.clock, self.app.scripts, self.pauses)

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
    """The writer of an audit entry for a refusal, which changes nothing (a change is
    ``perform``'s), from any surface. Raises ``AuditUnwritable``."""
    log.record(who.name, who.role, action, target, reason, outcome, detail, who.remote_addr)


log = logging.getLogger("antre.actions")

#: The status of a change refused because its audit entry could not be written.
AUDIT_UNWRITTEN_STATUS = 503


def audit_unwritten(why: object) -> Result:
    """The answer to a change whose audit entry could not be written: nothing was done."""
    return Result(False, f"the audit log could not be written ({why}), so nothing was "
                         "changed: changes are made only once they are recorded; try again "
                         "when the database is back", AUDIT_UNWRITTEN_STATUS,
                  {"audit": "unwritten"})


def perform(action: Action, ops: Ops, who: Actor, args: Args, audit: AuditLog | None,
            seen: Callable[[AuditUnwritable | None], None] | None = None,
            describe: Callable[[Exception], str] | None = None) -> Result:
    """Run ``action`` for ``who``: the one runner of the table's entries, from the dashboard,
    the JSON API and the CLI. The audit entry is written first (outcome ``started``); when it
    cannot be, the action does not run and the answer is ``audit_unwritten`` (503). Then the
    action runs and the entry gets its outcome and figures. ``seen``: told whether the
    database took the entry (the dashboard's outage banner); ``describe``: the words of the
    failed entry of an exception (``audited``)."""
    # the CLI records the reason as typed (empty when none), the dashboard None for none
    reason = args.get("reason") or ("" if who.via == "cli" else None)
    return audited(audit, who, action.name, action.target(args), reason,
                   lambda: action.run(ops, who, args), seen, describe)


def audited(audit: AuditLog | None, who: Actor, action: str, target: str, reason: str | None,
            fn: Callable[[], Result],
            seen: Callable[[AuditUnwritable | None], None] | None = None,
            describe: Callable[[Exception], str] | None = None) -> Result:
    """``fn`` (a change named ``action`` on ``target``), recorded before it runs: ``perform``'s
    way, for a change outside the table too. An exception from ``fn`` (Redis unreachable) is
    recorded as failed, in the words of ``describe`` (else its type and scrubbed text), and
    raised again."""
    if audit is None:
        return audit_unwritten("no database is configured (ANTRE_DATABASE_URL)")
    try:
        entry = audit.start(who.name, who.role, action, target, reason, who.remote_addr)
    except AuditUnwritable as exc:
        log.error("audit entry not written (%s): %s %s refused, nothing was changed",
                  exc, action, target)
        if seen is not None:
            seen(exc)
        return audit_unwritten(exc)
    if seen is not None:
        seen(None)
    try:
        result = fn()
    except Exception as exc:
        said = describe(exc) if describe is not None else f"{type(exc).__name__}: {scrub(exc)}"
        _finish(audit, entry, action, target, "failed", {"message": said})
        raise
    _finish(audit, entry, action, target, outcome_of(result, who.via),
            {"message": result.message, **result.detail})
    return result


def _finish(audit: AuditLog, entry: int, action: str, target: str, outcome: str,
            detail: dict[str, Any]) -> None:
    try:
        audit.finish(entry, outcome, detail)
    except AuditUnwritable as exc:  # the change ran: its entry says 'started'
        log.error("audit entry %d (%s %s) keeps outcome 'started': its outcome %s could not "
                  "be written (%s)", entry, action, target, outcome, exc)

# -- shared by the entries ----------------------------------------------------------------------
def _note(a: Args) -> dict[str, Any] | None:
    return {"reason": a["reason"]} if a["reason"] else None


def _job_target(a: Args) -> str:
    return f"{a['queue']}/{a['job_id']}"


def describe_override(over: GroupOverride | GateOverride, subject: str,
                      revert_after_s: float | None, held: str) -> Result:
    """The answer to an operator's override of slots and/or rate (a fair-share group's, a job
    type's or a downstream's): ``subject`` ('group tenant:7 in jobs'), what it sets, for how
    long and ``held`` (where and from when it holds), with the override's slots, rate and end
    as the audit entry's figures."""
    parts = ([f"{over.slots} slots"] if over.slots is not None else []) + \
        ([f"rate {over.rate}"] if over.rate else [])
    until = f" for {revert_after_s:g} s" if over.until_ms else " until cleared"
    return Result(True, f"{subject}: {', '.join(parts)}{until} ({held})", 200,
                  {"slots": over.slots, "rate": over.rate, "until_ms": over.until_ms})

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
