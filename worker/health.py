"""Riding out a Redis outage: retry with exponential backoff, log the outage once and the
recovery once (whichever thread notices), never give up on an outcome that must land."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from antre.observe.logs import safe_url

log = logging.getLogger("antre.worker")

REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
BACKOFF_CAP_S = 5.0


class RedisHealth:
    """Retries Redis calls through an outage with exponential backoff; logs the outage once
    and the recovery once, whichever thread notices."""

    def __init__(self, url: str) -> None:
        self.url = safe_url(url)
        self._down = False
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._down

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._down:
                return
            self._down = True
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
        once ``stop`` is set or ``time.monotonic()`` passes ``give_up_at``."""
        delay = 0.05
        while True:
            try:
                result = fn(*args, **kwargs)
            except REDIS_DOWN as exc:
                self.failed(exc)
                if (stop is not None and stop.is_set()) or (
                        give_up_at is not None and time.monotonic() >= give_up_at):
                    raise
                if stop is not None:
                    stop.wait(delay)
                else:
                    time.sleep(delay)
                delay = min(delay * 2, BACKOFF_CAP_S)
                continue
            self.ok()
            return result
