"""Bulk operations on the dead-letter queue as tracked, paced tasks (state in Redis).

The dashboard, the API and the CLI create tasks; the worker pool's scheduler calls
``BulkReplays.step_all()`` every second, which replays at most ``rate`` jobs per second of
each running task until its ``maximum`` or the end of its filter.

A task is one JSON value in the queue's ``replays`` HASH (task id -> JSON). It walks the
filtered dead-letter index oldest first with a cursor (score and id of the last job it looked
at), so a step costs a few indexed reads plus one ``replay`` script per job, never a scan. The
walk stops at the moment the task was started (``until_ms``): a replayed job that fails again
and lands in the DLQ after that is not replayed a second time by the same task.

A replay task watches what it replayed (``antre.control.redrive``): it pauses itself, saying
why (``paused_reason``), once too many of them fail again, and may replay into another queue
(``target``).

Updates of a task are compare-and-set (WATCH/MULTI): a step that ran while an operator paused
or cancelled the task keeps the operator's state and only adds its progress.

A task of kind ``purge`` (``start_purge``) walks a ``PurgeFilter``'s source (ready, scheduled
or dead) the same way, removing at most ``rate`` matching jobs per second through
``antre.control.purge.Purger`` (every Redis call one bounded chunk). Tasks are ``BulkTask`` values.
"""

from __future__ import annotations

import builtins
import itertools
import json
import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import redis

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.control import redrive
from antre.control.purge import CHUNK, COUNT_CHUNKS, PurgeError, PurgeFilter, Purger, Tally
from antre.engine.queue import Queue
from antre.observe.readmodels import DeadFilter, ReadModels
from antre.engine.scripts import Scripts

STATES = ("running", "paused", "cancelled", "done")
FINAL = ("cancelled", "done")
BURST_S = 2.0  # a step after a long pause replays at most this many seconds' worth of jobs
MAX_RATE_PER_S = 1000.0
MAX_PURGE_RATE_PER_S = 10_000.0
PURGE_LOOK_PER_STEP = 20 * CHUNK  # jobs a purge step looks at, at most, matching or not


class TaskNotFound(KeyError):
    pass


class TaskStateError(ValueError):
    pass


@dataclass
class BulkTask:
    """A paced bulk operation over a filtered set: a DLQ replay (``kind='replay'``, ``filter``
    a ``DeadFilter`` as a dict) or a purge (``kind='purge'``, a ``PurgeFilter`` as a dict).
    ``replayed`` counts the jobs acted on (replayed or removed)."""

    id: str
    queue: str
    filter: dict[str, Any]
    until_ms: int
    rate_per_s: float
    maximum: int
    total: int
    replayed: int
    skipped: int
    state: str
    created_at: int
    updated_at: int
    finished_at: int
    last_step_at: int
    credit: float
    cursor: Any
    user: str
    reason: str
    description: str
    kind: str = "replay"
    # the redrive guard (antre/control/redrive.py): pause once more than stop_pct % of at least
    # min_sample jobs replayed since ``base_replayed`` failed again (0: never); replay into
    # ``target`` ('' the task's own queue); failed/died/same: what the replayed jobs did
    stop_pct: float = redrive.DEFAULT_STOP_PCT
    min_sample: int = redrive.DEFAULT_MIN_SAMPLE
    target: str = ""
    paused_reason: str = ""
    base_replayed: int = 0
    base_failed: int = 0
    failed: int = 0
    died: int = 0
    same: int = 0

    @property
    def done(self) -> int:
        return self.replayed

    @property
    def goal(self) -> int:
        return min(self.total, self.maximum)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BulkTask":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class BulkResult:
    """What an unpaced filtered replay or discard did, with the DLQ's size before and after."""

    done: int
    skipped: int
    dead_before: int
    dead_after: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def filter_to_dict(flt: DeadFilter) -> dict[str, Any]:
    return asdict(flt)


def filter_from_dict(data: dict[str, Any]) -> DeadFilter:
    return DeadFilter(job_type=data.get("job_type") or None, group=data.get("group") or None,
                      since_ms=data.get("since_ms"), until_ms=data.get("until_ms"))


class BulkReplays:
    def __init__(self, client: redis.Redis, clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock
        self.reads = ReadModels(client, clock)
        self._scripts: Scripts | None = None
        self._queues: dict[tuple[str, int], Queue] = {}
        self._purger: Purger | None = None

    @property
    def purger(self) -> Purger:
        if self._purger is None:
            if self._scripts is None:
                self._scripts = Scripts(self.redis)
            self._purger = Purger(self.redis, self.clock, self._scripts)
        return self._purger

    def _queue(self, name: str, job_id: str = "") -> Queue:
        """The partition of queue ``name`` holding ``job_id`` (named by its id)."""
        p = keys.id_partition(job_id) if job_id else 0
        if (name, p) not in self._queues:
            if self._scripts is None:
                self._scripts = Scripts(self.redis)
            self._queues[(name, p)] = Queue(self.redis, name, clock=self.clock,
                                            scripts=self._scripts, partition=p)
        return self._queues[(name, p)]

    # -- walking a filtered set ------------------------------------------------------------
    def _type_ok(self, queue: str, flt: DeadFilter, job_id: str) -> bool:
        """With both a group and a type the group index is walked: drop other types."""
        if not (flt.group and flt.job_type):
            return True
        return self.redis.hget(keys.of_job(queue, job_id).job(job_id), "type") == flt.job_type

    def _walk(self, queue: str, flt: DeadFilter, cursor: tuple[int, str] | None,
              batch: int = 200) -> Iterator[tuple[str, int]]:
        """Dead jobs matching ``flt`` after ``cursor``, oldest first (``_walk_index``, with
        the job type checked when the group index is walked)."""
        for job_id, score in self._walk_index(queue, flt, cursor, batch):
            if self._type_ok(queue, flt, job_id):
                yield job_id, score

    def _walk_index(self, queue: str, flt: DeadFilter, cursor: tuple[int, str] | None,
                    batch: int = 200) -> Iterator[tuple[str, int]]:
        """The ids of ``flt``'s index after ``cursor``, oldest first, fetched in batches.

        Re-reads the index after each batch, so jobs replayed/discarded meanwhile are gone and
        jobs skipped (still in the index at the cursor's score) are stepped over by id."""
        while True:
            limit = batch
            while True:
                pairs = self.reads.dead_ids(queue, flt, limit,
                                            after_score=cursor[0] if cursor else None)
                fresh = [(i, s) for i, s in pairs
                         if cursor is None or s > cursor[0] or (s == cursor[0] and i > cursor[1])]
                if fresh or len(pairs) < limit:
                    break
                limit *= 2  # many skipped jobs share the cursor's score: look further
            if not fresh:
                return
            for job_id, score in fresh:
                cursor = (score, job_id)
                yield job_id, score
            if len(pairs) < limit:
                return

    def dry_run_tally(self, queue: str, flt: DeadFilter, start: Tally | None = None,
                      max_looked: int = COUNT_CHUNKS * CHUNK) -> Tally:
        """How many dead jobs the filter matches, within a budget: exact at once (one ZCOUNT)
        unless both a group and a type are given; then at most ``max_looked`` jobs of the
        group are looked at per call (their types read in pipelined batches), going on from
        ``start``, and the tally says "at least" with a cursor until the group is walked."""
        if not (flt.group and flt.job_type):
            return Tally(self.reads.count_dead(queue, flt), 0, None)
        matched, looked = (start.matched, start.looked) if start else (0, 0)
        at = start.cursor if start else None
        try:
            cursor = (int(at["score"]), str(at["id"])) if at else None
        except (KeyError, TypeError, ValueError) as exc:
            raise PurgeError("bad count cursor: count again from the start (without "
                             "count_cursor)") from exc
        walked = self._walk_index(queue, flt, cursor, batch=min(1000, max_looked))
        remaining, last, done = max_looked, None, False
        while remaining > 0 and not done:
            want = min(200, remaining)
            batch = list(itertools.islice(walked, want))
            matched += self._of_type(queue, flt.job_type, [i for i, _ in batch])
            looked, remaining = looked + len(batch), remaining - len(batch)
            last = batch[-1] if batch else last
            done = len(batch) < want
        if not done and next(walked, None) is None:
            done = True  # the budget ended with the group
        if done or last is None:
            return Tally(matched, looked, None)
        return Tally(matched, looked, {"score": int(last[1]), "id": last[0]})

    def _of_type(self, queue: str, job_type: str, ids: list[str]) -> int:
        """How many of ``ids`` are of ``job_type`` (one pipelined HGET each)."""
        if not ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(keys.of_job(queue, job_id).job(job_id), "type")
        return sum(1 for t in pipe.execute() if t == job_type)

    def dry_run(self, queue: str, flt: DeadFilter) -> int:
        """How many dead jobs the filter matches now."""
        if flt.group and flt.job_type:
            return sum(1 for _ in self._walk(queue, flt, None, batch=1000))
        return self.reads.count_dead(queue, flt)

    def _apply(self, queue: str, flt: DeadFilter, maximum: int,
               op: Callable[[str], bool]) -> BulkResult:
        before = self.reads.count_dead(queue)
        done = skipped = 0
        if maximum > 0:
            for job_id, _ in self._walk(queue, flt, None):
                if op(job_id):
                    done += 1
                else:
                    skipped += 1
                if done >= maximum:
                    break
        return BulkResult(done, skipped, before, self.reads.count_dead(queue))

    def named(self, queue: str, flt: DeadFilter) -> str:
        """``flt`` as a reader names it: its error group by the group's error, not its hash."""
        return flt.describe(self.reads.group_signature(queue, flt.group))

    def replay_filtered_now(self, queue: str, flt: DeadFilter, maximum: int,
                            actor: str = "") -> BulkResult:
        """Replay up to ``maximum`` matching dead jobs at once (CLI/API; no pacing).
        ``actor``: who, on each job's timeline."""
        note = {"bulk": f"replay now [{self.named(queue, flt)}]"}
        return self._apply(queue, flt, maximum,
                           lambda job_id: self._queue(queue, job_id).replay(job_id, actor, note))

    def discard_filtered(self, queue: str, flt: DeadFilter, maximum: int,
                         actor: str = "") -> BulkResult:
        """Discard up to ``maximum`` matching dead jobs."""
        note = {"bulk": f"discard [{self.named(queue, flt)}]"}
        return self._apply(queue, flt, maximum,
                           lambda job_id: self._queue(queue, job_id).discard(job_id, actor,
                                                                             note))

    # -- tasks -----------------------------------------------------------------------------
    def start(self, queue: str, flt: DeadFilter, rate_per_s: float, maximum: int, user: str,
              reason: str = "", *, stop_pct: float = redrive.DEFAULT_STOP_PCT,
              min_sample: int = redrive.DEFAULT_MIN_SAMPLE, target: str = "") -> BulkTask:
        """A paced replay of the filtered dead-letter set, into ``target`` ('' the same
        queue; one that does not exist is a ``ValueError`` naming those that do), pausing
        itself when more than ``stop_pct`` % of at least ``min_sample`` replayed jobs fail
        again (``redrive``)."""
        _check_task(queue, rate_per_s, maximum, MAX_RATE_PER_S)
        redrive.check_guard(stop_pct, min_sample)
        target = redrive.check_target(self.reads.queue_names(), queue, target)
        now = self.clock()
        until = now if flt.until_ms is None else min(int(flt.until_ms), now)
        described = self.named(queue, flt)
        task = self._new(queue, filter_to_dict(flt), until, rate_per_s, maximum, user, reason,
                         described + (f" → queue {target}" if target else ""), "replay",
                         self.dry_run(queue, flt))
        task.stop_pct, task.min_sample, task.target = float(stop_pct), int(min_sample), target
        return self._save(task)

    def start_purge(self, queue: str, flt: PurgeFilter, rate_per_s: float, maximum: int,
                    user: str, reason: str = "") -> BulkTask:
        """A paced purge of the filtered set (``flt.source``: ready, scheduled or dead)."""
        _check_task(queue, rate_per_s, maximum, MAX_PURGE_RATE_PER_S)
        total = self.purger.count(queue, flt.check())
        task = self._new(queue, flt.to_dict(), self.clock(), rate_per_s, maximum, user, reason,
                         "purge " + flt.describe(), "purge", total)
        return self._save(task)

    def _new(self, queue: str, flt: dict[str, Any], until_ms: int, rate_per_s: float,
             maximum: int, user: str, reason: str, description: str, kind: str,
             total: int) -> BulkTask:
        now = self.clock()
        return BulkTask(
            id=uuid.uuid4().hex[:16], queue=queue, filter=flt, until_ms=until_ms,
            rate_per_s=float(rate_per_s), maximum=int(maximum), total=total, replayed=0,
            skipped=0, state="running", created_at=now, updated_at=now, finished_at=0,
            last_step_at=now, credit=0.0, cursor=None, user=user, reason=reason,
            description=description, kind=kind)

    def _save(self, task: BulkTask) -> BulkTask:
        self.redis.hset(keys.QueueKeys(task.queue).replays, task.id, json.dumps(task.to_dict()))
        return task

    def get(self, queue: str, task_id: str) -> BulkTask | None:
        raw = self.redis.hget(keys.QueueKeys(queue).replays, task_id)
        return BulkTask.from_dict(json.loads(raw)) if raw else None

    def list(self, queue: str | None = None, kind: str | None = None) -> list[BulkTask]:
        """Tasks of ``queue`` (or of every known queue), newest first; ``kind`` narrows."""
        names = [queue] if queue else self.reads.queue_names()
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hvals(keys.QueueKeys(name).replays)
        tasks = [BulkTask.from_dict(json.loads(v)) for values in pipe.execute() for v in values]
        tasks.sort(key=lambda t: (-t.created_at, t.id))
        return self._watched([t for t in tasks if kind in (None, t.kind)])

    def _watched(self, tasks: "builtins.list[BulkTask]") -> "builtins.list[BulkTask]":
        """The replays among ``tasks`` with what their replayed jobs did so far (one
        pipelined HMGET each)."""
        replays = [t for t in tasks if t.kind == "replay"]
        if not replays:
            return tasks
        pipe = self.redis.pipeline(transaction=False)
        watched = [(t, redrive.watch_keys(self.redis, t.queue, t.target)) for t in replays]
        for t, wkeys in watched:
            for key in wkeys:  # the replayed jobs count in the partition each is in
                pipe.hmget(key, redrive.watch_fields(t.id))
        replies = iter(pipe.execute())
        for t, wkeys in watched:
            w = redrive.merged([redrive.watch_of(next(replies)) for _ in wkeys])
            t.failed, t.died, t.same = min(w.failed, t.replayed), w.died, w.same
        return tasks

    def watch(self, task: BulkTask) -> redrive.Watch:
        return redrive.read_watch(self.redis, task.queue, task.target, task.id)

    def _update(self, queue: str, task_id: str,
                change: Callable[[BulkTask], BulkTask | None]) -> BulkTask:
        """Compare-and-set one task: ``change`` gets the current value and returns the new
        one (or None to leave it)."""
        key = keys.QueueKeys(queue).replays
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]  # unannotated in redis-py
                    raw = pipe.hget(key, task_id)
                    if not raw:
                        raise TaskNotFound(task_id)
                    current = BulkTask.from_dict(json.loads(raw))
                    new = change(replace(current))
                    if new is None:
                        pipe.unwatch()
                        return current
                    new.updated_at = self.clock()
                    pipe.multi()
                    pipe.hset(key, task_id, json.dumps(new.to_dict()))
                    pipe.execute()
                    return new
                except redis.WatchError:
                    continue

    def _set_state(self, queue: str, task_id: str, allowed_from: tuple[str, ...],
                   state: str) -> BulkTask:
        current = self.get(queue, task_id)
        failed = self.watch(current).failed if current and current.kind == "replay" else 0

        def change(task: BulkTask) -> BulkTask:
            if task.state not in allowed_from:
                raise TaskStateError(f"task {task_id} is {task.state}; cannot set it {state}")
            task.state = state
            task.paused_reason = ""
            if state == "running":  # no burst for the time spent paused
                task.last_step_at = self.clock()
                task.credit = 0.0
                # the guard judges the jobs replayed from now on
                task.base_replayed, task.base_failed = task.replayed, failed
            if state in FINAL:
                task.finished_at = self.clock()
            return task
        return self._update(queue, task_id, change)

    def pause(self, queue: str, task_id: str) -> BulkTask:
        return self._set_state(queue, task_id, ("running",), "paused")

    def resume(self, queue: str, task_id: str) -> BulkTask:
        return self._set_state(queue, task_id, ("paused",), "running")

    def cancel(self, queue: str, task_id: str) -> BulkTask:
        return self._set_state(queue, task_id, ("running", "paused"), "cancelled")

    # -- stepping --------------------------------------------------------------------------
    def step_all(self) -> int:
        """Advance every running task; returns jobs replayed or purged in this step."""
        total = 0
        for task in self.list():
            if task.state == "running":
                total += self.step(task.queue, task.id)
        return total

    def step(self, queue: str, task_id: str) -> int:
        """Act on what the task's rate allows since its last step; returns jobs acted on."""
        task = self.get(queue, task_id)
        if task is None or task.state != "running":
            return 0
        if task.kind == "replay" and self._stopped(task):
            return 0
        now = self.clock()
        rate = task.rate_per_s
        elapsed_s = max(0, now - task.last_step_at) / 1000.0
        credit = min(task.credit + rate * elapsed_s, max(rate * BURST_S, 1.0))
        budget = min(int(credit), task.maximum - task.replayed)
        run = self._purge_budget if task.kind == "purge" else self._replay_budget
        done, skipped, cursor, finished = run(task, budget)

        def change(cur: BulkTask) -> BulkTask:
            cur.replayed += done
            cur.skipped += skipped
            cur.cursor = cursor
            cur.last_step_at = now
            cur.credit = credit - done - (skipped if task.kind == "replay" else 0)
            if cur.state == "running" and (finished or cur.replayed >= cur.maximum):
                cur.state = "done"
                cur.finished_at = now
            return cur
        self._update(queue, task_id, change)
        return done

    def _stopped(self, task: BulkTask) -> bool:
        """Pause ``task`` when its redrive guard says so (``redrive.verdict``); whether it
        did."""
        w = self.watch(task)
        flt = filter_from_dict(task.filter)
        signature = ""
        if w.same:
            signature = self.reads.group_signature(task.target or task.queue,
                                                   w.last or flt.group) or w.last
        why = redrive.verdict(task.replayed - task.base_replayed,
                              min(w.failed, task.replayed) - task.base_failed,
                              task.stop_pct, task.min_sample, w.same, signature)
        if not why:
            return False

        def change(cur: BulkTask) -> BulkTask:
            if cur.state == "running":
                cur.state, cur.paused_reason = "paused", why
                cur.failed, cur.died, cur.same = w.failed, w.died, w.same
            return cur
        self._update(task.queue, task.id, change)
        return True

    def _replay_one(self, task: BulkTask, job_id: str, note: dict[str, Any]) -> bool:
        if task.target:  # into the target's partition the id names (which must exist there)
            if keys.id_partition(job_id) >= partitions.published(self.redis, task.target):
                return False
            return redrive.move_dead(self._queue(task.queue, job_id),
                                     self._queue(task.target, job_id), job_id, task.id,
                                     task.user, note)
        return self._queue(task.queue, job_id).replay(job_id, task.user, note, task.id)

    def _replay_budget(self, task: BulkTask, budget: int) -> tuple[int, int, Any, bool]:
        flt = filter_from_dict(task.filter)
        flt = DeadFilter(flt.job_type, flt.group, flt.since_ms, task.until_ms)
        cursor = tuple(task.cursor) if task.cursor else None
        replayed = skipped = 0
        if budget <= 0:
            return 0, 0, task.cursor, False
        walk = self._walk(task.queue, flt, cursor)
        note = {"bulk_task": task.id, "reason": task.reason}
        while replayed + skipped < budget:
            nxt = next(walk, None)
            if nxt is None:
                return replayed, skipped, list(cursor) if cursor else None, True
            cursor = (nxt[1], nxt[0])
            if self._replay_one(task, nxt[0], note):
                replayed += 1
            else:
                skipped += 1
        return replayed, skipped, list(cursor) if cursor else None, False

    def _purge_budget(self, task: BulkTask, budget: int) -> tuple[int, int, Any, bool]:
        """Remove up to ``budget`` matching jobs, looking at no more than
        ``PURGE_LOOK_PER_STEP`` jobs in this step (chunks of at most ``CHUNK``)."""
        flt = PurgeFilter.from_dict(task.filter)
        cursor, removed, looked = task.cursor, 0, 0
        while removed < budget and looked < PURGE_LOOK_PER_STEP:
            chunk = self.purger.step(task.queue, flt, cursor, min(CHUNK, budget - removed),
                                     dry=False)
            removed += chunk.matched
            looked += chunk.looked
            if chunk.cursor is None:
                return removed, 0, None, True
            cursor = chunk.cursor
        return removed, 0, cursor, False


def _check_task(queue: str, rate_per_s: float, maximum: int, max_rate: float) -> None:
    if not keys.valid_name(queue):
        raise ValueError(f"bad queue name {queue!r}")
    if not (0 < float(rate_per_s) <= max_rate) or math.isnan(float(rate_per_s)):
        raise ValueError(f"rate must be between 0 and {max_rate:g} jobs/s")
    if int(maximum) < 1:
        raise ValueError("maximum must be at least 1")
