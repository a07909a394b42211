"""Typed read models for the dashboard, the JSON API and the CLI. Templates never touch Redis.

Every read is indexed: LLEN/ZCARD for counts, ZRANGE by score or rank with LIMIT for pages,
one pipelined HMGET per page of jobs. Nothing here scans the keyspace or a whole queue.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.engine.envelope import Job, from_fields
from antre.engine.progress import Progress, decode as decode_progress
from antre.limits.admission import BreakerState, RateLimiterState, SemaphoreState
from antre.engine.locks import LockContention
from antre.engine import tracebacks
from antre.observe.memory import MemoryPolicy
from antre.engine import states

ROW_FIELDS = ("id", "type", "attempt", "max_attempts", "worker_id", "deadline", "reserved_at",
              "epoch", "lock_key", "last_error", "error_kind", "visible_at", "reason", "group",
              "finished_at", "created_at", "deliveries", "idem_key", "first_failed_at",
              "extended_at", "checkpoint_at", "cancel", "progress")


@dataclass(frozen=True)
class PauseInfo:
    """A paused queue (``job_type`` None) or job type: who paused it, when and why."""

    queue: str
    job_type: str | None
    by: str
    at_ms: int
    reason: str

    @property
    def target(self) -> str:
        return self.queue if self.job_type is None else f"{self.queue}/{self.job_type}"


def pause_infos(queue: str, raw: dict[str, str]) -> list[PauseInfo]:
    """The paused HASH of a queue ('*' or job type -> JSON) as read models, queue first."""
    out = []
    for target, text in sorted(raw.items(), key=lambda kv: (kv[0] != "*", kv[0])):
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        out.append(PauseInfo(queue, None if target == "*" else target, str(data.get("by", "?")),
                             _int(data.get("at")), str(data.get("reason", ""))))
    return out


@dataclass(frozen=True)
class QueueInfo:
    name: str
    ready: int  # in the ready list, plus jobs parked because their type is paused
    scheduled: int
    inflight: int
    dead: int
    done: int
    oldest_ready_age_ms: int
    stats: dict[str, int]
    as_of: int
    paused: tuple[PauseInfo, ...] = ()
    parked: int = 0
    waiting: int = 0  # behind the head of their lock_key: made ready in their turn
    keys_held: int = 0  # lock_keys of this queue that have a head (a job whose turn it is)
    held: int = 0  # jobs of flows waiting for their parents, state 'held'
    partitions: int = 1  # the queue's partitions, their counts summed here

    @property
    def queue_paused(self) -> PauseInfo | None:
        return next((p for p in self.paused if p.job_type is None), None)


@dataclass(frozen=True)
class Turn:
    """A job's place on its lock_key: ``place`` 0 is the head (its turn), n the
    n-th waiting behind it; ``line`` how many wait on the key in all."""
    lock_key: str
    head: str
    place: int
    line: int
    group: str = ""  # set when it waits for a slot of its group (head is then '')
    slots_held: int = 0
    rate: str = ""  # set when it is scheduled for the start its group's rate gave it
    gate: str = ""  # set when it waits for a type's or downstream's limit

    @property
    def ordinal(self) -> str:
        return _ordinal(self.place)

    def describe(self) -> str:
        if self.gate:
            return (f"{_ordinal(self.place)} in line for a slot of {self.gate} "
                    f"({self.slots_held} in flight)" if self.place else f"{self.gate}'s rate")
        if self.rate and self.place:
            return f"{_ordinal(self.place)} in line for group {self.group}'s rate {self.rate}"
        if self.rate:
            return f"group {self.group}'s rate {self.rate}"
        if self.group:
            return (f"{_ordinal(self.place)} in line for a slot of group {self.group} "
                    f"({self.slots_held} held)")
        if self.place == 0:
            return (f"its turn on lock {self.lock_key}: {self.line} job(s) wait behind it"
                    if self.line else f"its turn on lock {self.lock_key}")
        return f"{_ordinal(self.place)} behind job {self.head} on lock {self.lock_key}"


def _cancel_of(raw: str | None) -> dict[str, Any]:
    """A job's pending cancel request (its 'cancel' field, JSON {by, to, reason, at}) as the
    ``JobRow`` fields ``cancel_at`` and ``cancel_by``; none for an empty or damaged value."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return {}
    at = data.get("at")
    return {"cancel_at": at if isinstance(at, int) else 0,
            "cancel_by": str(data.get("by", "?"))}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class JobRow:
    """One line of a job table (in-flight, scheduled, dead, done)."""

    id: str
    type: str
    attempt: int
    max_attempts: int
    deliveries: int
    worker_id: str
    epoch: int
    deadline: int
    time_left_ms: int
    reserved_at: int
    visible_at: int
    lock_key: str
    last_error: str
    error_kind: str
    reason: str
    group: str
    finished_at: int
    created_at: int
    idempotency_key: str
    first_failed_at: int
    extended_at: int = 0  # last lease extension (a heartbeat, the handler, an operator)
    checkpoint_at: int = 0  # last checkpoint saved
    cancel_at: int = 0  # an operator's cancel request not carried out yet: when (0: none) ...
    cancel_by: str = ""  # ... and by whom (the in-flight page's "cancelling since")
    progress: Progress | None = None  # the handler's last ctx.progress

    @property
    def cancelling(self) -> bool:
        return bool(self.cancel_at or self.cancel_by)

    def running_ms(self, now_ms: int) -> int:
        return now_ms - self.reserved_at if self.reserved_at else 0

    def silent_ms(self, now_ms: int) -> int:
        """Since the lease was last extended (or reserved): a stuck job's silence."""
        last = max(self.extended_at, self.reserved_at)
        return now_ms - last if last else 0


@dataclass(frozen=True)
class Page:
    rows: list[JobRow]
    total: int
    offset: int
    limit: int
    as_of: int

    @property
    def has_next(self) -> bool:
        return self.offset + len(self.rows) < self.total


@dataclass(frozen=True)
class ErrorGroup:
    group: str
    signature: str
    job_type: str
    count: int  # entries in the DLQ now
    total: int  # ever buried with this signature
    first_seen: int
    last_seen: int


MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last a datetime can hold
# a DLQ filter's time window by name (the dashboard's and the API's ``window``)
WINDOWS_MS = {"15m": 900_000, "1h": 3_600_000, "6h": 21_600_000, "24h": 86_400_000,
              "7d": 604_800_000}


@dataclass(frozen=True)
class DeadFilter:
    job_type: str | None = None
    group: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def describe(self, signature: str = "") -> str:
        """The filter as a reader names it; with the group's ``signature`` the group is named
        by its error (``error "timeout talking to <host>"``), not its hash."""
        group = f'error "{signature}"' if self.group and signature else \
            (f"group={self.group}" if self.group else "")
        parts = [f"{k}={v}" for k, v in (("type", self.job_type), ("since", self.since_ms),
                                          ("until", self.until_ms)) if v]
        return ", ".join(([group] if group else []) + parts) or "all"


@dataclass(frozen=True)
class ScheduleInfo:
    """One periodic schedule on the Schedules page, the API and ``antre schedules list``."""

    name: str
    job_type: str
    queue: str
    trigger: str  # 'cron */5 * * * * (UTC)' or 'every 30 s'
    catch_up: str
    paused: bool
    paused_by: str
    last_tick_ms: int  # the last tick enqueued (or skipped while paused)
    last_job_id: str  # the last run's job (a tick or a manual run)
    last_enqueued_ms: int
    last_outcome: str  # the last run's job state: ready, inflight, done, dead, ... or never run
    last_finished_ms: int
    last_error: str
    next_run_ms: int
    seen_ms: int  # when a scheduler last ran this schedule
    stale: bool  # none has for a while: the schedule left the code, or no worker runs duties
    as_of: int


@dataclass(frozen=True)
class RetentionInfo:
    """A queue's retention as the dead-letter page shows it: 'keeps 30 days / 100,000 jobs'."""

    queue: str
    dead_max_jobs: int
    dead_max_age_s: int
    done_max_age_s: int
    dead_dropped: int  # dead jobs dropped by retention so far (oldest first)
    text: str


@dataclass
class Overview:
    queues: list[QueueInfo] = field(default_factory=list)
    as_of: int = 0

    def total(self, attr: str) -> int:
        return sum(int(getattr(q, attr)) for q in self.queues)


@dataclass(frozen=True)
class QueueRates:
    """Jobs per minute of one queue over the last 5 minutes, from the sampler's figures (None
    until two samples exist)."""
    acked: float | None
    retried: float | None
    buried: float | None
    expired: float | None


@dataclass(frozen=True)
class StatusSummary:
    """What the overview page, ``GET /api/overview`` and ``antre status`` show: depth per
    queue, rates, flow control, lock conflicts (all keys: last 5 minutes / hour / ever) and
    the most contended keys, live workers, whether Redis may evict jobs."""
    overview: Overview
    rates: dict[str, QueueRates]
    breakers: list[BreakerState]
    semaphores: list[SemaphoreState]
    rate_limiters: list[RateLimiterState]
    conflicts_5m: int
    conflicts_1h: int
    conflicts_total: int
    contention: list[LockContention]
    live_workers: int
    oldest_ready_ms: int
    as_of: int
    memory: MemoryPolicy | None = None  # Redis's eviction policy (None: not read)


def _int(v: Any) -> int:
    try:
        return int(float(v or 0))
    except (TypeError, ValueError):
        return 0


class ReadModels:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock

    def queue_names(self) -> list[str]:
        return sorted(cast(set[str], self.redis.smembers(keys.queues_index())))

    def queue_info(self, name: str) -> QueueInfo:
        """The queue's counts, its partitions' summed: the oldest ready job of
        any, the pauses as partition 0 holds them (a pause is written to every partition)."""
        n = partitions.published(self.redis, name)
        infos = [self._partition_info(keys.QueueKeys(name, p)) for p in range(n)]
        if n == 1:
            return infos[0]
        first = infos[0]
        stats: dict[str, int] = {}
        for info in infos:
            for stat, v in info.stats.items():
                stats[stat] = stats.get(stat, 0) + v
        def total(attr: str) -> int:
            return sum(getattr(i, attr) for i in infos)
        return QueueInfo(name, total("ready"), total("scheduled"), total("inflight"),
                         total("dead"), total("done"),
                         max(i.oldest_ready_age_ms for i in infos), stats, first.as_of,
                         first.paused, total("parked"), total("waiting"), total("keys_held"),
                         total("held"), partitions=n)

    def _partition_info(self, k: keys.QueueKeys) -> QueueInfo:
        name = k.queue
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(k.ready)
        pipe.zcard(k.scheduled)
        pipe.zcard(k.inflight)
        pipe.zcard(k.dead)
        pipe.zcard(k.done)
        pipe.lrange(k.ready, -16, -1)  # the oldest end (a few: purge marks may sit there)
        pipe.hgetall(k.stats)
        pipe.hgetall(k.paused)
        pipe.smembers(k.parked_types)
        pipe.get(k.tombstones)
        pipe.zcard(k.waiting)
        pipe.hlen(k.turns)
        pipe.zcard(k.held)
        (ready, scheduled, inflight, dead, done, tail, stats, paused, parked_types, marks,
         waiting, keys_held, held) = keys.sound(pipe.execute(raise_on_error=False), (
             0, 0, 0, 0, 0, [], {}, {}, set(), None, 0, 0, 0))
        oldest = next((i for i in reversed(tail) if not i.startswith("{")), None)
        now = self.clock()
        age = 0
        if oldest:
            # (a job visible at once stores no visible_at: its created_at)
            since = _int(next(filter(None, self.redis.hmget(k.job(oldest), "visible_at",
                                                              "created_at")), None))
            age = max(0, now - since) if since else 0
        parked = self._parked_count(k, parked_types)
        # purged ids are marked in the lists until a reserve pops them (antre/engine/lua/purge.lua)
        ready = max(0, ready + parked - _int(marks))
        return QueueInfo(name, ready, scheduled, inflight, dead, done, age,
                         {s: _int(v) for s, v in stats.items()}, now,
                         tuple(pause_infos(name, paused)), parked, waiting, keys_held, held)

    def parked_count(self, queue: str, job_types: set[str]) -> int:
        """Jobs held in the parked lists of ``job_types`` (one LLEN each, pipelined), in
        every partition."""
        return sum(self._parked_count(k, job_types)
                   for k in partitions.all_keys(self.redis, queue))

    def _parked_count(self, k: keys.QueueKeys, job_types: set[str]) -> int:
        if not job_types:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for t in sorted(job_types):
            pipe.llen(k.parked(t))
        return sum(int(n) for n in pipe.execute())

    def overview(self) -> Overview:
        return Overview([self.queue_info(n) for n in self.queue_names()], self.clock())

    # -- pages -------------------------------------------------------------------------------
    def _rows(self, queue: str, ids: list[str]) -> list[JobRow]:
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(keys.of_job(queue, job_id).job(job_id), ROW_FIELDS)
        now = self.clock()
        rows = []
        for job_id, values in zip(ids, pipe.execute()):
            f = dict(zip(ROW_FIELDS, values))
            deadline = _int(f["deadline"])
            rows.append(JobRow(
                id=job_id, type=f["type"] or "", attempt=_int(f["attempt"]),
                max_attempts=_int(f["max_attempts"]), deliveries=_int(f["deliveries"]),
                worker_id=f["worker_id"] or "", epoch=_int(f["epoch"]), deadline=deadline,
                time_left_ms=deadline - now if deadline else 0,
                reserved_at=_int(f["reserved_at"]),
                visible_at=_int(f["visible_at"]) or _int(f["created_at"]),
                lock_key=f["lock_key"] or "", last_error=f["last_error"] or "",
                error_kind=f["error_kind"] or "", reason=f["reason"] or "",
                group=f["group"] or "", finished_at=_int(f["finished_at"]),
                created_at=_int(f["created_at"]), idempotency_key=f["idem_key"] or "",
                first_failed_at=_int(f["first_failed_at"]), extended_at=_int(f["extended_at"]),
                checkpoint_at=_int(f["checkpoint_at"]), progress=decode_progress(f["progress"]),
                **_cancel_of(f["cancel"])))
        return rows

    def _zpage(self, queue: str, index: "Callable[[keys.QueueKeys], str]", offset: int,
               limit: int, *, reverse: bool, low: Any = "-inf", high: Any = "+inf") -> Page:
        """A page of the sorted set ``index(k)`` of the queue's partitions, merged by score
        (each partition's first ``offset + limit`` read: a page deep in a list reads more)."""
        every = partitions.all_keys(self.redis, queue)
        whole = (low, high) == ("-inf", "+inf")
        if len(every) == 1:
            zkey = index(every[0])
            try:
                if reverse:
                    ids = cast(list[str], self.redis.zrevrangebyscore(zkey, high, low,
                                                                      start=offset, num=limit))
                else:
                    ids = cast(list[str], self.redis.zrangebyscore(zkey, low, high,
                                                                   start=offset, num=limit))
                total = self.redis.zcard(zkey) if whole else self.redis.zcount(zkey, low, high)
            except redis.ResponseError as exc:  # a damaged index: an empty page
                if "WRONGTYPE" not in str(exc):
                    raise
                ids, total = [], 0
            return Page(self._rows(queue, ids), int(total), offset, limit, self.clock())
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            zkey = index(k)
            if reverse:
                pipe.zrevrangebyscore(zkey, high, low, start=0, num=offset + limit,
                                      withscores=True)
            else:
                pipe.zrangebyscore(zkey, low, high, start=0, num=offset + limit,
                                   withscores=True)
            if whole:
                pipe.zcard(zkey)
            else:
                pipe.zcount(zkey, low, high)
        replies = keys.sound(pipe.execute(raise_on_error=False), ([], 0))
        pairs = [pair for reply in replies[0::2] for pair in reply]
        pairs.sort(key=lambda p: (p[1], p[0]), reverse=reverse)
        ids = [m for m, _ in pairs[offset:offset + limit]]
        return Page(self._rows(queue, ids), sum(int(n) for n in replies[1::2]), offset, limit,
                    self.clock())

    def inflight(self, queue: str, offset: int = 0, limit: int = 50) -> Page:
        """Soonest deadline first: the jobs about to expire are at the top."""
        return self._zpage(queue, lambda k: k.inflight, offset, limit, reverse=False)

    def scheduled(self, queue: str, offset: int = 0, limit: int = 50) -> Page:
        return self._zpage(queue, lambda k: k.scheduled, offset, limit, reverse=False)

    def waiting(self, queue: str, offset: int = 0, limit: int = 50) -> Page:
        """Jobs waiting behind their lock_key's head, the longest waiting first."""
        return self._zpage(queue, lambda k: k.waiting, offset, limit, reverse=False)

    def _gate_turn(self, k: keys.QueueKeys, job: Job) -> "Turn":
        if job.state != states.WAITING:  # scheduled for the start the gate's rate gave it
            return Turn(job.lock_key, "", 0, 0, gate=job.gate)
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(k.gate_line(job.gate))
        pipe.lpos(k.gate_line(job.gate), job.id)
        pipe.scard(k.gate_held(job.gate))
        length, index, held = keys.sound(pipe.execute(raise_on_error=False), (0, None, 0))
        place = int(length) - int(index) if index is not None else 1
        return Turn(job.lock_key, "", place, int(length), slots_held=int(held), gate=job.gate)

    def turn(self, queue: str, job: Job) -> "Turn | None":
        """Where a job with a lock_key stands on its key (None: no lock_key, or the key has no
        head). Its place is counted from the line's oldest end (LPOS: one pass of the line)."""
        k = keys.of_job(queue, job.id)
        if job.gate:  # waiting for a slot of its type's or downstream's limit, or its rate
            return self._gate_turn(k, job)
        if job.waits_for_rate and job.group:  # scheduled for its group's rate (no read)
            return Turn(job.lock_key, "", 0, 0, job.group, 0, job.group_rate)
        if job.state == states.WAITING and job.waits_on == "group" and job.group:
            pipe = self.redis.pipeline(transaction=False)
            pipe.llen(k.group_line(job.group))
            pipe.lpos(k.group_line(job.group), job.id)
            pipe.scard(k.group_held(job.group))
            pipe.zrevrange(k.group_rate(job.group), 0, 0, withscores=True)
            length, index, held, newest = keys.sound(pipe.execute(raise_on_error=False),
                                                     (0, None, 0, []))
            place = int(length) - int(index) if index is not None else 0
            # its group at its rate: a start ahead (rate_start in lua/_groups.lua)
            rate = (job.group_rate if job.group_rate and newest
                    and int(newest[0][1]) > self.clock() else "")
            return Turn(job.lock_key, "", place, int(length), job.group, int(held), rate)
        if not job.lock_key:
            return None
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(k.turns, job.lock_key)
        pipe.llen(k.line(job.lock_key))
        pipe.lpos(k.line(job.lock_key), job.id)
        head, length, index = keys.sound(pipe.execute(raise_on_error=False), (None, 0, None))
        if not head:
            return None
        place = int(length) - int(index) if index is not None and head != job.id else 0
        return Turn(job.lock_key, str(head), place, int(length))

    def done(self, queue: str, offset: int = 0, limit: int = 50) -> Page:
        return self._zpage(queue, lambda k: k.done, offset, limit, reverse=True)

    def ready(self, queue: str, offset: int = 0, limit: int = 50) -> Page:
        """Oldest first (the next to be reserved); a partitioned queue's partitions merged by
        the time each job became ready."""
        every = partitions.all_keys(self.redis, queue)
        if len(every) == 1:
            k = every[0]
            ids = (cast(list[str], self.redis.lrange(k.ready, -(offset + limit),
                                                     -(offset + 1))) if limit else [])
            ids = [i for i in reversed(ids) if not i.startswith("{")]  # marks of purged ids
            return Page(self._rows(queue, ids), int(self.redis.llen(k.ready)), offset, limit,
                        self.clock())
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            pipe.lrange(k.ready, -(offset + limit), -1) if limit else pipe.lrange(k.ready, 0, -1)
            pipe.llen(k.ready)
        replies = pipe.execute()
        ids = [i for reply in replies[0::2] for i in reply if not i.startswith("{")]
        rows = sorted(self._rows(queue, ids), key=lambda r: (r.visible_at, r.id))
        return Page(rows[offset:offset + limit], sum(int(n) for n in replies[1::2]), offset,
                    limit, self.clock())

    def dead_index(self, queue: str, flt: DeadFilter) -> str:
        """Partition 0's index of ``flt`` (``_dead_index`` names any partition's)."""
        return self._dead_index(keys.QueueKeys(queue), flt)

    @staticmethod
    def _dead_index(k: keys.QueueKeys, flt: DeadFilter) -> str:
        if flt.group:
            return k.dead_by_group(flt.group)
        if flt.job_type:
            return k.dead_by_type(flt.job_type)
        return k.dead

    def dead(self, queue: str, flt: DeadFilter = DeadFilter(), offset: int = 0,
             limit: int = 50) -> Page:
        """Newest first. Filters use the per-type and per-group indexes; with both a type and
        a group, the group index is paged and rows of other types are dropped from the page."""
        low = flt.since_ms if flt.since_ms is not None else "-inf"
        high = flt.until_ms if flt.until_ms is not None else "+inf"
        page = self._zpage(queue, lambda k: self._dead_index(k, flt), offset, limit,
                           reverse=True, low=low, high=high)
        if flt.group and flt.job_type:
            rows = [r for r in page.rows if r.type == flt.job_type]
            return Page(rows, page.total, offset, limit, page.as_of)
        return page

    def dead_ids(self, queue: str, flt: DeadFilter, limit: int, after_score: int | None = None
                 ) -> list[tuple[str, int]]:
        """Oldest first, for bulk operations that walk a filtered set in batches."""
        low: Any = flt.since_ms if flt.since_ms is not None else "-inf"
        if after_score is not None:
            low = after_score
        high = flt.until_ms if flt.until_ms is not None else "+inf"
        pipe = self.redis.pipeline(transaction=False)
        for k in partitions.all_keys(self.redis, queue):  # merged by score, then id
            pipe.zrangebyscore(self._dead_index(k, flt), low, high, start=0, num=limit,
                               withscores=True)
        pairs = sorted(((m, int(s)) for reply in pipe.execute() for m, s in reply),
                       key=lambda p: (p[1], p[0]))
        return pairs[:limit]

    def count_dead(self, queue: str, flt: DeadFilter = DeadFilter()) -> int:
        low = flt.since_ms if flt.since_ms is not None else "-inf"
        high = flt.until_ms if flt.until_ms is not None else "+inf"
        return sum(int(self.redis.zcount(self._dead_index(k, flt), low, high))
                   for k in partitions.all_keys(self.redis, queue))

    def dead_types(self, queue: str) -> list[str]:
        found: set[str] = set()
        for k in partitions.all_keys(self.redis, queue):
            found |= cast(set[str], self.redis.smembers(k.types))
        return sorted(found)

    def error_groups(self, queue: str) -> list[ErrorGroup]:
        """The queue's error groups, each partition's of the same group merged (an error
        group id is its signature's digest, the same in every partition)."""
        merged: dict[str, ErrorGroup] = {}
        for k in partitions.all_keys(self.redis, queue):
            for e in self._error_groups(k):
                was = merged.get(e.group)
                merged[e.group] = e if was is None else dataclasses.replace(
                    was, count=was.count + e.count, total=was.total + e.total,
                    first_seen=min(was.first_seen, e.first_seen) or was.first_seen,
                    last_seen=max(was.last_seen, e.last_seen))
        out = list(merged.values())
        out.sort(key=lambda e: (-e.count, -e.last_seen))
        return out

    def _error_groups(self, k: keys.QueueKeys) -> list[ErrorGroup]:
        raw = cast(dict[str, str], self.redis.hgetall(k.error_groups))
        pipe = self.redis.pipeline(transaction=False)
        names = sorted(raw)
        for g in names:
            pipe.zcard(k.dead_by_group(g))
        out = []
        for g, count in zip(names, pipe.execute()):
            try:
                rec = json.loads(raw[g])
            except ValueError:
                continue
            out.append(ErrorGroup(g, rec.get("signature", ""), rec.get("job_type", ""),
                                  int(count), _int(rec.get("total")), _int(rec.get("first")),
                                  _int(rec.get("last"))))
        return out

    def group_signature(self, queue: str, group: str | None) -> str:
        """The error signature of ``group`` ('' none, or unknown)."""
        if not group:
            return ""
        raw = next((found for k in partitions.all_keys(self.redis, queue)
                    if (found := self.redis.hget(k.error_groups, group))), None)
        try:
            return str(json.loads(str(raw)).get("signature", "")) if raw else ""
        except (ValueError, AttributeError):
            return ""

    def rows(self, queue: str, ids: list[str]) -> list[JobRow]:
        """Table rows of the given jobs (one pipelined HMGET each)."""
        return self._rows(queue, ids)

    def job(self, queue: str, job_id: str) -> Job | None:
        k = keys.of_job(queue, job_id)  # (the job's partition's keys)
        fields = cast(dict[str, str], self.redis.hgetall(k.job(job_id)))
        if not fields:
            return None
        # a dead job's traceback: its error group keeps the head
        return tracebacks.resolve_job(self.redis, k.error_tracebacks,
                                      from_fields(fields, queue, job_id),
                                      fields.get("errors"))

    def find_job(self, job_id: str) -> Job | None:
        """Look a job id up in every known queue (a few HGETALLs, no scan)."""
        for name in self.queue_names():
            job = self.job(name, job_id)
            if job:
                return job
        return None
