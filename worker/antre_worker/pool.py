"""The worker pool: a supervisor that keeps N worker processes alive and runs the scheduled
duties. Children are fresh interpreters (``python -m antre_worker.child``) that die with the
supervisor (PR_SET_PDEATHSIG, armed by the child itself)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

import antre
from antre import Antre
from antre.observe.registry import WorkerInfo, WorkerRegistry

from .duties import Duties, EvictionWatch
from .runner import DEFAULT_PREFETCH, EXIT_RECYCLE, default_worker_id
from .health import EXIT_REDIS_GONE, EXIT_STOP_TIMEOUT, REDIS_DOWN, RedisHealth
from .loader import load_app

log = logging.getLogger("antre.worker.pool")

RESTART_BACKOFF_CAP_S = 5.0
HEALTHY_AFTER_S = 10.0  # a child that lived this long resets its restart backoff
# where the packages the child imports live: antre_worker's folder and antre's (one folder in
# an installed wheel; worker/ and the checkout's top in a checkout)
CODE_ROOTS = list(dict.fromkeys([str(Path(__file__).resolve().parent.parent),
                                 str(Path(antre.__file__ or ".").resolve().parent.parent)]))


@dataclass
class Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    fails: int = 0
    restart_at: float = 0.0
    finished: bool = False  # burst mode: exited 0, or gave up on Redis (4)
    history: list[int] = field(default_factory=list)  # exit codes


class Supervisor:
    def __init__(self, app_path: str, processes: int = 1, threads: int = 1,
                 queues: list[str] | None = None, burst: bool = False, scheduler: bool = True,
                 *, stop_grace_s: float = 30.0, heartbeat_s: float = 1.0, prefetch: int = DEFAULT_PREFETCH,
                 app: Antre | None = None, concurrency: int | None = None) -> None:
        if processes < 1 or threads < 1:
            raise ValueError("processes and threads must be at least 1")
        self.app_path = app_path
        self.app = app or load_app(app_path)
        self.processes, self.threads = processes, threads
        self.queues = list(queues or self.app.queues())
        self.burst, self.scheduler = burst, scheduler
        self.stop_grace_s, self.heartbeat_s, self.prefetch = stop_grace_s, heartbeat_s, prefetch
        self.concurrency = concurrency  # async jobs per process (None: the child decides)
        self.id = "sup-" + default_worker_id()
        self.restarts = 0
        self.slots = [Slot(i) for i in range(processes)]
        self.duties = Duties(self.app) if scheduler else None
        self.eviction = self.duties.eviction if self.duties else EvictionWatch(self.app.redis)
        self.health = RedisHealth(self.app.redis_url)
        self.registry = WorkerRegistry(self.app.redis)
        self.info = WorkerInfo(id=self.id, host=socket.gethostname(), pid=os.getpid(),
                               queues=self.queues, threads=processes * threads,
                               kind="supervisor")
        self._stop = threading.Event()
        self._signalled = False

    # -- public ------------------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until stopped (or, in burst mode, until every child finished)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.info.started_at = int(time.time() * 1000)
        log.info("pool %s: %d processes x %d threads on queues %s", self.id, self.processes,
                 self.threads, ",".join(self.queues), extra={"event": "pool_started"})
        self._check_eviction()
        if self.app.database_url is None:
            log.warning("no database (ANTRE_DATABASE_URL is unset): no idempotency store, so a "
                        "redelivered job runs its handler again (effects at least once, not at "
                        "most once); set ANTRE_DATABASE_URL to a SQLite or PostgreSQL URL",
                        extra={"event": "no_idempotency_store"})
        if self.duties is not None:
            self.duties.start()
        try:
            self._loop()
        finally:
            code = self._shutdown()
        return code

    def stop(self) -> None:
        self._stop.set()

    def _check_eviction(self) -> None:
        """Warn at start when Redis may evict jobs (again from the duties, every minute)."""
        try:
            self.eviction.check()
        except REDIS_DOWN as exc:
            self.health.failed(exc)

    def _on_signal(self, *_: object) -> None:
        self._signalled = True  # acted on by the loop: an Event set here could deadlock

    # -- internals ---------------------------------------------------------------------------
    def _loop(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set():
            if self._signalled:
                self.stop()
                return
            now = time.monotonic()
            for slot in self.slots:
                self._tend(slot, now)
            if self.burst and all(s.finished for s in self.slots):
                return
            if now >= next_beat:
                self._beat()
                next_beat = now + self.heartbeat_s
            time.sleep(0.05)

    def _tend(self, slot: Slot, now: float) -> None:
        if slot.finished:
            return
        if slot.proc is None:
            if now >= slot.restart_at:
                self._spawn(slot)
            return
        code = slot.proc.poll()
        if code is None:
            return
        slot.history.append(code)
        slot.proc = None
        if self.burst and code in (0, EXIT_REDIS_GONE):  # done, or gave up waiting for Redis
            slot.finished = True
            return
        lived = now - slot.started
        slot.fails = 0 if lived >= HEALTHY_AFTER_S else slot.fails + 1
        delay = min(RESTART_BACKOFF_CAP_S, 0.05 * (2 ** slot.fails)) if slot.fails else 0.0
        slot.restart_at = now + delay
        self.restarts += 1
        log.warning("worker process %d exited with %s after %.1fs; restarting in %.2fs",
                    slot.index, _describe_exit(code), lived, delay,
                    extra={"event": "worker_restart", "cause": restart_cause(code)})
        if code != EXIT_RECYCLE:  # a retiring process recorded its own cause, with its handler
            try:
                self.registry.record_restart(f"{self.id}/{slot.index}", self.info.host,
                                             restart_cause(code))
            except redis.RedisError as exc:
                log.warning("could not record the restart: %s", exc, extra={"event": "error"})

    def _command(self, slot: Slot) -> list[str]:
        cmd = [sys.executable, "-m", "antre_worker.child", self.app_path,
               "--threads", str(self.threads), "--queues", ",".join(self.queues),
               "--supervisor-id", self.id, "--prefetch", str(self.prefetch),
               "--heartbeat", str(self.heartbeat_s), "--grace", str(self.stop_grace_s),
               "--parent-pid", str(os.getpid())]
        if self.concurrency is not None:
            cmd += ["--concurrency", str(self.concurrency)]
        return cmd + (["--burst"] if self.burst else [])

    def _spawn(self, slot: Slot) -> None:
        env = dict(os.environ)
        paths = [*CODE_ROOTS, os.getcwd(), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        # The child arms PR_SET_PDEATHSIG itself and exits if we died before it could (no
        # preexec_fn: unsafe in a process with threads, like the scheduler's).
        slot.proc = subprocess.Popen(self._command(slot), env=env, stdin=subprocess.DEVNULL)
        slot.started = time.monotonic()

    def _beat(self) -> None:
        self.info.restarts = self.restarts
        self.info.current = [str(s.proc.pid) for s in self.slots if s.proc is not None]
        if self._stop.is_set() and self.info.state == "running":
            self.info.state = "stopping"
        try:
            self.registry.beat(self.info)
            self.health.ok()
        except REDIS_DOWN as exc:
            self.health.failed(exc)
        except redis.RedisError as exc:
            log.error("registry heartbeat failed: %s", exc, extra={"event": "error"})

    def _shutdown(self) -> int:
        """Stop the children (SIGTERM, killed past grace + 5 s); the pool's exit code: 0, or
        the first non-zero code of a child's last exit (4: Redis was unreachable)."""
        if self.duties is not None:
            self.duties.stop()
        live = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s + 5.0
        killed = 0
        for proc in live:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker process %d did not stop in time; killing it", proc.pid,
                          extra={"event": "worker_killed"})
                proc.kill()
                proc.wait()
                killed += 1
        self.info.state = "stopped"
        self._beat()
        code = self._exit_code([p.returncode for p in live], killed)
        level = logging.INFO if code == 0 else logging.ERROR
        log.log(level, "pool %s stopped (%d restarts); exit code %d%s", self.id, self.restarts,
                code, "" if not self.health.down else
                f", redis unreachable at {self.health.url}", extra={"event": "pool_stopped"})
        return code

    def _exit_code(self, stopped: list[int], killed: int) -> int:
        """A child's own non-zero exit (4: Redis unreachable; in burst mode its last one), 5
        when one had to be killed, 4 when Redis is unreachable from here; else 0. (A child
        ended by the SIGTERM we sent before it could handle it stopped as asked.)"""
        last = [s.history[-1] for s in self.slots if s.history and s.proc is None]
        failed = [c for c in stopped + (last if self.burst else []) if c > 0]
        if failed:
            return failed[0]
        if killed:
            return EXIT_STOP_TIMEOUT
        return EXIT_REDIS_GONE if self.health.down else 0


def restart_cause(code: int) -> str:
    """Why a child that exited with ``code`` is restarted (``registry.RESTART_CAUSES``)."""
    if code == EXIT_RECYCLE:
        return "retired"  # the child recorded why (hard_timeout or cancel_ignored)
    if code < 0:
        return "killed"
    return "redis_unreachable" if code == EXIT_REDIS_GONE else "crashed"


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return ("code 3 (retired: a handler it could not stop)" if code == EXIT_RECYCLE
            else f"code {code}")
