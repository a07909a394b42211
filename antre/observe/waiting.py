"""Waiting for an idempotency key's result (``app.result(key).wait(timeout)``, ``await
app.aresult(key, timeout=...)``), woken by the job's end rather than by polling.

One wait, while the key's job is in Redis: the key's status is read (``Finder.result``: the SQL
record first, so a key completed in SQL whose Redis job was trimmed answers at once); a job
not yet ended gets one more waiter counted on it (``result_wait.lua``, which reads its state in
the same script); then one blocking pop on the job's wake list (``keys.result_wake``) for the
time left. The script that ends the job (ack, deduplicated ack, bury, a cancel's end, a purge:
``result_wake`` in ``lua/_waiters.lua``) pushes one token per waiter, so every waiter wakes; the
status is read again and returned. A wait of any length costs the same few commands (one
blocking pop per ``SLICE_S``).

A key no job carries yet (its job still in the outbox, a producer that has not sent it, or a
Redis that lost it) has nothing to wait on: it is read again after 0.05 s, doubling up to 1 s,
until a job appears or the timeout passes. A Redis connection lost while waiting (a restart)
is retried the same way, and the wait counted again on the restarted server; Redis still
unreachable at the timeout raises ``ResultUnavailable``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError
from redis.asyncio import Redis as AsyncRedis
from redis.cluster import RedisCluster

from antre.engine import keys
from antre.engine.queue import Queue
from antre.errors import ResultUnavailable
from antre.observe.finder import Finder, ResultStatus, check_timeout
from antre.engine import states

SLICE_S = 300.0  # the longest single blocking pop (its reply is awaited this + 5 s)
FIRST_RETRY_S = 0.05  # a key not in Redis yet, or Redis away: read again after this...
MAX_RETRY_S = 1.0  # ...doubling up to this
# a Redis Cluster failover raises CLUSTERDOWN / an uncovered slot / TRYAGAIN once redis-py's
# own retries are spent (none of them a ConnectionError): an outage to wait through as well
_OUTAGE = (redis.ConnectionError, redis.TimeoutError, OSError, ClusterDownError,
           SlotNotCoveredError, TryAgainError)
END, AGAIN, LATER = "end", "again", "later"  # after one step: return, read again, pause first


def blocking_pop(client: "redis.Redis", key: str, timeout_s: float) -> bool:
    """``BLPOP key timeout_s`` on one of the client's pooled connections, its reply awaited
    up to ``timeout_s`` + 5 s whatever the client's socket timeout; True when a token came.
    (A cluster or single-connection client: ``blpop`` in slices of at most 5 s.)"""
    timeout_s = max(0.01, timeout_s)  # BLPOP 0 would block for ever
    if isinstance(client, RedisCluster) or client.connection is not None:
        return client.blpop([key], timeout=min(timeout_s, 5.0)) is not None
    pool = client.connection_pool
    conn: Any = pool.get_connection()
    try:
        conn.send_command("BLPOP", key, f"{timeout_s:.3f}")
        if not conn.can_read(timeout=timeout_s + 5):
            raise redis.TimeoutError(f"no reply to BLPOP {timeout_s:.1f}s from Redis")
        reply = conn.read_response()
    except BaseException:
        conn.disconnect()  # whatever was unread would be read by the next caller
        raise
    finally:
        pool.release(conn)
    return reply is not None


async def ablocking_pop(client: AsyncRedis, key: str, timeout_s: float) -> bool:
    """``blocking_pop`` on ``redis.asyncio``: the loop runs on while the pop waits."""
    timeout_s = max(0.01, timeout_s)
    pool: Any = client.connection_pool
    conn: Any = await pool.get_connection()
    try:
        await conn.send_command("BLPOP", key, f"{timeout_s:.3f}")
        reply = await conn.read_response(timeout=timeout_s + 5)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    return reply is not None


class PerLoop:
    """A ``redis.asyncio`` client for each event loop that asks (``make()`` builds one): a
    client's connections belong to the loop that opened them, and ``asyncio.run`` twice in
    one program is two loops. A loop's client goes with the loop."""

    def __init__(self, make: Callable[[], AsyncRedis]) -> None:
        self.make = make
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncRedis] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()

    def __call__(self) -> AsyncRedis:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                client = self._clients[loop] = self.make()
        return client


class ResultWaiter:
    """Waits for keys' results on one app's Redis (see the module's docstring). ``finder``
    and ``queue`` (a queue by name) are the app's; ``aredis``: the running loop's
    ``redis.asyncio`` client for the async wait's blocking pop (``PerLoop``; None: the pop
    runs on a thread); ``sleep`` / ``monotonic`` only for the re-reads of a key that is not in
    Redis yet."""

    def __init__(self, finder: Callable[[], Finder], queue: Callable[[str, int], Queue],
                 aredis: Callable[[], AsyncRedis] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.finder = finder
        self.queue = queue
        self.aredis = aredis
        self.sleep = sleep
        self.monotonic = monotonic

    def bind(self, status: ResultStatus) -> ResultStatus:
        """``status`` able to ``wait()`` through this waiter (a frozen dataclass: the waiter
        is kept beside its fields, so ``dataclasses.asdict`` and equality ignore it)."""
        object.__setattr__(status, "_waiter", self)
        return status

    # -- synchronous --------------------------------------------------------------------------
    def wait(self, idempotency_key: str, timeout: float) -> ResultStatus:
        """The key's final status, or its status at ``timeout`` seconds (``timed_out``)."""
        deadline = self.monotonic() + check_timeout(timeout)
        delay = FIRST_RETRY_S
        while True:
            try:
                status, then = self._step(idempotency_key, deadline)
                outage: BaseException | None = None
            except _OUTAGE as exc:
                status, then, outage = None, LATER, exc
            if status is not None and then == END:
                return self.bind(status)
            if deadline - self.monotonic() <= 0:
                return self._timed_out(idempotency_key, status, outage)
            if then == LATER:
                self.sleep(min(delay, max(0.0, deadline - self.monotonic())))
                delay = min(delay * 2, MAX_RETRY_S)

    def _step(self, key: str, deadline: float) -> tuple[ResultStatus, str]:
        """One read, and one wait when the key's job is in Redis and not ended: the status
        and what then (END: return it; AGAIN: read again at once; LATER: after a pause)."""
        finder = self.finder()
        status = finder.result(key)
        if status.final:
            return status, END
        if status.source != "redis":
            return status, LATER
        q = self.queue(status.queue, keys.id_partition(status.job_id))  # its partition
        if q.wait_start(status.job_id) not in (states.DONE, states.DEAD, ""):
            left = deadline - self.monotonic()
            if left <= 0:
                return status, AGAIN
            blocking_pop(q.redis, q.keys.result_wake(status.job_id), min(left, SLICE_S))
        return _after_wake(finder, status, finder.result(key))

    # -- asyncio ------------------------------------------------------------------------------
    async def await_result(self, idempotency_key: str, timeout: float) -> ResultStatus:
        """``wait`` from a coroutine: the reads run on a thread (SQL and Redis, short), the
        blocking pop on ``redis.asyncio`` (no thread held while it waits)."""
        deadline = self.monotonic() + check_timeout(timeout)
        delay = FIRST_RETRY_S
        while True:
            try:
                status, then = await self._astep(idempotency_key, deadline)
                outage: BaseException | None = None
            except _OUTAGE as exc:
                status, then, outage = None, LATER, exc
            if status is not None and then == END:
                return self.bind(status)
            if deadline - self.monotonic() <= 0:
                return await asyncio.to_thread(self._timed_out, idempotency_key, status, outage)
            if then == LATER:
                await asyncio.sleep(min(delay, max(0.0, deadline - self.monotonic())))
                delay = min(delay * 2, MAX_RETRY_S)

    async def _astep(self, key: str, deadline: float) -> tuple[ResultStatus, str]:
        finder = self.finder()
        status = await asyncio.to_thread(finder.result, key)
        if status.final:
            return status, END
        if status.source != "redis":
            return status, LATER
        q = self.queue(status.queue, keys.id_partition(status.job_id))  # its partition
        if await asyncio.to_thread(q.wait_start, status.job_id) not in (states.DONE, states.DEAD, ""):
            left = deadline - self.monotonic()
            if left <= 0:
                return status, AGAIN
            wake = q.keys.result_wake(status.job_id)
            if self.aredis is None:
                await asyncio.to_thread(blocking_pop, q.redis, wake, min(left, SLICE_S))
            else:
                await ablocking_pop(self.aredis(), wake, min(left, SLICE_S))
        return await asyncio.to_thread(
            lambda: _after_wake(finder, status, finder.result(key)))

    # -- the end of a wait that did not see the job end ---------------------------------------
    def _timed_out(self, key: str, status: ResultStatus | None,
                   outage: BaseException | None) -> ResultStatus:
        if outage is not None:
            raise ResultUnavailable(
                f"Redis was unreachable while waiting for {key!r} ({outage}); whether its job "
                f"ended is not known: wait again once Redis is back") from outage
        if status is None:  # (not reached: a step that did not fail returned a status)
            status = self.finder().result(key)
        return self.bind(dataclasses.replace(status, timed_out=not status.final))


def _after_wake(finder: Finder, before: ResultStatus,
                now: ResultStatus) -> tuple[ResultStatus, str]:
    """The key read again after its job's wait ended: final (END); still pending (a token left
    from an earlier end, or the slice ran out: AGAIN); not known any more: its cancel request
    discarded it ('cancelled'), or it was removed before it ended (purged, or lost with Redis's
    data) and nothing will finish it (END)."""
    if now.final:
        return now, END
    if now.status == "unknown" and finder.cancelled_gone(before.queue, before.job_id):
        return dataclasses.replace(now, status="cancelled", job_id=before.job_id,
                                   queue=before.queue, source="redis",
                                   error="cancelled (the job was discarded)"), END
    if now.status == "unknown":
        return dataclasses.replace(now, job_id=before.job_id, queue=before.queue, error=(
            f"job {before.job_id} was removed before it ended (purged, or lost by Redis); "
            f"nothing will finish it: enqueue it again")), END
    return now, AGAIN
