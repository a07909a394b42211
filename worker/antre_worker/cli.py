"""``antre worker APP_PATH ...`` and ``antre sweep APP_PATH``; ``python -m antre_worker`` too."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from antre import SettingError, settings
from antre.observe.logs import configure as configure_logging

from .duties import sweep_once
from .runner import DEFAULT_PREFETCH
from .loader import AppLoadError, load_app
from .pool import Supervisor
from .runner import async_concurrency


def build_parser(prog: str = "antre") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="run the worker pool (supervisor, processes, threads)")
    w.add_argument("app_path", metavar="APP_PATH", help="pkg.module:attr naming an antre.Antre")
    w.add_argument("--processes", type=int, default=1,
                   help="worker processes, each restarted by the supervisor when it dies")
    w.add_argument("--threads", type=int, default=4,
                   help="threads per process running sync handlers")
    w.add_argument("--queues", default="", help="comma-separated; default: the app's queues")
    w.add_argument("--burst", action="store_true",
                   help="exit once nothing is ready or in flight")
    w.add_argument("--no-scheduler", action="store_true",
                   help="do not run the sweeper and the other scheduled duties here")
    w.add_argument("--grace", type=float, default=30.0,
                   help="seconds running jobs get to finish on SIGTERM")
    w.add_argument("--concurrency", type=int, default=None,
                   help="async jobs (async def handlers) each process runs at once on its "
                   "event loop, besides --threads for sync ones (default: 100 when the app "
                   "has an async handler; 0: no event loop)")
    w.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH,
                   help="most jobs a runner thread reserves at once (adaptive: short jobs "
                   "grow the batch, slow ones shrink it to 1)")
    s = sub.add_parser("sweep", help="one sweeper pass: expired leases back to ready")
    s.add_argument("app_path", metavar="APP_PATH", help="pkg.module:attr naming an antre.Antre")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings.check()  # every setting read once: a bad one stops here, said in one line
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging()
    try:
        app = load_app(args.app_path)
    except AppLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "sweep":
        print(json.dumps(sweep_once(app)))
        return 0
    try:
        async_concurrency(app, args.concurrency)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    queues = [q for q in args.queues.split(",") if q] or None
    pool = Supervisor(args.app_path, args.processes, args.threads, queues, args.burst,
                      not args.no_scheduler, stop_grace_s=args.grace, prefetch=args.prefetch,
                      app=app, concurrency=args.concurrency)
    return pool.run()
