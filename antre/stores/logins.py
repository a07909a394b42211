"""Login throttling shared by every dashboard process: failed logins per bucket (the dashboard
uses one per client address, one per account and one per (account, address)) in a sliding
window, kept in Redis so that N gunicorn workers (or N hosts) allow ``limit`` failures in
total, not ``limit`` each.

A bucket is hashed before it becomes a key: user names typed at a login form are untrusted.
Each key expires with its window, so Redis keeps nothing for an address that stopped trying.
"""

from __future__ import annotations

import hashlib
import os
from typing import cast

import redis

from antre.engine import keys
from antre.clock import Clock, system_ms
from antre.engine.scripts import Scripts

__all__ = ["LoginThrottle"]


class LoginThrottle:
    def __init__(self, client: "redis.Redis", *, window_ms: int = 60_000,
                 clock: Clock = system_ms, scripts: Scripts | None = None) -> None:
        self.redis, self.window_ms, self.clock = client, window_ms, clock
        self.scripts = scripts or Scripts(client)

    @staticmethod
    def _key(bucket: str) -> str:
        digest = hashlib.sha256(bucket.encode("utf-8", "replace")).hexdigest()[:32]
        return keys.login_failures(digest)

    def blocked_for_ms(self, bucket: str, limit: int) -> int:
        """0 when a login may be tried; else how long until the oldest counted failure leaves
        the window."""
        now = self.clock()
        key = self._key(bucket)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcount(key, now - self.window_ms + 1, "+inf")
        pipe.zrangebyscore(key, now - self.window_ms + 1, "+inf", start=0, num=1, withscores=True)
        count, oldest = pipe.execute()
        if int(count) < limit or not oldest:
            return 0
        first = int(cast(float, oldest[0][1]))
        return max(1, first + self.window_ms - now)

    def try_reserve(self, buckets: list[tuple[str, int]]) -> tuple[int, str]:
        """Check every ``(bucket, limit)`` and, when none is full, count this try in all of them,
        in one atomic step (``login_try.lua``): ``(0, token)`` when the try may go ahead (it is
        already counted as a failure; ``release(buckets, token)`` takes it back on success),
        else ``(wait_ms, "")`` and nothing is counted."""
        now = self.clock()
        token = f"{now}:{os.urandom(8).hex()}"
        ok, wait_ms = self.scripts.login_try(
            keys=[self._key(b) for b, _ in buckets],
            args=[now, self.window_ms, token, *(limit for _, limit in buckets)])
        return (0, token) if int(ok) == 1 else (max(1, int(wait_ms)), "")

    def release(self, buckets: list[str], token: str) -> None:
        """Take back a try reserved by ``try_reserve`` (it succeeded: it is not a failure)."""
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zrem(self._key(bucket), token)
        pipe.execute()

    def failed(self, bucket: str) -> int:
        """Count a failure; returns the failures in the window."""
        now = self.clock()
        return int(self.scripts.failure_add(
            keys=[self._key(bucket)],
            args=[now, self.window_ms, f"{now}:{os.urandom(4).hex()}"]))

    def succeeded(self, bucket: str) -> None:
        self.redis.delete(self._key(bucket))
