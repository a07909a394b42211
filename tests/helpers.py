"""Helpers shared by the test modules that run a worker in-process (and a few others).

``tests/`` has no ``__init__.py``: pytest (its default ``prepend`` import mode) puts this
folder first on ``sys.path`` for the rootdir ``conftest.py`` and the test modules, so they
import this module as ``helpers`` (as ``test_incident_processes`` imports
``test_worker_process``), from any working directory.

The fixtures here (``clock``, ``app``, ``q``, ``procs``) are used by importing them into a
test module (``from helpers import app, clock, q  # noqa: F401 - fixtures``): pytest finds a
fixture in the module's namespace, and only that module gets it (a ``conftest.py`` fixture
would reach every module). A module whose ``app`` differs (a database, say) defines its own and
imports only what it shares.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from antre import Antre
from antre.clock import ManualClock
from antre.queue import Queue
from antre_worker.executor import WorkerProcess

REPO = Path(__file__).resolve().parent.parent
START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: where the tests' manual clocks start


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at ``START_MS``: the test advances it (never sleeps for a timeout)."""
    return ManualClock(START_MS)


@pytest.fixture
def app(redis_url: str, clock: ManualClock) -> Antre:
    """An ``Antre`` on the test Redis (no database), on ``clock``."""
    return Antre(redis_url=redis_url, clock=clock)


@pytest.fixture
def q(app: Antre) -> Queue:
    """``app``'s default queue."""
    return app.queue()


def make_worker(app: Antre, clock: ManualClock, **kw: Any) -> WorkerProcess:
    """An in-process worker on the default queue: one thread, id ``w1``, a heartbeat the test
    runs itself (``heartbeat_once()``; the thread's is 60 s away) and a 2 s stop grace; any of
    them (and any other ``WorkerProcess`` argument) given in ``kw``."""
    kw.setdefault("heartbeat_s", 60)  # tests call heartbeat_once() themselves
    kw.setdefault("stop_grace_s", 2)
    return WorkerProcess(app, queues=["default"], threads=kw.pop("threads", 1),
                         worker_id=kw.pop("worker_id", "w1"), clock=clock, **kw)


def spawn(redis_url: str, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m <args>`` in the repository, on ``redis_url``, its output appended to
    ``log_path`` (a worker process, a pool's supervisor)."""
    env = {**os.environ, "ANTRE_REDIS_URL": redis_url, "PYTHONPATH": str(REPO)}
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, stdout=log,
                                stderr=log, stdin=subprocess.DEVNULL)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes a test started (it appends them): those still running are killed after
    it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def wait_for(cond: Callable[[], Any], timeout: float = 5.0, what: str = "condition", *,
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
