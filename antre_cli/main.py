"""``antre``: demo, worker, web, sweep, status, dlq, find, schedules, user, config; the incident
controls and every other dashboard action are in ``actions`` (pause, resume, job, purge,
bulk-replay, tasks, task, lock, breaker)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import datetime, timezone
from typing import Any, Sequence

import redis

from antre import Antre, Progress, ResultUnavailable, SettingError, __version__, settings
from antre.engine import partitions, states
from antre.engine.envelope import STATES
from antre.observe.finder import BadQuery, Located
from antre.observe.logs import safe_url
from antre.observe.redact import scrub
from antre.maintenance.periodic import Schedules
from antre.observe.readmodels import DeadFilter, ReadModels, ScheduleInfo
from antre.observe.registry import WorkerRegistry, cache_totals
from antre.observe.memory import MemoryPolicy
from antre.observe.status import status_summary
from antre_worker.cli import main as worker_main
from antre_worker.loader import load_app

from . import actions
from .demo import run_demo

try:  # the dashboard is an extra (pip install "antre[web]"); the core CLI works without it
    from . import web as dashboard
    WEB_MISSING = ""
except ImportError as exc:  # pragma: no cover - exercised by the core-install wheel test
    dashboard = None  # type: ignore[assignment]
    WEB_MISSING = exc.name or str(exc)


def _ts(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _app(path: str | None) -> Antre:
    return load_app(path) if path else Antre()


def _no_secret(text: str, url: str) -> str:
    """``text`` with the URL's password blanked, wherever it shows."""
    return scrub(text, url)


# -- status ---------------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    app = _app(args.app)
    try:
        workers = WorkerRegistry(app.redis).list()  # read once: the count and the rows
        summary = status_summary(app.redis, workers=workers)
    except redis.RedisError as exc:
        print(f"error: Redis at {safe_url(app.redis_url)} is unreachable "
              f"({_no_secret(str(exc), app.redis_url)}); start it or set ANTRE_REDIS_URL",
              file=sys.stderr)
        return 2
    now, overview = summary.as_of, summary.overview
    if args.json:
        print(json.dumps({**dataclasses.asdict(summary),
                          "queues": [dataclasses.asdict(q) for q in overview.queues],
                          "workers": [dict(dataclasses.asdict(w), alive=w.alive(now))
                                      for w in workers]}, indent=2))
        return 0
    print(f"as of {_ts(now)} UTC")
    print(f"{'queue':<16}{'ready':>9}{'sched':>9}{'inflight':>9}{'dead':>9}{'oldest':>10}")
    for q in overview.queues:
        print(f"{q.name:<16}{q.ready:>9}{q.scheduled:>9}{q.inflight:>9}{q.dead:>9}"
              f"{q.oldest_ready_age_ms / 1000:>9.1f}s")
        for p in q.paused:  # incident controls
            print(f"  paused: {p.job_type or 'whole queue'} by {p.by} at {_ts(p.at_ms)} UTC: "
                  f"{p.reason}")
        if q.stats.get("abandoned"):  # damaged or vanished records the scripts dealt with
            print(f"  abandoned records: {q.stats['abandoned']}; the newest:")
            for entry in _quarantined(app, q.name, limit=3):
                print(f"    {_quarantine_line(entry)}")
    hits, lookups = cache_totals([w for w in workers if w.alive(now)])
    cache = f"; completed-key cache: {hits / lookups:.0%} of {lookups} lookups hit" \
        if lookups else ""
    print(f"workers: {summary.live_workers} live processes, "
          f"{sum(1 for w in workers if not w.alive(now))} stale or stopped{cache}")
    print(f"lock conflicts: {summary.conflicts_5m} in 5 min, {summary.conflicts_1h} in 1 h, "
          f"{summary.conflicts_total} ever"
          + "".join(f"; {c.key}: {c.last_5m}/{c.last_1h}/{c.total}"
                    for c in summary.contention[:3]))
    if summary.memory is not None:
        print(_memory_line(summary.memory))
    return 0


def _quarantined(app: Antre, queue: str, limit: int = 1000) -> list[dict[str, object]]:
    """The newest quarantine entries of every partition of ``queue`` (each with its queue):
    ids too broken to be jobs, damaged records, what vanished records left waiting."""
    out = [dict(entry, queue=queue) for q in partitions.all_queues(app.redis, queue)
           for entry in q.quarantined(limit)]
    return sorted(out, key=lambda e: -int(str(e.get("t") or 0)))[:limit]


def _quarantine_line(entry: dict[str, object]) -> str:
    what = entry.get("record") or "job id"
    where = entry.get("key") or entry.get("id") or ""
    when = _ts(int(str(entry.get("t") or 0)))
    return f"{when} UTC {entry.get('queue')}: {what} {where}: {entry.get('why')}"


def _memory_line(mem: MemoryPolicy) -> str:
    """``redis memory: ...``: the eviction policy, and the warning when it can lose jobs."""
    limit = "no maxmemory" if not mem.maxmemory_bytes else f"maxmemory {mem.maxmemory_bytes:,} B"
    used = "" if mem.used_bytes is None else f", {mem.used_bytes:,} B used"
    line = f"redis memory: maxmemory-policy {mem.policy} ({limit}{used})"
    return line + (f"\nWARNING: {mem.warning}" if mem.warning else "")


# -- dlq ------------------------------------------------------------------------------------
def _filter(args: argparse.Namespace) -> DeadFilter:
    return DeadFilter(job_type=args.type, group=args.group)


def cmd_dlq(args: argparse.Namespace) -> int:
    app = _app(args.app)
    reads = ReadModels(app.redis)
    if args.dlq_cmd == "list":
        page = reads.dead(args.queue, _filter(args), 0, args.limit)
        if args.json:
            print(json.dumps([dataclasses.asdict(r) for r in page.rows], indent=2))
            return 0
        print(f"{page.total} dead in {args.queue} (showing {len(page.rows)})")
        for row in page.rows:
            print(f"{row.id}  {_ts(row.finished_at)}  {row.type:<18} {row.reason[:80]}")
        return 0
    # show (replay | discard, many ids or --all: the DLQ selection's, antre/actions/table.py)
    job = reads.job(args.queue, args.job_id)
    if job is None:
        print(f"error: no job {args.job_id} in queue {args.queue}", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(job), indent=2, default=str))
    return 0


# -- schedules --------------------------------------------------------------------------------
def _schedule_line(info: ScheduleInfo) -> str:
    nxt = "paused" if info.paused else "stale" if info.stale else _ts(info.next_run_ms)
    return (f"{info.name:<24}{info.trigger:<32}next {nxt:<20} last {_ts(info.last_enqueued_ms)}"
            f" ({info.last_outcome})")


def cmd_schedules(args: argparse.Namespace) -> int:
    app = _app(args.app)
    ops = Schedules(app.redis, clock=app.clock, scripts=app.scripts)
    rows = ops.list()  # list; pause, resume and run are the table's (antre/actions/)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    for row in [] if args.json else rows:
        print(_schedule_line(row))
    return 0


# -- find -------------------------------------------------------------------------------------
def _print_job(app: Antre, found: Located, as_json: bool) -> int:
    status = app.finder.job_status(found.job_id)
    timeline = app.finder.timeline(found.queue, found.job_id)
    if as_json:
        print(json.dumps({"job": dataclasses.asdict(status),
                          "timeline": dataclasses.asdict(timeline)}, indent=2, default=str))
        return 0
    tried = states.attempt_text(found.state, status.attempts, status.max_attempts)
    print(f"job {found.job_id} in {found.queue}: {found.state} ({status.job_type}, {tried}, "
          f"key {status.idempotency_key})")
    if status.progress is not None:
        print(f"  {progress_line(status.progress)}")
    for ev in timeline.events:
        details = ", ".join(f"{k}={v}" for k, v in ev.details.items() if k != "traceback")
        print(f"  {_ts(ev.at_ms)}  {ev.kind:<13} {ev.actor or '-':<28} {details[:160]}")
    return 0


def _fields(matched: dict[str, Any]) -> str:
    """``order_id=1234 tenant="acme"``: each matched field as it would be typed to find it."""
    return " ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}"
                    for k, v in matched.items())


def _search(app: Antre, args: argparse.Namespace) -> int:
    cursor, hits = None, 0
    try:
        while True:
            step = app.finder.search(args.text, args.queue, args.state, cursor=cursor)
            for h in step.hits:
                hits += 1
                print(json.dumps(dataclasses.asdict(h)) if args.json else
                      f"{h.job_id}  {h.queue:<12} {h.state:<9} {h.job_type:<16} "
                      f"{_fields(h.matched)}",
                      flush=True)
            print(f"scanned {step.scanned} of {step.total}, {hits} found", file=sys.stderr)
            if step.done or (args.limit and hits >= args.limit):
                break
            cursor = step.cursor
    except KeyboardInterrupt:
        print(f"stopped: {hits} found", file=sys.stderr)
    return 0 if hits else 1


def cmd_find(args: argparse.Namespace) -> int:
    """A job id or an idempotency key: the job and its timeline; field=value: payload search."""
    app = _app(args.app)
    text = args.text.strip()
    try:
        found = app.finder.resolve(text)
        if found is not None:
            return _print_job(app, found, args.json)
        listed = [e for q in app.finder.queue_names() for e in _quarantined(app, q)
                  if e.get("id") == text]
        if listed and "=" not in text:  # a vanished or undecodable job: what was found
            for entry in listed:
                print(f"{text}: no job record; in the quarantine: {_quarantine_line(entry)}")
            return 0
        if "=" not in text:
            print(f"error: no job has the id or idempotency key {text!r}; to search payloads "
                  "give field=value, e.g. antre find order_id=1234", file=sys.stderr)
            return 1
        return _search(app, args)
    except BadQuery as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        print(f"error: Redis at {safe_url(app.redis_url)} is unreachable "
              f"({_no_secret(str(exc), app.redis_url)})", file=sys.stderr)
        return 2


def cmd_result(args: argparse.Namespace) -> int:
    """``Antre.result``: completed (with the stored result), pending, failed, cancelled,
    abandoned or unknown, with the handler's last progress; ``--wait S``: its end, waited for
    up to S seconds (exit 3 when it did not come)."""
    app = _app(args.app)
    try:
        answer = app.result(args.key)
        if args.wait is not None:
            answer = answer.wait(args.wait)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (redis.RedisError, ResultUnavailable) as exc:
        print(f"error: Redis at {safe_url(app.redis_url)} is unreachable "
              f"({_no_secret(str(exc), app.redis_url)})", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(dataclasses.asdict(answer), indent=2, default=str))
    else:
        print(f"{answer.status}" + (f" (job {answer.job_id})" if answer.job_id else "")
              + (f", still after waiting {args.wait:g}s" if answer.timed_out else ""))
        if answer.progress is not None:
            print(progress_line(answer.progress))
        if answer.status == "completed":
            print(json.dumps(answer.result, default=str))
        elif answer.error:
            print(answer.error)
    if answer.timed_out:
        return 3
    return 0 if answer.status != "unknown" else 1


def progress_line(p: Progress) -> str:
    """``progress 40% rows 4,000/10,000 (at 2026-12-01 14:00:00)``: a handler's last
    ``ctx.progress``."""
    return f"progress {p.percent}%" + (f" {p.message}" if p.message else "") + (
        f" (at {_ts(p.at_ms)})" if p.at_ms else "")


# -- users ----------------------------------------------------------------------------------
# add, passwd, role, disable, enable, delete and logout-everywhere: entries of the table of
# actions (antre/actions/users.py); list is a read
def cmd_user(args: argparse.Namespace) -> int:
    app = _app(args.app)
    if app.users is None:
        print("error: users live in the database: set ANTRE_DATABASE_URL", file=sys.stderr)
        return 2
    for u in app.users.list():
        print(f"{u.name:<20} {u.role}{'  (disabled)' if u.disabled else ''}")
    return 0


# -- config ---------------------------------------------------------------------------------
def cmd_config(args: argparse.Namespace) -> int:
    """Every setting's effective value (secrets masked) and where it came from."""
    rows = settings.effective()
    if args.json:
        print(json.dumps({"file": settings.CONFIG_FILE.get(),
                          "settings": [{"name": e.name, "value": e.value, "source": e.source,
                                        "secret": e.secret} for e in rows],
                          "unknown": settings.unknown()}, indent=2))
        return 0
    width = max(len(e.name) for e in rows)
    shown = max(len(e.shown) for e in rows if len(e.shown) <= 40)
    for e in rows:
        print(f"{e.name:<{width}}  {e.shown:<{shown}}  {e.source}")
    for name in settings.unknown():
        print(f"warning: {name} is set but is no setting of Antre (a typo?)", file=sys.stderr)
    return 0


# -- worker, sweep, web, demo ---------------------------------------------------------------
def cmd_worker(args: argparse.Namespace, rest: list[str]) -> int:
    return int(worker_main([args.command, *rest]) or 0)


def no_dashboard(command: str) -> int:
    print(f"error: `antre {command}` needs the dashboard, which is not installed (missing "
          f"module: {WEB_MISSING}): pip install 'antre[web]' (or 'antre[demo]' for the demo)",
          file=sys.stderr)
    return 2


def cmd_web(args: argparse.Namespace) -> int:
    if dashboard is None:
        return no_dashboard("web")
    return dashboard.serve(args.app, host=args.host, port=args.port, workers=args.workers)


def cmd_demo(args: argparse.Namespace) -> int:
    if dashboard is None:
        return no_dashboard("demo")
    return run_demo(port=args.port, data_dir=args.data_dir, host=args.host,
                    processes=args.processes, threads=args.threads, traffic=args.traffic)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="antre", description="Antre: a reliable job queue on Redis")
    p.add_argument("--version", action="version", version=f"antre {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="everything on embedded defaults, with demo traffic")
    d.add_argument("--port", type=int, default=8000, help="the dashboard's port")
    d.add_argument("--host", default="127.0.0.1", help="the address the dashboard listens on")
    d.add_argument("--data-dir", default="antre-data",
                   help="where the private Redis, the SQLite database and the secret key live")
    d.add_argument("--processes", type=int, default=2, help="worker processes")
    d.add_argument("--threads", type=int, default=4, help="threads per worker process")
    d.add_argument("--traffic", type=float, default=4.0, help="demo jobs per second (0: none)")

    sub.add_parser("worker", help="run the worker pool: antre worker pkg.module:app "
                   "[--processes N] [--threads M] [--burst]", add_help=False)
    sub.add_parser("sweep", help="one sweeper pass: antre sweep pkg.module:app", add_help=False)

    w = sub.add_parser("web", help="the dashboard under gunicorn")
    w.add_argument("app", nargs="?", default=None,
                   help="pkg.module:app, so the pages know its handlers (default: none)")
    w.add_argument("--host", default="127.0.0.1", help="the address gunicorn listens on")
    w.add_argument("--port", type=int, default=8000, help="its port")
    w.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")

    s = sub.add_parser("status", help="queue depths and workers")
    s.add_argument("app", nargs="?", default=None,
                   help="pkg.module:app (default: from environment)")
    s.add_argument("--json", action="store_true", help="one JSON document")

    q = sub.add_parser("dlq", help="dead-letter queue: list | show | replay | discard")
    q.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    q.add_argument("--queue", default="default", help="the queue")
    dsub = q.add_subparsers(dest="dlq_cmd", required=True)
    ql = dsub.add_parser("list", help="the newest dead jobs, with their reason")
    ql.add_argument("--type", help="only this job type")
    ql.add_argument("--group", help="only this error group")
    ql.add_argument("--limit", type=int, default=50, help="at most this many")
    ql.add_argument("--json", action="store_true", help="JSON rows")
    qs = dsub.add_parser("show", help="one dead job: payload, every attempt's error and "
                                      "traceback")
    qs.add_argument("job_id", help="the job's id")
    # replay | discard: the DLQ selection's (antre/actions/table.py)

    sc = sub.add_parser("schedules", help="periodic schedules: list | pause | resume | run")
    sc.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    scsub = sc.add_subparsers(dest="sched_cmd", required=True)
    scl = scsub.add_parser("list", help="every schedule: next and last run, last outcome")
    scl.add_argument("--json", action="store_true", help="JSON rows")
    # pause | resume | run: entries of the table of actions (antre/actions/)

    f = sub.add_parser("find", help="a job by id or idempotency key (with its timeline), or "
                                    "jobs by payload field: antre find order_id=1234")
    f.add_argument("text", help="job id, idempotency key, or field=value (dotted paths)")
    f.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    f.add_argument("--queue", default=None, help="search one queue (default: all)")
    f.add_argument("--state", default=None, choices=STATES, help="search one state")
    f.add_argument("--limit", type=int, default=0, help="stop after this many hits")
    f.add_argument("--json", action="store_true", help="JSON")

    rs = sub.add_parser("result", help="an idempotency key's result: completed (with it), "
                                       "pending, failed, abandoned (since when, and what to "
                                       "do) or unknown")
    rs.add_argument("key", help="the idempotency key")
    rs.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    rs.add_argument("--json", action="store_true", help="JSON")
    rs.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                    help="wait up to SECONDS for the job to end (woken by its end, not by "
                         "polling); exit 3 if it is still pending then")

    c = sub.add_parser("config", help="every ANTRE_* setting: its effective value (secrets "
                                      "masked) and where it came from (default, environment "
                                      "or the ANTRE_CONFIG file)")
    c.add_argument("--json", action="store_true", help="one JSON document")

    u = sub.add_parser("user", help="dashboard users")
    u.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    usub = u.add_subparsers(dest="user_cmd", required=True)
    usub.add_parser("list", help="every user, their role, and whether disabled")
    # add, passwd, role, disable, enable, delete, logout-everywhere: the table's
    actions.add_parsers(sub, groups={"schedules": scsub, "user": usub, "dlq": dsub})
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``antre`` command; a setting the command refuses (at start, every one is read once)
    is one line on stderr and exit code 2."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    parser = build_parser()
    if argv and argv[0] in ("worker", "sweep"):
        settings.check()
        args = argparse.Namespace(command=argv[0])
        return cmd_worker(args, argv[1:])
    args = parser.parse_args(argv)
    settings.check()
    handlers = {"status": cmd_status, "dlq": cmd_dlq, "user": cmd_user, "web": cmd_web,
                "demo": cmd_demo, "schedules": cmd_schedules, "find": cmd_find,
                "result": cmd_result, "config": cmd_config, **actions.HANDLERS}
    if actions.table_command(args) is not None:  # an entry of antre.actions.TABLE
        return actions.cmd_action(args)
    if actions.table_selection(args) is not None:  # one over many ids (antre dlq replay)
        return actions.cmd_selection(args)
    return handlers[args.command](args)
