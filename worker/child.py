"""One worker process of a pool: ``python -m antre_worker.child APP_PATH [options]``.

Started by ``worker.pool.Supervisor`` (a fresh interpreter per child, so a crash or kill -9
leaves nothing half-imported behind). SIGTERM/SIGINT stop it gracefully. Exit codes: 0 stopped
or burst done, 2 bad arguments or app, 3 recycled after a hard timeout.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from antre.observe.logs import configure as configure_logging

from .executor import DEFAULT_PREFETCH, WorkerProcess
from .loader import AppLoadError, load_app

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` when the parent exits (no-op elsewhere)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m antre_worker.child")
    p.add_argument("app_path")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--queues", default="")
    p.add_argument("--supervisor-id", default="")
    p.add_argument("--worker-id", default=None)
    p.add_argument("--burst", action="store_true")
    p.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH,
                   help="most jobs a runner thread reserves at once (adaptive: short jobs "
                   "grow the batch, slow ones shrink it to 1)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="async jobs at once on this process's event loop")
    p.add_argument("--heartbeat", type=float, default=1.0)
    p.add_argument("--grace", type=float, default=30.0)
    p.add_argument("--parent-pid", type=int, default=0)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    die_with_parent()
    if args.parent_pid and os.getppid() != args.parent_pid:
        return 0  # the supervisor died before we could arm PDEATHSIG
    configure_logging()
    try:
        app = load_app(args.app_path)
    except AppLoadError as exc:
        logging.getLogger("antre.worker").error("%s", exc, extra={"event": "bad_app"})
        return 2
    # what start-up loaded (the app, SQLAlchemy, ...) lives as long as the process: out of the
    # cyclic GC's way, so a full collection scans only what the jobs allocate
    gc.collect()
    gc.freeze()
    queues = [q for q in args.queues.split(",") if q] or None
    worker = WorkerProcess(app, queues=queues, threads=args.threads, worker_id=args.worker_id,
                           supervisor_id=args.supervisor_id, prefetch=args.prefetch,
                           heartbeat_s=args.heartbeat, stop_grace_s=args.grace,
                           concurrency=args.concurrency)
    signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    signal.signal(signal.SIGINT, lambda *_: worker.request_stop())
    if args.burst:
        worker.run_burst()
        return worker.exit_code
    return worker.run()


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # do not wait for a hung handler's thread
