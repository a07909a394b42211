"""One queue spread over N partitions, each a ``Queue`` with its own hash tag
(``keys.QueueKeys(queue, p)``), so a Redis Cluster places them on different nodes.

The count in force is published in Redis (``QueueKeys.partition_count``, partition 0's slot) so
that producers, workers and the dashboard on every host agree. It only grows
(``partitions_grow.lua``): a process configured with more partitions publishes its count when it
first uses the queue; one configured with fewer uses the published count (never fewer
partitions than hold jobs). Processes re-read it every ``REFRESH_MS``, so workers start reading
a new partition at their next refresh.

Producers place a job (``Partitions.route``): a job id that carries a partition's suffix goes
back to that partition (the outbox relay, a replayed id); else by ``lock_key`` when set, by
``group`` when set, by the idempotency key of a unique job (a stable crc32 of it, so a key's
order, a group's limits and a unique key's check hold inside one partition: the lock key first,
so a key shared by jobs of several groups keeps its order; those jobs count against their
group's limits in the key's partition); a job given its own id (no suffix) in partition 0;
round robin otherwise.
"""

from __future__ import annotations

import itertools
import logging
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.exceptions import ResponseError

from antre.clock import Clock, system_ms
from antre.engine import keys
from antre.errors import InvalidJob
from antre.engine.envelope import JobSpec
from antre.engine.queue import Queue
from antre.engine.scripts import NamedScript

REFRESH_MS = 5_000  # how often a process re-reads a queue's published partition count
T = TypeVar("T")


def checked_count(n: Any, what: str = "partitions") -> int:
    """``n`` as a partition count (``InvalidJob`` saying what to pass otherwise)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= keys.MAX_PARTITIONS:
        raise InvalidJob(f"{what} must be a whole number from 1 to {keys.MAX_PARTITIONS}, "
                         f"not {n!r}")
    return n


log = logging.getLogger("antre.partitions")
_REFUSED: set[tuple[str, str]] = set()  # (queue, what was found) already logged


def refused(queue: str, found: str, fallback: int) -> int:
    """A published count that is no count (``found``: what is there) is refused: logged once
    per queue and value as an error saying so, and ``fallback`` used instead."""
    if (queue, found) not in _REFUSED:
        if len(_REFUSED) > 1000:
            _REFUSED.clear()
        _REFUSED.add((queue, found))
        log.error("the published partition count of queue %r (%s) is %s, not a whole number "
                  "from 1 to %d: it is ignored, %d partition(s) are used; set it right with "
                  "SET %s <n>", queue, keys.QueueKeys(queue).partition_count, found,
                  keys.MAX_PARTITIONS, fallback, keys.QueueKeys(queue).partition_count)
    return fallback


def parse_count(raw: Any) -> int | None:
    """A stored partition count as a number, or None when it is none (not digits, out of
    1..MAX_PARTITIONS)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    if not isinstance(text, str) or not text.isdigit() or not text.isascii():
        return None
    n = int(text)
    return n if 1 <= n <= keys.MAX_PARTITIONS else None


def published(client: "redis.Redis", queue: str, fallback: int = 1) -> int:
    """The queue's published partition count (1 when none was published; ``fallback``, with
    an error logged, when what is stored is no count: garbage, out of range, not a string)."""
    try:
        raw = client.get(keys.QueueKeys(queue).partition_count)
    except ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        return refused(queue, "not a string", fallback)
    if raw is None:
        return 1
    n = parse_count(raw)
    return n if n is not None else refused(queue, repr(raw)[:40], fallback)


def grow(client: "redis.Redis", queue: str, n: int, script: NamedScript | None = None) -> int:
    """Publish ``n`` partitions for ``queue`` unless more are published; returns the count in
    force. Shrinking is refused by design: a smaller ``n`` changes nothing. A published value
    that is no count is left as it is (refused: ``n`` is used)."""
    checked_count(n)
    script = script or NamedScript(client, "partitions_grow")
    reply = script(keys=[keys.QueueKeys(queue).partition_count], args=[n, keys.MAX_PARTITIONS])
    if isinstance(reply, list):  # ['BAD', what was found]
        return refused(queue, str(reply[1]), n)
    return int(reply)


def spread_key(spec: JobSpec) -> str | None:
    """What places a job in a partition: its lock_key (every job of a key in one partition:
    the key's order holds whatever group each job is of), else its group, else a unique job's
    idempotency key; None: round robin (partition 0 for a job given its own id)."""
    if spec.lock_key:
        return spec.lock_key
    if spec.group is not None:
        return spec.group
    if spec.unique:
        return spec.idempotency_key
    return None


def slot_of(key: str, count: int) -> int:
    """A stable partition for ``key`` among ``count`` (crc32, the same on every host)."""
    return zlib.crc32(key.encode()) % count


class Partitions:
    """One queue's partitions as this process sees them (thread-safe): their ``Queue``s made by
    ``make(p)``, the count re-read every ``REFRESH_MS`` of ``clock``."""

    def __init__(self, client: "redis.Redis", name: str, make: Callable[[int], Queue], *,
                 configured: int = 1, clock: Clock = system_ms) -> None:
        self.client = client
        self.name = name
        self.configured = checked_count(configured)
        self.clock = clock
        self._make = make
        self._made: dict[int, Queue] = {}
        self._count = 1
        self._read_at: int | None = None
        self._lock = threading.Lock()
        self._rr = itertools.count()
        self._grow = NamedScript(client, "partitions_grow")

    def count(self) -> int:
        now = self.clock()
        read_at = self._read_at
        if read_at is None or not 0 <= now - read_at < REFRESH_MS:
            self.refresh(now)
        return self._count

    def due(self) -> bool:
        """Whether the next ``count`` / ``route`` reads the published count from Redis."""
        read_at = self._read_at
        return read_at is None or not 0 <= self.clock() - read_at < REFRESH_MS

    def refresh(self, now: int | None = None) -> int:
        """Read (and, configured with more, grow) the published count now."""
        if self.configured > 1:
            n = grow(self.client, self.name, self.configured, self._grow)
        else:
            n = published(self.client, self.name)
        self._count, self._read_at = n, self.clock() if now is None else now
        return n

    def queue(self, partition: int) -> Queue:
        q = self._made.get(partition)
        if q is None:
            with self._lock:
                q = self._made.get(partition)
                if q is None:
                    q = self._made[partition] = self._make(partition)
        return q

    def queues(self) -> list[Queue]:
        return [self.queue(p) for p in range(self.count())]

    def for_id(self, job_id: str) -> Queue:
        """The partition a job (or flow) id was made in."""
        return self.queue(keys.id_partition(job_id))

    def route(self, spec: JobSpec, by_id: bool = False) -> int:
        """The partition ``spec`` goes to (see the module's docstring). ``by_id``: the one its
        id names (0 without a suffix), whatever else it carries: an id handed out already
        (the outbox's rows, made in their partition before a growth)."""
        now, read_at = self.clock(), self._read_at  # count(), inlined: every enqueue asks
        n = self._count
        if read_at is None or not 0 <= now - read_at < REFRESH_MS:
            n = self.refresh(now)
        if n == 1 and not spec.job_id:
            return 0
        if by_id and spec.job_id and not keys.id_partition(spec.job_id):
            return 0
        if spec.job_id:
            p = keys.id_partition(spec.job_id)
            if p:
                if p >= n:
                    raise InvalidJob(f"job id {spec.job_id!r} names partition {p} of queue "
                                     f"{self.name!r}, which has {n}: pass an id without "
                                     "the '~<n>' suffix")
                return p
        if n == 1:
            return 0
        key = spread_key(spec)
        if key is not None:
            return slot_of(key, n)
        return 0 if spec.job_id else next(self._rr) % n

    def split(self, specs: Sequence[JobSpec],
              by_id: bool = False) -> list[tuple[Queue, list[int]]]:
        """The specs' indexes per partition, in the order first used (each partition's in
        the specs' order); ``by_id``: see ``route``."""
        if self.count() == 1 and not any(s.job_id and keys.id_partition(s.job_id)
                                         for s in specs):
            return [(self.queue(0), list(range(len(specs))))]
        parts: dict[int, list[int]] = {}
        for i, spec in enumerate(specs):
            parts.setdefault(self.route(spec, by_id), []).append(i)
        return [(self.queue(p), idx) for p, idx in parts.items()]


def each(queues: Sequence[T], start: int) -> list[T]:
    """``queues`` rotated to begin at ``start`` (so no partition is always served last)."""
    n = len(queues)
    if n <= 1:
        return list(queues)
    s = start % n
    return [*queues[s:], *queues[:s]]


def all_keys(client: "redis.Redis", queue: str) -> list[keys.QueueKeys]:
    """The keys of each of ``queue``'s published partitions (readers: pages, counts)."""
    return [keys.QueueKeys(queue, p) for p in range(published(client, queue))]


def all_queues(client: "redis.Redis", queue: str, **options: Any) -> list[Queue]:
    """A ``Queue`` (``options``: its clock, scripts...) for each published partition."""
    return [Queue(client, queue, partition=p, **options)
            for p in range(published(client, queue))]


def keys_of_key(client: "redis.Redis", queue: str, key: str) -> keys.QueueKeys:
    """The keys of the partition a group (or lock_key) places its jobs in now (``slot_of``
    among the published count): where its line, slots and overrides live."""
    return keys.QueueKeys(queue, slot_of(key, published(client, queue)))
