"""Helpers shared by the test modules that run a worker in-process (and a few others).

``tests/`` has no ``__init__.py``: pytest (its default ``prepend`` import mode) puts this
folder first on ``sys.path`` for the rootdir ``conftest.py`` and the test modules, so they
import this module as ``helpers`` (as ``test_incident_processes`` imports
``test_worker_process``), from any working directory.

Functions only: the fixtures every folder shares (``clock`` at ``START_MS``, ``app``, ``q``,
``procs``) are in ``tests/conftest.py``; a folder's own in its ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


from antre import Antre
from antre.clock import ManualClock
from antre_worker.runner import WorkerProcess

REPO = Path(__file__).resolve().parent.parent


def script_calls(r: Any) -> int:
    """How many script calls the server ran (FCALL of the library's functions, and EVALSHA
    where a client calls scripts by their SHA), from ``INFO commandstats``."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("fcall", "evalsha"))


def forget_scripts(r: Any) -> None:
    """What a Redis restart does to Antre's scripts: the script cache and the functions
    library gone (the keys stay)."""
    r.script_flush()
    r.function_flush()
START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: where the tests' manual clocks start








def make_worker(app: Antre, clock: ManualClock, **kw: Any) -> WorkerProcess:
    """An in-process worker on the default queue: one thread, id ``w1``, a heartbeat the test
    runs itself (``heartbeat_once()``; the thread's is 60 s away) and a 2 s stop grace; any of
    them (and any other ``WorkerProcess`` argument) given in ``kw``."""
    kw.setdefault("heartbeat_s", 60)  # tests call heartbeat_once() themselves
    kw.setdefault("stop_grace_s", 2)
    return WorkerProcess(app, queues=["default"], threads=kw.pop("threads", 1),
                         worker_id=kw.pop("worker_id", "w1"), clock=clock, **kw)


def reserve_all(q: Any, count: int = 10) -> list[Any]:
    """``q.reserve`` again and again (as several runners would) until a call gets nothing: one
    call takes only its share of a group's slots (reserve.lua)."""
    out: list[Any] = []
    while True:
        got = q.reserve("w", count=count)
        if not got:
            return out
        out += got


def burst(app: Antre, clock: ManualClock, **kw: Any) -> tuple[WorkerProcess, Any]:
    """``make_worker(app, clock, **kw)`` run in burst mode (until nothing is ready or in
    flight): the worker and its counts."""
    w = make_worker(app, clock, **kw)
    return w, w.run_burst()


def on_own_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a thread of its own, its result or its exception handed back: code that starts
    an event loop (``asyncio.run``) runs there as in a script, whatever loop the test process
    has running on its main thread."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised on the caller's thread
            out["error"] = exc

    thread = threading.Thread(target=target, name="on_own_thread")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def run_async(coro: Any) -> Any:
    """``asyncio.run(coro)`` on a thread of its own (``on_own_thread``)."""
    return on_own_thread(lambda: asyncio.run(coro))


def spawn(redis_url: str, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m <args>`` in the repository, on ``redis_url``, its output appended to
    ``log_path`` (a worker process, a pool's supervisor)."""
    env = {**os.environ, "ANTRE_REDIS_URL": redis_url, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, stdout=log,
                                stderr=log, stdin=subprocess.DEVNULL)




def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition", *,
             poll_s: float = 0.01, ignore: tuple[type[BaseException], ...] = ()) -> bool:
    """Polls ``cond`` every ``poll_s`` until it is true: True, or AssertionError ("timed out
    waiting for <what>") after ``timeout`` seconds (``cond`` is asked once more at the end). An
    exception in ``ignore`` (e.g. a connection error while Redis restarts) counts as not yet.
    For what happens on another thread or process, never for a timeout of the code under test
    (those are driven by ``clock``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return True
        except ignore:
            pass
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(poll_s)
