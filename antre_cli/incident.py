"""``antre`` commands for the dashboard's actions (CLI parity). Every entry of the table of
actions (``antre/actions/``: pause / resume, job replay|discard|delete|run-now|extend|cancel,
purge, bulk-replay, filtered replay-now|discard, task pause|resume|cancel, lock release,
breaker reset, schedules pause|resume|run, user role|disable|enable|delete|logout-everywhere,
...) is a subcommand made by ``add_table_parsers`` and run by ``cmd_action``; ``tasks`` and
``group list|show`` (reads) are written here.

Each one changes Redis through the core (the same ``run`` the dashboard calls), writes an
audit entry with the OS user as the actor (``cli:NAME``) and the outcome (ok,
failed, refused), and answers bad input with a message on stderr and exit status 1 (2 when a
service is missing). Changes need the database (``ANTRE_DATABASE_URL``): they are audited.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from antre import Antre
from antre.actions import (
    PATH_HELP,
    Result,
    Args,
    TABLE,
    Action,
    Actor,
    BadInput,
    Ops,
    Param,
    parse,
    record,
)
from antre.control.bulk import BulkReplays
from antre.control.pause import unknown_target
from antre.scheduling.groups import Groups
from antre.observe.redact import redact_url, scrub
from antre_worker.loader import load_app

from . import flows


@dataclass
class Outcome:
    ok: bool
    message: str
    refused: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def operator() -> str:
    return f"cli:{getpass.getuser()}"


def operator_actor() -> Actor:
    return Actor(operator(), "cli", "cli")


def _app(path: str | None) -> Antre:
    return load_app(path) if path else Antre()


def run_audited(app: Antre, action: str, target: str, reason: str,
                fn: Callable[[], Outcome]) -> int:
    """Run ``fn`` and audit what came of it; 0 when it was done."""
    if app.audit is None:
        print("error: changes are audited in the database: set ANTRE_DATABASE_URL",
              file=sys.stderr)
        return 2
    try:
        out = fn()
    except redis.RedisError as exc:
        out = Outcome(False, f"Redis at {redact_url(app.redis_url)} is unreachable "
                             f"({scrub(exc, app.redis_url)}); nothing was done")
    status = "ok" if out.ok else ("refused" if out.refused else "failed")
    record(app.audit, operator_actor(), action, target, reason, status,
           {"message": out.message, **out.detail})
    print(out.message, file=sys.stdout if out.ok else sys.stderr)
    return 0 if out.ok else 1


def _refuse(message: str, **detail: Any) -> Outcome:
    return Outcome(False, f"error: {message}", True, dict(detail))


def _known(app: Antre, queue: str, job_type: str | None) -> str | None:
    return unknown_target(app.redis, queue, job_type,
                          {n: s.queue for n, s in app.handlers.items()}, app.queues())


# -- purge and bulk tasks ---------------------------------------------------------------------
def cmd_tasks(args: argparse.Namespace) -> int:
    app = _app(args.app)
    tasks = BulkReplays(app.redis, app.clock).list(args.queue)
    if args.json:
        print(json.dumps([t.to_dict() for t in tasks], indent=2))
        return 0
    for t in tasks:
        print(f"{t.id}  {t.kind:<7} {t.state:<9} {t.replayed}/{t.goal}  {t.description}  "
              f"({t.user}: {t.reason})")
    return 0


# -- the parser -------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, reason_required: bool = False,
            app: bool = True) -> None:
    if app:
        p.add_argument("--app", default=None,
                       help="pkg.module:app (default: from environment)")
    p.add_argument("--reason", required=reason_required, default="",
                   help="why (written to the audit log)")


def add_parsers(sub: Any, groups: dict[str, Any] | None = None) -> None:
    """The incident commands and the table's; ``groups``: subcommand groups made elsewhere
    (with their own ``--app``) that table entries join, e.g. ``schedules``."""
    add_table_parsers(sub, TABLE, {**(groups or {}), "group": _add_group(sub),
                                   "flow": flows.add_flow(sub)})
    _add_tasks(sub)


# -- fair-share groups (issue 23): list and show here; pause, resume, slots and clear are
# entries of the table ------------------------------------------------------------------------
def _add_group(sub: Any) -> Any:
    g = sub.add_parser("group", help="fair-share groups: list | show | pause | resume | slots "
                                     "| clear")
    g.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    gsub = g.add_subparsers(dest="group_cmd", required=True)
    ls = gsub.add_parser("list", help="a queue's busiest groups, the paused ones, the counts")
    ls.add_argument("queue")
    ls.add_argument("--json", action="store_true")
    show = gsub.add_parser("show", help="one group: waiting, slots held, paused, why held")
    show.add_argument("queue")
    show.add_argument("group")
    show.add_argument("--json", action="store_true")
    return gsub


def cmd_group(args: argparse.Namespace) -> int:
    """``antre group list QUEUE`` / ``antre group show QUEUE GROUP``."""
    app = _app(args.app)
    reads = Groups(app.redis, app.clock)
    if args.group_cmd == "list":
        view = reads.view(args.queue)
        if args.json:
            print(json.dumps(dataclasses.asdict(view), indent=1))
            return 0
        print(f"{view.queue}: {view.groups_active} group(s) hold slots, {view.groups_waiting} "
              f"have jobs waiting ({view.jobs_waiting} waiting jobs), {len(view.paused)} paused")
        for row in view.by_waiting:
            print(f"  {row.name}: {row.waiting} waiting, {row.slots_held} held"
                  f"{f', rate {row.rate}' if row.rate else ''}"
                  f"{'  [paused]' if row.paused else ''}")
        return 0
    row = reads.rows(args.queue, [args.group])[0]
    data = {**dataclasses.asdict(row), "held_why": row.held_why(app.clock())}
    print(json.dumps(data, indent=1) if args.json else
          f"{row.name}: {row.waiting} waiting, {row.slots_held} slot(s) held"
          f"{f', rate {row.rate} ({row.rate_waiting} scheduled for a start)' if row.rate else ''}"
          f"{', paused' if row.paused else ''}; {data['held_why'] or 'not held'}")
    return 0


# -- the table of operator actions (antre/actions/) -----------------------------------------
def add_table_parsers(sub: Any, table: list[Action], shared: dict[str, Any]) -> None:
    """One subcommand per CLI words of the table: ``antre WORD`` or ``antre GROUP WORD``,
    path parameters as positionals, the others as ``--options``, and ``--app`` (unless the
    group is a ``shared`` one, which has it) / ``--reason``. Entries sharing their words share
    the command (``antre task pause`` serves bulk replays and purges)."""
    groups: dict[str, Any] = dict(shared)
    for words in dict.fromkeys(a.cli for a in table):
        entries = tuple(a for a in table if a.cli == words)
        action = entries[0]
        p = _action_parser(sub, groups, table, words)
        for name in action.path_params:
            p.add_argument(name, help=PATH_HELP.get(name, ""))
        for param in action.params:
            if param.positional:
                p.add_argument(param.name, help=param.help)
            else:
                _add_option(p, param)
        if action.dry_run is not None:
            p.add_argument("--dry-run", action="store_true", help="say what it would do; "
                                                                  "change nothing")
        _common(p, reason_required=action.reason_required_on_cli, app=words[0] not in shared)
        p.set_defaults(table_actions=entries)


def _action_parser(sub: Any, groups: dict[str, Any], table: list[Action],
                   words: tuple[str, ...]) -> Any:
    mine = next(a for a in table if a.cli == words)
    helps = mine.cli_help or mine.summary
    if len(words) == 1:
        return sub.add_parser(words[0], help=helps)
    group, word = words
    if group not in groups:
        verbs = " | ".join(dict.fromkeys(a.cli[1] for a in table
                                         if a.cli[0] == group and len(a.cli) == 2))
        g = sub.add_parser(group, help=f"{group}: {verbs}")
        groups[group] = g.add_subparsers(dest=f"{group}_cmd", required=True)
    return groups[group].add_parser(word, help=helps)


def _add_option(p: argparse.ArgumentParser, param: Param) -> None:
    default = param.default if param.cli_default is None else param.cli_default
    p.add_argument(f"--{param.name.replace('_', '-')}", dest=param.name, type=param.kind,
                   required=param.cli_required, default=default,
                   choices=list(param.choices) or None, help=param.help)


def table_command(args: argparse.Namespace) -> tuple[Action, ...] | None:
    """The table entries a parsed command line was made from, if it was."""
    entries: tuple[Action, ...] | None = getattr(args, "table_actions", None)
    return entries


def _pick(entries: tuple[Action, ...], ops: Ops, values: Args) -> Action:
    """The entry whose ``cli_owns`` claims the arguments, else the one without it."""
    try:
        for action in entries:
            if action.cli_owns is not None and action.cli_owns(ops, values):
                return action
    except redis.RedisError:
        pass  # the default entry runs and its audit entry says Redis failed
    return next((a for a in entries if a.cli_owns is None), entries[0])


def _print_dry_run(result: Result) -> int:
    """A dry run changes nothing: its answer is printed, not audited."""
    if not result.ok:
        print(f"error: {result.message}", file=sys.stderr)
        return 1
    print(result.message)
    return 0


def cmd_action(args: argparse.Namespace) -> int:
    """Run the table entry the subcommand was made from, audited as ``cli:NAME``."""
    entries: tuple[Action, ...] = args.table_actions
    app = _app(args.app)
    try:
        values = parse(entries[0], vars(args), vars(args))
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ops = Ops(app)
    action = _pick(entries, ops, values)
    try:
        values = values if action.prepare is None else action.prepare(ops, values)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if action.dry_run is not None and getattr(args, "dry_run", False):
        return _print_dry_run(action.dry_run(ops, values))

    def run() -> Outcome:
        result = action.run(ops, operator_actor(), values)
        if result.ok:
            line = action.cli_line(values, result) if action.cli_line else result.message
            return Outcome(True, line, detail=result.detail)
        return _refuse(result.message, **result.detail)
    return run_audited(app, action.name, action.target(values), values["reason"], run)


def _add_tasks(sub: Any) -> None:
    p = sub.add_parser("tasks", help="bulk replays and purges of a queue, with progress")
    p.add_argument("queue")
    p.add_argument("--json", action="store_true")
    p.add_argument("--app", default=None)


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "tasks": cmd_tasks, "group": cmd_group, "flow": flows.cmd_flow,
}
