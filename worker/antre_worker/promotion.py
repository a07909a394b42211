"""The one place due scheduled jobs (delayed, retried, snoozed) become ready: every worker
process promotes its own queues every ``PROMOTE_EVERY_S``, busy or idle, and before a burst
decides its queues are drained. Why here and nowhere else: docs/ARCHITECTURE.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from antre import Queue

from .health import REDIS_DOWN, RedisHealth

PROMOTE_EVERY_S = 0.5  # how often each process moves due scheduled jobs to ready
PROMOTE_LIMIT = 1000  # jobs per script call (a larger backlog takes several calls)


class Promoter:
    def __init__(self, queues: Sequence[Queue], health: RedisHealth) -> None:
        self.queues = list(queues)
        self.health = health
        self._last_s = 0.0  # monotonic time of the last pass
        self._lock = threading.Lock()

    def when_due(self) -> None:
        """A pass if ``PROMOTE_EVERY_S`` went by since the last one (one runner does it)."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_s < PROMOTE_EVERY_S:
                return
            self._last_s = now
        try:
            self.promote_due()
        except REDIS_DOWN as exc:
            self.health.failed(exc)

    def promote_due(self) -> int:
        """Move every due scheduled job of these queues to ready (waking idle runners
        everywhere); returns how many."""
        return sum(_promote_all(q) for q in self.queues)


def _promote_all(q: Queue) -> int:
    total = 0
    while True:
        n = q.promote(PROMOTE_LIMIT)
        total += n
        if n < PROMOTE_LIMIT:
            return total
