"""Riding out a Redis outage: retry with exponential backoff, log the outage once and the
recovery once (whichever thread notices), never give up on an outcome that must land, except
when the process has to go: once ``give_up_at`` (a stopping worker's grace) has passed, or an
outage lasted ``give_up_after_s`` (``--burst``), every call gives up and the jobs held come
back through their leases."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError

from antre.observe.logs import safe_url

log = logging.getLogger("antre.worker")

# Redis unreachable for now: refused, reset or timed out, or a Redis Cluster mid-failover (a
# master gone and its replica not yet promoted: CLUSTERDOWN, a slot no node serves, TRYAGAIN),
# which redis-py raises once its own few retries are spent. Not ConnectionError subclasses:
# without them a failover's CLUSTERDOWN went up through an ack and ended the runner thread.
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError, ClusterDownError, SlotNotCoveredError,
              TryAgainError)
BACKOFF_CAP_S = 5.0
EXIT_REDIS_GONE = 4  # stopped (or gave up in burst mode) with Redis unreachable
EXIT_STOP_TIMEOUT = 5  # did not stop within its grace plus a bound: ended by force


class RedisHealth:
    """Retries Redis calls through an outage with exponential backoff; logs the outage once
    and the recovery once, whichever thread notices."""

    def __init__(self, url: str) -> None:
        self.url = safe_url(url)
        self._down = False
        self._down_since = 0.0  # time.monotonic() when the current outage was noticed
        self._lock = threading.Lock()
        self.give_up_at: float | None = None  # monotonic: no call retries past this
        self.give_up_after_s: float | None = None  # no call retries an outage longer than this
        self.gave_up = False  # a call gave up because of the two above

    def giving_up(self) -> bool:
        """Whether a call failing now must give up rather than retry."""
        now = time.monotonic()
        if self.give_up_at is not None and now >= self.give_up_at:
            return True
        limit = self.give_up_after_s
        return limit is not None and self._down and now - self._down_since >= limit

    def _pause_s(self, delay_s: float) -> float:
        """The backoff ``delay_s``, cut short so no retry sleeps past ``give_up_at``."""
        if self.give_up_at is None:
            return delay_s
        return max(0.0, min(delay_s, self.give_up_at - time.monotonic()))

    def outage_s(self) -> float:
        return time.monotonic() - self._down_since if self._down else 0.0

    @property
    def down(self) -> bool:
        return self._down

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._down:
                return
            self._down = True
            self._down_since = time.monotonic()
        log.error("redis unreachable at %s: %s; retrying with backoff", self.url, exc,
                  extra={"event": "redis_down"})

    def ok(self) -> None:
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        log.warning("redis reachable again at %s", self.url, extra={"event": "redis_up"})

    def call(self, fn: Callable[..., Any], *args: Any, stop: threading.Event | None = None,
             give_up_at: float | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, retried while Redis is unreachable. Gives up (re-raising)
        once ``stop`` is set or ``time.monotonic()`` passes ``give_up_at`` (this call's or the
        process's), or the outage outlasted ``give_up_after_s``."""
        delay = 0.05
        while True:
            try:
                result = fn(*args, **kwargs)
            except REDIS_DOWN as exc:
                self.failed(exc)
                if self.giving_up():
                    self.gave_up = True
                    raise
                if (stop is not None and stop.is_set()) or (
                        give_up_at is not None and time.monotonic() >= give_up_at):
                    raise
                pause_s = self._pause_s(delay)
                if stop is not None:
                    stop.wait(pause_s)
                else:
                    time.sleep(pause_s)
                delay = min(delay * 2, BACKOFF_CAP_S)
                continue
            self.ok()
            return result
