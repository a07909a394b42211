"""Completion reporting for the no-op benchmarks, the same for Antre and every peer.

A handler calls ``done()``: two in-memory updates, no I/O and no system call. A daemon thread
per process flushes ``count first last`` to the Redis hash ``bench:progress`` (field = pid)
every 20 ms, so the harness can see when all N jobs ran and when the first and last ones
finished, without adding a round trip per job. Forking workers (RQ's default Worker runs each
job in a fresh fork) flush synchronously instead (``BENCH_SYNC=1`` or a pid change with no
thread).

Stdlib + redis-py only: it is imported inside each peer's own virtualenv.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import redis

KEY = "bench:progress"
_pid = 0
_counter = itertools.count(1)
_n = 0
_first = 0.0
_last = 0.0
_client = None


def _url() -> str:
    return os.environ["BENCH_REDIS_URL"]


_sends = [0]


def count_round_trips() -> None:
    """Count every request this process writes to Redis (a pipeline is one): wraps redis-py's
    ``Connection.send_packed_command``. Reported in ``bench:rtt`` (field = pid)."""
    from redis.connection import AbstractConnection
    original = AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        if threading.current_thread().name != "bench-progress":
            _sends[0] += 1
        return original(self, command, check_health)
    AbstractConnection.send_packed_command = counted


def _flush(client) -> None:
    if _n:
        client.hset(KEY, str(os.getpid()), f"{_n} {_first:.6f} {_last:.6f}")
        if _sends[0]:
            client.hset("bench:rtt", str(os.getpid()), _sends[0])


def _loop() -> None:
    client = redis.Redis.from_url(_url())
    while True:
        time.sleep(0.02)
        try:
            _flush(client)
        except Exception:
            pass


# this process's id, kept (a fork child sets its own): no system call per job
_me = [os.getpid()]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _me.__setitem__(0, os.getpid()))
_sync = [False]  # BENCH_SYNC, read at a process's first job


def done() -> None:
    global _pid, _n, _first, _last, _counter, _client
    now = time.time()
    pid = _me[0]
    if pid != _pid:  # first job in this process (or in this fork)
        _pid, _counter, _first = pid, itertools.count(1), now
        _sync[0] = bool(os.environ.get("BENCH_SYNC"))
        if not _sync[0]:
            import atexit
            atexit.register(flush_now)
            threading.Thread(target=_loop, daemon=True, name="bench-progress").start()
        else:
            _client = redis.Redis.from_url(_url())
    _n = next(_counter)
    _last = now
    if _sync[0]:
        _client.hincrby(KEY, "sync:n", 1)
        _client.hsetnx(KEY, "sync:first", f"{now:.6f}")
        _client.hset(KEY, "sync:last", f"{now:.6f}")


def read(client) -> tuple[int, float, float]:
    """(jobs done, first finished, last finished) over every process."""
    raw = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
           for k, v in client.hgetall(KEY).items()}
    if "sync:n" in raw:
        return int(raw["sync:n"]), float(raw["sync:first"]), float(raw["sync:last"])
    total, first, last = 0, float("inf"), 0.0
    for value in raw.values():
        n, f, l = value.split()
        total += int(n)
        first, last = min(first, float(f)), max(last, float(l))
    return total, first, last


def flush_now() -> None:
    """Write this process's figures at once (before a voluntary exit)."""
    client = redis.Redis.from_url(_url())
    _flush(client)
    client.close()


def started() -> None:
    """Kill -9 checks: a slow job says it is running (synchronously)."""
    client = redis.Redis.from_url(_url())
    client.incr("bench:started")
    client.close()
