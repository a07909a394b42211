"""A handler's ``ctx.progress(fraction, message)``: checked at once, kept in memory, written to
the job (``Queue.progress``: ``progress.lua``, fenced by the lease epoch) at most once per
``MIN_INTERVAL_S``. A value held back by that limit is written by the next call that is due,
by the heartbeat (``Leases.beat``), or, at the latest, right after the handler returns, before
its job is settled: the last value always lands before the ack. A stale holder's write is
refused by the script and dropped here (the handler learns of a lost lease from
``ctx.cancelled``); a Redis error drops that one write, never the handler's run.

A sync handler writes on its own thread; an async one's due write goes to the loop's default
executor, so the loop never waits on Redis.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import redis

from antre import LeaseLost
from antre.engine.progress import checked

from .held import Running

MIN_INTERVAL_S = 0.25  # at most 4 progress writes per second per job
log = logging.getLogger("antre.worker")


class Reporter:
    """The progress of one running job (``r``); ``report`` is its ``ctx.progress``."""

    def __init__(self, r: Running, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.r = r
        self.monotonic = monotonic
        self._lock = threading.Lock()  # one write at a time, in the order values came
        self._pending: tuple[float, str] | None = None
        self._sent_at = float("-inf")
        self.writes = 0  # progress writes sent (for tests and the log)

    def report(self, fraction: float, message: str = "") -> None:
        value = checked(fraction, message)  # ValueError in the handler, saying what to pass
        self._pending = value
        if not self._due():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
        else:
            loop.run_in_executor(None, self.flush)

    def _due(self) -> bool:
        return self.monotonic() - self._sent_at >= MIN_INTERVAL_S

    def flush_due(self) -> None:
        """The heartbeat's: write a value held back by the rate limit once it is due."""
        if self._pending is not None and self._due():
            self.flush()

    def flush(self) -> None:
        """Write the value not written yet, if any (before the job is settled: at once)."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None or self.r.closed:
                return
            self._sent_at = self.monotonic()
            try:
                self.r.queue.progress(self.r.job, *pending)
                self.writes += 1
            except LeaseLost as exc:
                log.debug("progress of job %s refused: %s", self.r.job.id, exc)
            except redis.RedisError as exc:
                log.warning("progress of job %s not stored (%s)", self.r.job.id, exc)
