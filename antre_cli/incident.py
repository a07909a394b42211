"""``antre`` commands for every action the dashboard offers (CLI parity): pause / resume,
cancel a running job, delete a job, purge, paced bulk tasks and their controls, extend a lease, run a scheduled job
now, force-release a lock, reset a circuit breaker.

Each one changes Redis through the core (the same functions the dashboard's actions call),
writes an audit entry with the OS user as the actor (``cli:NAME``) and the outcome (ok,
failed, refused), and answers bad input with a message on stderr and exit status 1 (2 when a
service is missing). Changes need the database (``ANTRE_DATABASE_URL``): they are audited.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from antre import Antre
from antre.control.abandoned import AbandonedRecords, ResolveError
from antre.control.bulk import BulkReplays, TaskNotFound, TaskStateError
from antre.control.cancel import CancelError, Cancels
from antre.errors import LeaseLost
from antre.limits.flow import FlowControl
from antre.control.pause import PauseError, Pauses, unknown_target
from antre.control.purge import SOURCES, PurgeError, PurgeFilter, Purger
from antre.observe.readmodels import DeadFilter
from antre.observe.redact import redact_url, scrub
from antre_worker.loader import load_app

MAX_EXTEND_S = 24 * 3600


@dataclass
class Outcome:
    ok: bool
    message: str
    refused: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def operator() -> str:
    return f"cli:{getpass.getuser()}"


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
    app.audit.record(user=operator(), role="cli", action=action, target=target,
                     reason=reason, outcome=status,
                     detail={"message": out.message, **out.detail}, remote_addr="")
    print(out.message, file=sys.stdout if out.ok else sys.stderr)
    return 0 if out.ok else 1


def _refuse(message: str, **detail: Any) -> Outcome:
    return Outcome(False, f"error: {message}", True, dict(detail))


# -- pause / resume ------------------------------------------------------------------------------
def _known(app: Antre, queue: str, job_type: str | None) -> str | None:
    return unknown_target(app.redis, queue, job_type,
                          {n: s.queue for n, s in app.handlers.items()}, app.queues())


def cmd_pause(args: argparse.Namespace) -> int:
    app = _app(args.app)
    target = args.queue + (f"/{args.type}" if args.type else "")

    def pause() -> Outcome:
        bad = _known(app, args.queue, args.type)
        if bad:
            return _refuse(bad)
        try:
            info = Pauses(app.redis, app.clock, app.scripts).pause(
                args.queue, args.type, operator(), args.reason)
        except PauseError as exc:
            return _refuse(str(exc))
        return Outcome(True, f"{info.target} paused by {info.by}: workers reserve none of its "
                             "jobs until it is resumed")

    def resume() -> Outcome:
        bad = _known(app, args.queue, args.type)
        if bad:
            return _refuse(bad)
        try:
            moved = Pauses(app.redis, app.clock, app.scripts).resume(args.queue, args.type)
        except PauseError as exc:
            return _refuse(str(exc))
        return Outcome(True, f"{target} resumed ({moved} parked jobs back in the ready list)",
                       detail={"unparked": moved})
    fn = pause if args.command == "pause" else resume
    return run_audited(app, f"queue.{args.command}", target, args.reason or "", fn)


# -- jobs -------------------------------------------------------------------------------------
def _delete(app: Antre, args: argparse.Namespace) -> Outcome:
    try:
        where = Purger(app.redis, app.clock, app.scripts).delete(args.queue, args.job_id)
    except PurgeError as exc:
        return _refuse(str(exc))
    return Outcome(True, f"job {args.job_id} deleted from {where}")


def _run_now(app: Antre, args: argparse.Namespace) -> Outcome:
    if not app.queue(args.queue).run_now(args.job_id):
        return _refuse(f"job {args.job_id} is not scheduled in {args.queue}; nothing was "
                       "changed")
    return Outcome(True, f"job {args.job_id} moved to the ready list")


def _extend(app: Antre, args: argparse.Namespace) -> Outcome:
    if not 1 <= args.seconds <= MAX_EXTEND_S:
        return _refuse(f"--seconds must be from 1 to {MAX_EXTEND_S}")
    try:
        deadline = app.queue(args.queue).extend(args.job_id, args.epoch, args.seconds * 1000,
                                                mode="add")
    except LeaseLost as exc:
        return _refuse(f"{exc} (look up the current epoch: antre status / the API)")
    return Outcome(True, f"lease of job {args.job_id} extended by {args.seconds}s",
                   detail={"deadline_after": deadline, "epoch": args.epoch})


def _cancel(app: Antre, args: argparse.Namespace) -> Outcome:
    try:
        req = Cancels(app.redis, app.clock, app.scripts).request(
            args.queue, args.job_id, operator(), args.to, args.reason)
    except CancelError as exc:
        return _refuse(str(exc))
    return Outcome(True, f"cancel of job {args.job_id} requested: its worker stops it, then "
                         f"it goes to {'the DLQ' if req.to == 'dlq' else 'nowhere'}",
                   detail={"to": req.to})


JOB_COMMANDS: dict[str, tuple[Callable[[Antre, argparse.Namespace], Outcome], str]] = {
    "delete": (_delete, "job.delete"), "run-now": (_run_now, "scheduled.run_now"),
    "extend": (_extend, "inflight.extend"), "cancel": (_cancel, "job.cancel"),
}


def cmd_job(args: argparse.Namespace) -> int:
    app = _app(args.app)
    fn, action = JOB_COMMANDS[args.job_cmd]
    return run_audited(app, action, f"{args.queue}/{args.job_id}", args.reason,
                       lambda: fn(app, args))


# -- purge and bulk tasks ---------------------------------------------------------------------
def _purge_filter(args: argparse.Namespace) -> PurgeFilter:
    return PurgeFilter(args.source, args.type, args.group, args.older_than_s, args.field,
                       args.value)


def _dry_run(purger: Purger, queue: str, flt: PurgeFilter) -> int:
    try:
        flt.check()
    except PurgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{purger.count(queue, flt)} jobs match ({flt.describe()}) in {queue}")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    app = _app(args.app)
    flt = _purge_filter(args)
    purger = Purger(app.redis, app.clock, app.scripts)
    if args.dry_run:
        return _dry_run(purger, args.queue, flt)

    def start() -> Outcome:
        try:
            flt.check()
        except PurgeError as exc:
            return _refuse(str(exc))
        bad = _known(app, args.queue, None)
        if bad:
            return _refuse(bad)
        count = purger.count(args.queue, flt)
        if count == 0:
            return _refuse(f"no job matches ({flt.describe()}); nothing was changed")
        typed = (args.confirm or "").strip()
        if typed != str(count) and typed.lower() != "purge":
            return _refuse(f"not confirmed: pass --confirm {count} (the number of matching "
                           "jobs) or --confirm purge; nothing was changed", dry_run=count)
        try:
            task = BulkReplays(app.redis, app.clock).start_purge(
                args.queue, flt, args.rate, args.maximum, operator(), args.reason)
        except ValueError as exc:
            return _refuse(str(exc))
        return Outcome(True, f"purge {task.id} started: {count} jobs match, at most "
                             f"{task.maximum} at {task.rate_per_s:g} jobs/s (the worker pool "
                             f"steps it; follow it with: antre tasks {args.queue})",
                       detail={"task": task.id, "dry_run": count, "filter": flt.to_dict()})
    return run_audited(app, "purge.start", f"{args.queue} [{flt.describe()}]", args.reason,
                       start)


def cmd_bulk_replay(args: argparse.Namespace) -> int:
    app = _app(args.app)
    flt = DeadFilter(job_type=args.type, group=args.group)

    def start() -> Outcome:
        try:
            task = BulkReplays(app.redis, app.clock).start(args.queue, flt, args.rate,
                                                           args.maximum, operator(),
                                                           args.reason)
        except ValueError as exc:
            return _refuse(str(exc))
        return Outcome(True, f"bulk replay {task.id} started: {task.total} jobs match "
                             f"({flt.describe()}), at most {task.maximum} at "
                             f"{task.rate_per_s:g} jobs/s", detail={"task": task.id})
    return run_audited(app, "dlq.bulk_replay.start", f"{args.queue} [{flt.describe()}]",
                       args.reason, start)


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


def cmd_task(args: argparse.Namespace) -> int:
    app = _app(args.app)
    bulk = BulkReplays(app.redis, app.clock)

    def change() -> Outcome:
        fn = {"pause": bulk.pause, "resume": bulk.resume, "cancel": bulk.cancel}[args.op]
        try:
            task = fn(args.queue, args.task_id)
        except TaskNotFound:
            return _refuse(f"no task {args.task_id} in {args.queue} (see: antre tasks "
                           f"{args.queue})")
        except TaskStateError as exc:
            return _refuse(str(exc))
        return Outcome(True, f"{task.kind} {task.id}: {task.state} ({task.replayed} done)")
    task = bulk.get(args.queue, args.task_id)
    prefix = "purge" if task is not None and task.kind == "purge" else "dlq.bulk_replay"
    return run_audited(app, f"{prefix}.{args.op}", f"{args.queue}/{args.task_id}", args.reason,
                       change)


# -- locks and breakers -----------------------------------------------------------------------
def cmd_lock_release(args: argparse.Namespace) -> int:
    app = _app(args.app)

    def release() -> Outcome:
        if not app.locks.release_token(args.key, args.token):
            return _refuse(f"lock {args.key!r} is no longer held by that token (released, "
                           "expired or re-taken since); nothing was changed")
        return Outcome(True, f"lock {args.key!r} released", detail={"token": args.token})
    return run_audited(app, "locks.release", args.key, args.reason, release)


def cmd_breaker_reset(args: argparse.Namespace) -> int:
    app = _app(args.app)

    def reset() -> Outcome:
        flow = FlowControl(app.redis, app.clock)
        known = {b.name: b for b in flow.breakers()}
        if args.name not in known:
            return _refuse(f"no circuit breaker named {args.name!r}; known: "
                           f"{', '.join(sorted(known)) or 'none'}")
        state = known[args.name]
        flow.breaker(args.name, state.failure_threshold, state.window_s,
                     state.cooldown_s).reset()
        return Outcome(True, f"circuit breaker {args.name} closed by hand (was {state.state})",
                       detail={"before": state.state, "after": "closed"})
    return run_audited(app, "flow.reset_breaker", args.name, args.reason, reset)


# -- abandoned idempotency records -------------------------------------------------------------
def cmd_idempotency_resolve(args: argparse.Namespace) -> int:
    """Mark an abandoned idempotency record failed, or reset it (``antre result`` says which
    keys are abandoned)."""
    app = _app(args.app)
    if app.idempotency is None:
        print("error: idempotency records live in the database: set ANTRE_DATABASE_URL",
              file=sys.stderr)
        return 2

    def resolve() -> Outcome:
        store = app.idempotency
        assert store is not None
        try:
            was = AbandonedRecords(app.finder, store).resolve(args.key, args.to, by=operator(),
                                                              reason=args.reason)
        except ResolveError as exc:
            return _refuse(str(exc))
        done = "marked failed" if args.to == "failed" else "reset: a resend runs afresh"
        return Outcome(True, f"abandoned idempotency record {args.key!r} {done}",
                       detail={"to": args.to, "job_id": was.job_id, "fence": was.fence,
                               "abandoned_since_ms": was.since_ms})
    return run_audited(app, "idempotency.resolve", args.key, args.reason, resolve)


# -- the parser -------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, reason_required: bool = False) -> None:
    p.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    p.add_argument("--reason", required=reason_required, default="",
                   help="why (written to the audit log)")


def add_parsers(sub: Any) -> None:
    _add_pause(sub)
    _add_job(sub)
    _add_purge(sub)
    _add_tasks(sub)
    _add_flow(sub)
    _add_idempotency(sub)


def _add_pause(sub: Any) -> None:
    for name in ("pause", "resume"):
        p = sub.add_parser(name, help=f"{name} a queue, or one job type in it (--type)")
        p.add_argument("queue")
        p.add_argument("--type", default=None, help="only this job type")
        _common(p, reason_required=name == "pause")


def _add_job(sub: Any) -> None:
    j = sub.add_parser("job", help="one job: delete | run-now | extend | cancel")
    jsub = j.add_subparsers(dest="job_cmd", required=True)
    for name, what in (("delete", "delete a ready or scheduled job"),
                       ("run-now", "move a scheduled job to the ready list"),
                       ("extend", "extend an in-flight job's lease"),
                       ("cancel", "stop a running job (to the DLQ, or --to discard)")):
        p = jsub.add_parser(name, help=what)
        p.add_argument("queue")
        p.add_argument("job_id")
        if name == "extend":
            p.add_argument("--epoch", type=int, required=True, help="the lease epoch you saw")
            p.add_argument("--seconds", type=int, default=30)
        if name == "cancel":
            p.add_argument("--to", choices=["dlq", "discard"], default="dlq")
        _common(p)


def _add_purge(sub: Any) -> None:
    p = sub.add_parser("purge", help="remove a filtered set of ready, scheduled or dead jobs "
                                     "(paced; --dry-run counts)")
    p.add_argument("queue")
    p.add_argument("--source", choices=SOURCES, default="ready")
    p.add_argument("--type", default=None)
    p.add_argument("--group", default=None, help="error group (dead only)")
    p.add_argument("--older-than-s", type=float, default=None, dest="older_than_s")
    p.add_argument("--field", default=None, help="top-level payload field ...")
    p.add_argument("--value", default=None, help="... equal to this value (as text)")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--confirm", default="", help="the dry-run count, or the word purge")
    p.add_argument("--rate", type=float, default=500.0, help="jobs per second")
    p.add_argument("--maximum", type=int, default=1_000_000)
    _common(p)


def _add_tasks(sub: Any) -> None:
    p = sub.add_parser("bulk-replay", help="paced replay of the filtered dead-letter set")
    p.add_argument("queue")
    p.add_argument("--type", default=None)
    p.add_argument("--group", default=None)
    p.add_argument("--rate", type=float, default=5.0)
    p.add_argument("--maximum", type=int, default=1000)
    _common(p)
    p = sub.add_parser("tasks", help="bulk replays and purges of a queue, with progress")
    p.add_argument("queue")
    p.add_argument("--json", action="store_true")
    p.add_argument("--app", default=None)
    p = sub.add_parser("task", help="pause | resume | cancel a bulk replay or purge")
    p.add_argument("op", choices=["pause", "resume", "cancel"])
    p.add_argument("queue")
    p.add_argument("task_id")
    _common(p)


def _add_flow(sub: Any) -> None:
    p = sub.add_parser("lock", help="force-release a business lock held by TOKEN")
    p.add_argument("lock_cmd", choices=["release"])
    p.add_argument("key")
    p.add_argument("--token", required=True, help="the holder token (Locks page / API)")
    _common(p)
    p = sub.add_parser("breaker", help="close a circuit breaker by hand")
    p.add_argument("breaker_cmd", choices=["reset"])
    p.add_argument("name")
    _common(p)


def _add_idempotency(sub: Any) -> None:
    p = sub.add_parser("idempotency", help="resolve an abandoned idempotency record (stuck in "
                                           "processing, no job left): --to failed | reset")
    p.add_argument("idem_cmd", choices=["resolve"])
    p.add_argument("key")
    p.add_argument("--to", choices=["failed", "reset"], required=True,
                   help="failed: result answers failed; reset: forget it, a resend runs afresh")
    _common(p, reason_required=True)


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "pause": cmd_pause, "resume": cmd_pause, "job": cmd_job, "purge": cmd_purge,
    "bulk-replay": cmd_bulk_replay, "tasks": cmd_tasks, "task": cmd_task,
    "lock": cmd_lock_release, "breaker": cmd_breaker_reset,
    "idempotency": cmd_idempotency_resolve,
}
