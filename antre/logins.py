"""Login throttling shared by every dashboard process: failed logins per (user name, client
address) in a sliding window, kept in Redis so that N gunicorn workers (or N hosts) allow
``limit`` failures in total, not ``limit`` each.

The pair is hashed before it becomes a key: user names typed at a login form are untrusted.
"""

from __future__ import annotations

import hashlib
import os
from typing import cast

import redis

from . import keys
from .clock import Clock, system_ms
from .scripts import Scripts

__all__ = ["LoginThrottle"]


class LoginThrottle:
    def __init__(self, client: "redis.Redis", *, limit: int = 5, window_ms: int = 60_000,
                 clock: Clock = system_ms, scripts: Scripts | None = None) -> None:
        self.redis, self.limit, self.window_ms, self.clock = client, limit, window_ms, clock
        self.scripts = scripts or Scripts(client)

    @staticmethod
    def _key(user: str, addr: str) -> str:
        digest = hashlib.sha256(f"{user}\x00{addr}".encode("utf-8", "replace")).hexdigest()[:32]
        return keys.login_failures(digest)

    def blocked_for_ms(self, user: str, addr: str) -> int:
        """0 when a login may be tried; else how long until the oldest counted failure leaves
        the window."""
        now = self.clock()
        key = self._key(user, addr)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcount(key, now - self.window_ms + 1, "+inf")
        pipe.zrangebyscore(key, now - self.window_ms + 1, "+inf", start=0, num=1, withscores=True)
        count, oldest = pipe.execute()
        if int(count) < self.limit or not oldest:
            return 0
        first = int(cast(float, oldest[0][1]))
        return max(1, first + self.window_ms - now)

    def failed(self, user: str, addr: str) -> int:
        """Count a failure; returns the failures in the window."""
        now = self.clock()
        return int(self.scripts.failure_add(
            keys=[self._key(user, addr)],
            args=[now, self.window_ms, f"{now}:{os.urandom(4).hex()}"]))

    def succeeded(self, user: str, addr: str) -> None:
        self.redis.delete(self._key(user, addr))
