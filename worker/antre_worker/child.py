"""One worker process of a pool: ``python -m antre_worker.child APP_PATH [options]``.

Started by ``worker.pool.Supervisor`` (a fresh interpreter per child, so a crash or kill -9
leaves nothing half-imported behind). SIGTERM/SIGINT stop it gracefully: running jobs get ``--grace`` seconds, and the process is
gone ``STOP_BOUND_S`` after that whatever Redis or a handler does (what it still holds comes
back through its leases). Exit codes: 0 stopped or burst done, 2 bad arguments or app, 3
retired after abandoning a handler it could not stop (past its hard timeout and its interrupt's
grace, or past a cancel's grace; its other jobs finished first), 4 stopped with Redis unreachable (or ``--burst`` gave up waiting
for it), 5 did not stop within grace + ``STOP_BOUND_S`` and was ended by its own watchdog.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from antre.observe.logs import configure as configure_logging

from .runner import DEFAULT_PREFETCH, WorkerProcess
from .health import EXIT_STOP_TIMEOUT
from .loader import AppLoadError, load_app

PR_SET_PDEATHSIG = 1
STOP_BOUND_S = 10.0  # past its grace, a stopping process waits at most this long for itself

log = logging.getLogger("antre.worker")


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
    watchdog = Watchdog(args.grace + STOP_BOUND_S, worker.running_jobs)

    def on_stop(*_: object) -> None:
        worker.request_stop()
        watchdog.arm()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    if args.burst:
        worker.run_burst()
        return worker.exit_code
    return worker.run()


class Watchdog:
    """Ends the process ``bound_s`` after it was told to stop if it has not exited by then (a
    handler that ignores its cancel, a Redis call stuck in a dead socket): one last ERROR line,
    exit code 5. Armed once, from the signal handler (a timer thread: the main thread may be
    the one stuck)."""

    def __init__(self, bound_s: float, held: Callable[[], Sequence[object]]) -> None:
        self.bound_s = bound_s
        self.held = held
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.bound_s, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        held = len(self.held())
        log.error("did not stop within %gs of being told to; exiting now with %d job%s held "
                  "(their leases expire and the sweeper returns them)", self.bound_s, held,
                  "" if held == 1 else "s", extra={"event": "stop_timeout"})  # ERROR: written at once
        os._exit(EXIT_STOP_TIMEOUT)


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # do not wait for a hung handler's thread
