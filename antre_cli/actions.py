"""``antre`` commands for the dashboard's actions (CLI parity). Every entry of the table of
actions (``antre/actions/``: pause / resume, job replay|discard|delete|run-now|extend|cancel,
purge, bulk-replay, filtered replay-now|discard, task pause|resume|cancel, lock release,
breaker reset, schedules pause|resume|run, user role|disable|enable|delete|logout-everywhere,
...) is a subcommand made by ``add_table_parsers`` and run by ``cmd_action``; ``tasks`` and
``group list|show`` (reads) are written here.

Each one changes Redis through the core (the same ``run`` the dashboard calls) through the
core's one runner (``antre.actions.perform``): the audit entry, with the OS user as the actor
(``cli:NAME``), is written first, and the change is made only once it is; then its outcome (ok,
failed, refused). Bad input gets a message on stderr and exit status 1; a missing service or an
audit entry that cannot be written, exit status 2 and nothing done. Changes need the database
(``ANTRE_DATABASE_URL``): they are audited.
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
    SELECTIONS,
    Result,
    Args,
    TABLE,
    Action,
    Actor,
    BadInput,
    Ops,
    Param,
    AUDIT_UNWRITTEN_STATUS,
    Selection,
    SelectOp,
    audited,
    each,
    perform,
    parse,
    parse_params,
)
from antre.control.bulk import BulkReplays
from antre.control.pause import unknown_target
from antre.groups.read import Groups
from antre.observe.redact import redact_url, scrub
from antre_worker.loader import load_app

from antre.control import rekey

from . import flows, passwords


@dataclass
class Outcome:
    ok: bool
    message: str
    refused: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    unwritten: bool = False  # its audit entry could not be written: nothing was done


def operator() -> str:
    return f"cli:{getpass.getuser()}"


def operator_actor() -> Actor:
    return Actor(operator(), "cli", "cli")


def _app(path: str | None) -> Antre:
    return load_app(path) if path else Antre()


def run_audited(app: Antre, action: str, target: str, reason: str,
                fn: Callable[[], Outcome], shown: str = "") -> int:
    """Run ``fn`` and audit what came of it; 0 when it was done. ``shown``: printed after
    the message on success, never audited (a password made for the user)."""
    if app.audit is None:
        print(NO_AUDIT, file=sys.stderr)
        return 2
    out = _audited(app, action, target, reason, fn)
    print(out.message + (shown if out.ok else ""), file=sys.stdout if out.ok else sys.stderr)
    return 0 if out.ok else 2 if out.unwritten else 1


NO_AUDIT = "error: changes are audited in the database: set ANTRE_DATABASE_URL"


def _audited(app: Antre, action: str, target: str, reason: str,
             fn: Callable[[], Outcome]) -> Outcome:
    """``fn``'s outcome, recorded before it runs (``antre.actions.audited``): an audit entry
    that cannot be written is an outcome (``unwritten``: nothing was done), and so is a Redis
    outage (nothing was done)."""
    said: list[Outcome] = []

    def run() -> Result:
        out = fn()
        said.append(out)
        return Result(out.ok, out.message, 200 if out.ok else 400 if out.refused else 409,
                      out.detail)
    try:
        result = audited(app.audit, operator_actor(), action, target, reason, run,
                         describe=lambda exc: _redis_down(app, exc))
    except redis.RedisError as exc:
        return Outcome(False, _redis_down(app, exc))
    if said:
        return said[0]
    return Outcome(False, f"error: {result.message}", True, result.detail,
                   unwritten=result.status == AUDIT_UNWRITTEN_STATUS)


def _redis_down(app: Antre, exc: Exception) -> str:
    return (f"Redis at {redact_url(app.redis_url)} is unreachable "
            f"({scrub(exc, app.redis_url)}); nothing was done")


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
    shared = {**(groups or {}), "group": _add_group(sub), "flow": flows.add_flow(sub)}
    made = add_table_parsers(sub, TABLE, shared)
    add_selection_parsers(sub, SELECTIONS, TABLE, made, set(shared))
    _add_tasks(sub)
    _add_keys(sub)


# -- fair-share groups: list and show here; pause, resume, limit, slots and clear
# are entries of the table --------------------------------------------------------------------
def _add_group(sub: Any) -> Any:
    g = sub.add_parser("group", help="fair-share groups: list | show | pause | resume | limit "
                                     "| slots | clear")
    g.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    gsub = g.add_subparsers(dest="group_cmd", required=True)
    ls = gsub.add_parser("list", help="a queue's busiest groups, the paused ones, the counts")
    ls.add_argument("queue")
    ls.add_argument("--json", action="store_true", help="JSON output")
    show = gsub.add_parser("show", help="one group: waiting, slots held, paused, why held")
    show.add_argument("queue")
    show.add_argument("group")
    show.add_argument("--json", action="store_true", help="JSON output")
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
def add_table_parsers(sub: Any, table: list[Action], shared: dict[str, Any]) -> dict[str, Any]:
    """One subcommand per CLI words of the table: ``antre WORD`` or ``antre GROUP WORD``,
    path parameters as positionals, the others as ``--options`` (a ``secret`` one as
    ``--password``, ``--password-stdin``, ``--prompt``), and ``--app`` (unless the group is a
    ``shared`` one, which has it) / ``--reason``. Entries sharing their words share the
    command (``antre task pause`` serves bulk replays and purges); an entry without words
    (``cli=()``: your own account) has none. Returns every group's subparsers."""
    groups: dict[str, Any] = dict(shared)
    for words in dict.fromkeys(a.cli for a in table if a.cli):
        entries = tuple(a for a in table if a.cli == words)
        action = entries[0]
        p = _action_parser(sub, groups, table, words)
        for name in action.path_params:
            p.add_argument(name, help=PATH_HELP.get(name, ""))
        for param in action.params:
            if param.secret:
                passwords.add_options(p, param.name)
            elif param.positional:
                p.add_argument(param.name, help=param.help)
            else:
                _add_option(p, param)
        if action.dry_run is not None:
            p.add_argument("--dry-run", action="store_true", help="say what it would do; "
                                                                  "change nothing")
        _common(p, reason_required=action.reason_required_on_cli, app=words[0] not in shared)
        p.set_defaults(table_actions=entries)
    return groups


def _action_parser(sub: Any, groups: dict[str, Any], table: list[Action],
                   words: tuple[str, ...]) -> Any:
    mine = next(a for a in table if a.cli == words)
    verbs = dict.fromkeys(a.cli[1] for a in table if a.cli[:1] == words[:1] and len(a.cli) == 2)
    return _subcommand(sub, groups, words, mine.cli_help or mine.summary, " | ".join(verbs))


def _subcommand(sub: Any, groups: dict[str, Any], words: tuple[str, ...], helps: str,
                verbs: str) -> Any:
    """``antre WORD`` or ``antre GROUP WORD`` (the group made on first use, ``verbs`` its
    help)."""
    if len(words) == 1:
        return sub.add_parser(words[0], help=helps)
    group, word = words
    if group not in groups:
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
    given, shown = dict(vars(args)), ""
    try:
        for param in (p for p in entries[0].params if p.secret):
            shown = passwords.fill(given, param.name)
        values = parse(entries[0], given, given)
    except ValueError as exc:  # BadInput, or the passwords typed at the prompt differ
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

    if app.audit is None:
        print(NO_AUDIT, file=sys.stderr)
        return 2
    out = _performed(app, ops, action, values)
    if out.ok and action.cli_line is not None:
        out = Outcome(True, action.cli_line(values, Result(True, out.message, 200, out.detail)),
                      detail=out.detail)
    print(out.message + (shown if out.ok else ""), file=sys.stdout if out.ok else sys.stderr)
    return 0 if out.ok else 2 if out.unwritten else 1


def _performed(app: Antre, ops: Ops, action: Action, values: Args) -> Outcome:
    """The table's entry run by the core's one runner (``antre.actions.perform``: recorded
    before it runs, as ``cli:NAME``); a Redis outage is an outcome (nothing was done)."""
    try:
        result = perform(action, ops, operator_actor(), values, app.audit,
                         describe=lambda exc: _redis_down(app, exc))
    except redis.RedisError as exc:
        return Outcome(False, _redis_down(app, exc))
    if result.ok:
        return Outcome(True, result.message, detail=result.detail)
    out = _refuse(result.message, **result.detail)
    out.unwritten = result.status == AUDIT_UNWRITTEN_STATUS
    return out


# -- selections: one entry over many job ids (``antre dlq replay ID... | --all``) -------------
def add_selection_parsers(sub: Any, selections: list[Selection], table: list[Action],
                          groups: dict[str, Any], shared: set[str]) -> None:
    """A command per selection op with ``cli`` words: the job ids as positionals, ``--all``
    with the selection's filter options (``cli_rows``), the entry's own options, ``--queue``
    (the group's when it is a ``shared`` one, e.g. ``antre dlq --queue Q replay``)."""
    for sel in selections:
        for op in (o for o in sel.ops if o.cli):
            entry = next(a for a in table if a.name == op.action)
            if sel.leases or entry.path_params != ("queue", "job_id"):
                raise TypeError(f"{op.cli}: a selection's command names plain job ids")
            p = _subcommand(sub, groups, op.cli, op.cli_help or op.summary, op.op)
            p.add_argument("job_ids", nargs="*", help="the jobs' ids")
            if sel.cli_rows is not None:
                p.add_argument("--all", action="store_true", help=sel.cli_rows.help)
            for param in (*(sel.cli_rows.params if sel.cli_rows else ()), *entry.params):
                _add_option(p, param)
            if op.cli[0] not in shared:
                p.add_argument("--queue", default="default", help="the queue")
            _common(p, entry.reason_required_on_cli, app=op.cli[0] not in shared)
            p.set_defaults(table_selection=(sel, op))


def table_selection(args: argparse.Namespace) -> tuple[Selection, SelectOp] | None:
    """The selection op a parsed command line was made from, if it was."""
    found: tuple[Selection, SelectOp] | None = getattr(args, "table_selection", None)
    return found


def cmd_selection(args: argparse.Namespace) -> int:
    """The op's entry for each named (or ``--all``) job, one audit entry each as ``cli:NAME``;
    prints ``<op>: N of M jobs`` (0 when all were done)."""
    sel, op = args.table_selection
    action = next(a for a in TABLE if a.name == op.action)
    app = _app(args.app)
    if app.audit is None:
        print(NO_AUDIT, file=sys.stderr)
        return 2
    ops = Ops(app)
    try:
        ids = _selected_ids(sel, ops, args)
    except (BadInput, redis.RedisError) as exc:
        print(f"error: {scrub(exc, app.redis_url)}", file=sys.stderr)
        return 1
    if not ids:
        print("error: name job ids" + (", or --all with an optional filter"
                                       if sel.cli_rows else ""), file=sys.stderr)
        return 1

    def one(job_id: str) -> Result:
        values = parse(action, {"queue": args.queue, "job_id": job_id}, vars(args))
        out = _performed(app, ops, action, values)
        unwritten.append(out.unwritten)
        return Result(out.ok, out.message)
    unwritten: list[bool] = []
    result = each(op.verb, ids, one)
    for problem in result.detail["problems"]:
        print(problem, file=sys.stderr)
    print(f"{op.cli[-1]}: {len(result.detail['done'])} of {len(ids)} jobs")
    return 0 if result.ok else 2 if any(unwritten) else 1


def _selected_ids(sel: Selection, ops: Ops, args: argparse.Namespace) -> list[str]:
    ids = list(args.job_ids)
    if sel.cli_rows is not None and args.all:
        rows = sel.cli_rows
        ids += rows.ids(ops, {**parse_params(rows.params, vars(args)), "queue": args.queue})
    return list(dict.fromkeys(ids))


def _add_tasks(sub: Any) -> None:
    p = sub.add_parser("tasks", help="bulk replays and purges of a queue, with progress")
    p.add_argument("queue")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument("--app", default=None)


def _add_keys(sub: Any) -> None:
    p = sub.add_parser("keys", help="encrypted payloads' key ring: rotate")
    ksub = p.add_subparsers(dest="keys_cmd", required=True)
    r = ksub.add_parser("rotate", help="re-seal a queue's stored ready, scheduled and dead "
                                       "jobs under the newest ANTRE_PAYLOAD_KEYS version")
    r.add_argument("queue")
    r.add_argument("--reason", default="", help="why (written to the audit log)")
    r.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")


def cmd_keys(args: argparse.Namespace) -> int:
    """``antre keys rotate QUEUE``: audited as ``keys.rotate``."""
    app = _app(args.app)

    def rotate() -> Outcome:
        try:
            done = rekey.rotate(app.redis, app.scripts, app.cipher, args.queue,
                               app.partitions_of(args.queue).count())
        except ValueError as exc:
            return _refuse(str(exc))
        return Outcome(done.unopened == 0,
                       f"{args.queue}: {done.resealed} re-sealed, {done.current} already under "
                       f"the newest version, {done.unopened} did not open"
                       + "".join(f"\n  {why}" for why in done.reasons[:5]),
                       detail=done.to_dict())
    return run_audited(app, "keys.rotate", args.queue, args.reason, rotate)


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "tasks": cmd_tasks, "group": cmd_group, "flow": flows.cmd_flow, "keys": cmd_keys,
}
