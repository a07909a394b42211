"""Locks on business keys: owned (random token) and fenced (a per-key counter bumped on every
acquire). Release is compare-and-delete and renewal compare-and-expire, both Lua."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator, cast

import redis
from redis.cluster import RedisCluster

from antre.engine import keys
from antre.clock import Clock, system_ms
from antre.errors import AntreError
from antre.engine.scripts import Batch, Call, Scripts, direct, direct_ok


MINUTE_MS = 60_000
BUCKETS = 60  # minute buckets of per-key conflicts: the last hour
SHORT_BUCKETS = 5  # the "last 5 minutes" figure: this minute and the four before


class LockBusy(AntreError):
    """Somebody else holds the lock."""

    def __init__(self, key: str, holder: str, ttl_ms: int, fence: int = 0) -> None:
        super().__init__(f"lock {key!r} is held by {holder or '?'} for another {ttl_ms} ms")
        self.key, self.holder, self.ttl_ms, self.fence = key, holder, ttl_ms, fence


@dataclass
class Lock:
    key: str
    token: str
    fence: int
    ttl_ms: int
    lost: bool = False


@dataclass(frozen=True)
class LockContention:
    """Conflicts on one business key: over the last 5 minutes, the last hour, and ever."""
    key: str
    last_5m: int
    last_1h: int
    total: int


@dataclass(frozen=True)
class HeldLock:
    key: str
    holder: str
    ttl_ms: int
    fence: int
    since_ms: int = 0  # when it was acquired (0: not recorded)
    holder_job: str = ""  # '<queue>/<job id>' when the acquirer named it

    @property
    def holder_worker(self) -> str:
        """The owner part of the token (a worker id: host:pid:nonce)."""
        return self.holder.rsplit(":", 1)[0]


class Locks:
    def __init__(self, client: "redis.Redis", *, clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)
        # the held-locks index goes into the lock scripts, except on a cluster (another slot)
        self.cluster = isinstance(client, RedisCluster)
        self._index = [] if self.cluster else [keys.locks_held(), keys.locks_since()]

    def acquire(self, key: str, ttl_ms: int, owner: str = "", *,
                release: Lock | None = None, holder_job: str = "",
                holder_epoch: int | None = None) -> Lock:
        """Take the lock or raise ``LockBusy`` (and count a conflict on ``key``).

        One script, which also indexes the key as held (on a Redis Cluster the index is in
        another slot: a second command there). ``release``: a lock this caller is done with,
        released first in the same round trip (a worker hands over from one job to the next);
        ``release.lost`` is set when it was no longer held by its token (the reply of its
        compare-and-delete: whether it was still held when its job ended). ``holder_epoch``:
        the lease epoch of ``holder_job``'s delivery; a lock a worker's hand-over took for
        that very delivery is adopted (the delivery went to this caller's reserve instead)."""
        token = f"{owner or 'pid' + str(os.getpid())}:{os.urandom(8).hex()}"
        now = self.clock()
        lock_keys = [keys.lock(key), keys.lock_fence(key)]
        args: list[str | int] = [token, int(ttl_ms), key, now, holder_job,
                                 "" if holder_epoch is None else int(holder_epoch)]
        if release is not None and not self.cluster:
            calls: list[Call] = [
                (self.scripts.lock_release, [keys.lock(release.key), *self._index],
                 [release.token, release.key]),
                (self.scripts.lock_acquire, lock_keys + self._index, args)]
            if direct_ok(self.redis):  # one write, no pipeline object
                released, reply = direct(self.redis, calls)
            else:
                batch = Batch(self.redis)
                for script, k, a in calls:
                    assert script is not None
                    batch.script(script, k, a)
                released, reply = batch.execute()
            if not int(released):
                release.lost = True  # it was no longer ours when its holder let it go
        else:
            if release is not None:
                self.release(release)
            reply = self.scripts.lock_acquire(keys=lock_keys + self._index, args=args)
        if int(reply[0]) == 1:
            if self.cluster:
                self.redis.zadd(keys.locks_held(), {key: now + int(ttl_ms)})
                self.redis.hset(keys.locks_since(), key, f"{now}|{holder_job}")
            return Lock(key, token, int(reply[1]), int(ttl_ms))
        self.count_conflict(key)
        raise _busy(key, reply)

    def raise_fence(self, key: str, floor: int) -> int:
        """Make the next acquire of ``key`` hand out a token above ``floor`` (never lowers the
        counter); returns the counter. See ``antre.stores.fencing``."""
        return int(self.scripts.lock_fence_raise(keys=[keys.lock_fence(key)], args=[int(floor)]))

    def renew(self, lock: Lock) -> bool:
        """Compare-and-expire. The index keeps the key's first expiry: it orders the Locks page
        (long-held and abandoned keys first, where reading prunes the abandoned ones)."""
        ok = bool(self.scripts.lock_renew(keys=[keys.lock(lock.key)],
                                          args=[lock.token, lock.ttl_ms]))
        if not ok:
            lock.lost = True
        return ok

    def renew_call(self, lock: Lock) -> "Call":
        """``lock``'s compare-and-expire (``renew``) as a call to send with others in one round
        trip (a worker checks the locks of a batch's shared transaction before its commit)."""
        return (self.scripts.lock_renew, [keys.lock(lock.key)], [lock.token, lock.ttl_ms])

    def release(self, lock: Lock) -> bool:
        """Compare-and-delete; False (and ``lock.lost`` set) when it was no longer ours: it
        expired or was force-released before its holder let it go."""
        ok = self.release_token(lock.key, lock.token)
        if not ok:
            lock.lost = True
        return ok

    def release_call(self, lock: Lock) -> "Call | None":
        """``lock``'s compare-and-delete as a call to send with another script in one round
        trip (``Queue.ack(..., release=...)``: a worker hands its key to the next job as it
        acks); None on a cluster (the lock index lives in another slot)."""
        if self.cluster:
            return None
        return (self.scripts.lock_release, [keys.lock(lock.key), *self._index],
                [lock.token, lock.key])

    def release_token(self, key: str, token: str) -> bool:
        """Compare-and-delete; the dashboard's force release passes the holder token it showed."""
        ok = bool(self.scripts.lock_release(keys=[keys.lock(key)] + self._index,
                                            args=[token, key]))
        if ok and self.cluster:
            self.redis.zrem(keys.locks_held(), key)
            self.redis.hdel(keys.locks_since(), key)
        return ok

    def release_lost(self, key: str, worker_id: str) -> bool:
        """Release the lock on ``key`` if ``worker_id`` holds it (its token's owner part): the
        rescuer frees the locks of a process taken for lost, whose jobs run again elsewhere. A
        holder that was only paused finds it gone; its SQL under it is refused by the fence."""
        token = cast("str | None", self.redis.get(keys.lock(key)))
        if not token or token.rsplit(":", 1)[0] != worker_id:
            return False
        return self.release_token(key, token)  # (compare-and-delete: a new holder keeps it)

    def count_conflict(self, key: str) -> None:
        """One script in the {locks} slot: the key's total, the hour's timeline and the key's
        count in this minute's bucket (``contention`` reads the buckets)."""
        now = self.clock()
        minute = now // MINUTE_MS
        self.scripts.lock_conflict(
            keys=[keys.lock_conflicts(), keys.lock_conflict_times(),
                  keys.lock_conflict_minute(minute), keys.lock_conflict_count()],
            args=[key, now, f"{now}:{key}:{os.urandom(3).hex()}",
                  (BUCKETS + 1) * MINUTE_MS])

    def held(self, limit: int = 200) -> list[HeldLock]:
        """Locks currently held (index pruned of released and expired ones on read)."""
        names = cast(list[str], self.redis.zrange(keys.locks_held(), 0, limit - 1))
        if not names:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.get(keys.lock(name))
            pipe.pttl(keys.lock(name))
            pipe.get(keys.lock_fence(name))
        pipe.hmget(keys.locks_since(), names)
        replies = pipe.execute()
        since = replies.pop()
        out, gone = [], []
        for i, name in enumerate(names):
            holder, ttl, fence = replies[3 * i: 3 * i + 3]
            if holder is None:
                gone.append(name)
            else:
                at, _, job = (since[i] or "").partition("|")
                out.append(HeldLock(name, holder, int(ttl), int(fence or 0),
                                    int(at) if at.isascii() and at.isdigit() else 0, job))
        if gone:
            self.redis.zrem(keys.locks_held(), *gone)
            self.redis.hdel(keys.locks_since(), *gone)
        out.sort(key=lambda h: h.since_ms or 1 << 62)  # held longest first
        return out

    def top_conflicts(self, limit: int = 10) -> list[tuple[str, int]]:
        pairs = cast(list[tuple[str, float]],
                     self.redis.zrevrange(keys.lock_conflicts(), 0, limit - 1, withscores=True))
        return [(k, int(v)) for k, v in pairs]

    def conflicts_since(self, since_ms: int) -> int:
        return int(self.redis.zcount(keys.lock_conflict_times(), since_ms, "+inf"))

    def conflicts_total(self) -> int:
        return int(self.redis.get(keys.lock_conflict_count()) or 0)

    def contention(self, limit: int = 20) -> list[LockContention]:
        """The most contended keys (most conflicts in the last hour, then the last 5 minutes, then ever), each with its
        conflicts over the last 5 minutes (this minute and the 4 before), the last hour (60
        minute buckets) and in total. One script, bounded by ``limit``."""
        minute = self.clock() // MINUTE_MS
        buckets = [keys.lock_conflict_minute(minute - i) for i in range(BUCKETS)]
        flat = cast(list[str], self.scripts.lock_contention(
            keys=[keys.lock_conflicts(), keys.lock_contention_scratch(), *buckets],
            args=[int(limit), SHORT_BUCKETS]))
        rows = [LockContention(flat[i], int(float(flat[i + 1])), int(float(flat[i + 2])),
                               int(float(flat[i + 3]))) for i in range(0, len(flat), 4)]
        rows.sort(key=lambda c: c.key)
        rows.sort(key=lambda c: (c.last_1h, c.last_5m, c.total), reverse=True)
        return rows[:limit]


def _busy(key: str, reply: Any) -> LockBusy:
    """The ``LockBusy`` of a refused ``lock_acquire`` reply."""
    holder = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
    return LockBusy(key, holder, int(reply[2]), int(reply[3]) if len(reply) > 3 else 0)


class LockRenewer:
    """Renews a lock every ttl/3 in a thread while a handler runs; marks it lost on failure."""

    def __init__(self, locks: Locks, lock: Lock) -> None:
        self.locks, self.lock = locks, lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"renew:{lock.key}")

    def __enter__(self) -> "LockRenewer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.lock.ttl_ms / 3000):
            try:
                if not self.locks.renew(self.lock):
                    return
            except redis.RedisError:
                continue


def held_lock(locks: Locks, key: str, ttl_ms: int, owner: str = "") -> Iterator[Lock]:
    lock = locks.acquire(key, ttl_ms, owner)
    try:
        with LockRenewer(locks, lock):
            yield lock
    finally:
        try:
            locks.release(lock)
        except redis.RedisError:
            pass  # it expires by its TTL
