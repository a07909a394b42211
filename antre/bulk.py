"""Bulk operations on the dead-letter queue as tracked, paced tasks (state in Redis).

The dashboard, the API and the CLI create tasks; the worker pool's scheduler calls
``BulkReplays.step_all()`` every second, which replays at most ``rate`` jobs per second of
each running task until its ``maximum`` or the end of its filter.

A task is one JSON value in the queue's ``replays`` HASH (task id -> JSON). It walks the
filtered dead-letter index oldest first with a cursor (score and id of the last job it looked
at), so a step costs a few indexed reads plus one ``replay`` script per job, never a scan. The
walk stops at the moment the task was started (``until_ms``): a replayed job that fails again
and lands in the DLQ after that is not replayed a second time by the same task.

Updates of a task are compare-and-set (WATCH/MULTI): a step that ran while an operator paused
or cancelled the task keeps the operator's state and only adds its progress.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import redis

from . import keys
from .clock import Clock, system_ms
from .queue import Queue
from .readmodels import DeadFilter, ReadModels
from .scripts import Scripts

STATES = ("running", "paused", "cancelled", "done")
FINAL = ("cancelled", "done")
BURST_S = 2.0  # a step after a long pause replays at most this many seconds' worth of jobs
MAX_RATE_PER_S = 1000.0


class TaskNotFound(KeyError):
    pass


class TaskStateError(ValueError):
    pass


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
        self._queues: dict[str, Queue] = {}

    def _queue(self, name: str) -> Queue:
        if name not in self._queues:
            if self._scripts is None:
                self._scripts = Scripts(self.redis)
            self._queues[name] = Queue(self.redis, name, clock=self.clock, scripts=self._scripts)
        return self._queues[name]

    # -- walking a filtered set ------------------------------------------------------------
    def _type_ok(self, queue: str, flt: DeadFilter, job_id: str) -> bool:
        """With both a group and a type the group index is walked: drop other types."""
        if not (flt.group and flt.job_type):
            return True
        return self.redis.hget(keys.QueueKeys(queue).job(job_id), "type") == flt.job_type

    def _walk(self, queue: str, flt: DeadFilter, cursor: tuple[int, str] | None,
              batch: int = 200) -> Iterator[tuple[str, int]]:
        """Dead jobs matching ``flt`` after ``cursor``, oldest first, fetched in batches.

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
                if self._type_ok(queue, flt, job_id):
                    yield job_id, score
            if len(pairs) < limit:
                return

    def dry_run(self, queue: str, flt: DeadFilter) -> int:
        """How many dead jobs the filter matches now."""
        if flt.group and flt.job_type:
            return sum(1 for _ in self._walk(queue, flt, None, batch=1000))
        return self.reads.count_dead(queue, flt)

    def _apply(self, queue: str, flt: DeadFilter, maximum: int,
               op: Callable[[str], bool]) -> dict[str, int]:
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
        return {"done": done, "skipped": skipped, "dead_before": before,
                "dead_after": self.reads.count_dead(queue)}

    def replay_filtered_now(self, queue: str, flt: DeadFilter, maximum: int,
                            actor: str = "") -> dict[str, int]:
        """Replay up to ``maximum`` matching dead jobs at once (CLI/API; no pacing).
        ``actor``: who, on each job's timeline."""
        q, note = self._queue(queue), {"bulk": f"replay now [{flt.describe()}]"}
        return self._apply(queue, flt, maximum, lambda job_id: q.replay(job_id, actor, note))

    def discard_filtered(self, queue: str, flt: DeadFilter, maximum: int,
                         actor: str = "") -> dict[str, int]:
        """Discard up to ``maximum`` matching dead jobs."""
        q, note = self._queue(queue), {"bulk": f"discard [{flt.describe()}]"}
        return self._apply(queue, flt, maximum, lambda job_id: q.discard(job_id, actor, note))

    # -- tasks -----------------------------------------------------------------------------
    def start(self, queue: str, flt: DeadFilter, rate_per_s: float, maximum: int, user: str,
              reason: str = "") -> dict[str, Any]:
        if not keys.valid_name(queue):
            raise ValueError(f"bad queue name {queue!r}")
        if not (0 < float(rate_per_s) <= MAX_RATE_PER_S) or math.isnan(float(rate_per_s)):
            raise ValueError(f"rate must be between 0 and {MAX_RATE_PER_S:g} jobs/s")
        if int(maximum) < 1:
            raise ValueError("maximum must be at least 1")
        now = self.clock()
        until = now if flt.until_ms is None else min(int(flt.until_ms), now)
        task: dict[str, Any] = {
            "id": uuid.uuid4().hex[:16], "queue": queue, "filter": filter_to_dict(flt),
            "until_ms": until, "rate_per_s": float(rate_per_s), "maximum": int(maximum),
            "total": self.dry_run(queue, flt), "replayed": 0, "skipped": 0, "state": "running",
            "created_at": now, "updated_at": now, "finished_at": 0, "last_step_at": now,
            "credit": 0.0, "cursor": None, "user": user, "reason": reason,
            "description": flt.describe(),
        }
        self.redis.hset(keys.QueueKeys(queue).replays, task["id"], json.dumps(task))
        return task

    def get(self, queue: str, task_id: str) -> dict[str, Any] | None:
        raw = self.redis.hget(keys.QueueKeys(queue).replays, task_id)
        return json.loads(raw) if raw else None

    def list(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Tasks of ``queue`` (or of every known queue), newest first."""
        names = [queue] if queue else self.reads.queue_names()
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hvals(keys.QueueKeys(name).replays)
        tasks = [json.loads(v) for values in pipe.execute() for v in values]
        tasks.sort(key=lambda t: (-int(t.get("created_at", 0)), t.get("id", "")))
        return tasks

    def _update(self, queue: str, task_id: str,
                change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
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
                    current: dict[str, Any] = json.loads(raw)
                    new = change(dict(current))
                    if new is None:
                        pipe.unwatch()
                        return current
                    new["updated_at"] = self.clock()
                    pipe.multi()
                    pipe.hset(key, task_id, json.dumps(new))
                    pipe.execute()
                    return new
                except redis.WatchError:
                    continue

    def _set_state(self, queue: str, task_id: str, allowed_from: tuple[str, ...],
                   state: str) -> dict[str, Any]:
        def change(task: dict[str, Any]) -> dict[str, Any]:
            if task["state"] not in allowed_from:
                raise TaskStateError(f"task {task_id} is {task['state']}; cannot set it {state}")
            task["state"] = state
            if state == "running":  # no burst for the time spent paused
                task["last_step_at"] = self.clock()
                task["credit"] = 0.0
            if state in FINAL:
                task["finished_at"] = self.clock()
            return task
        return self._update(queue, task_id, change)

    def pause(self, queue: str, task_id: str) -> dict[str, Any]:
        return self._set_state(queue, task_id, ("running",), "paused")

    def resume(self, queue: str, task_id: str) -> dict[str, Any]:
        return self._set_state(queue, task_id, ("paused",), "running")

    def cancel(self, queue: str, task_id: str) -> dict[str, Any]:
        return self._set_state(queue, task_id, ("running", "paused"), "cancelled")

    # -- stepping --------------------------------------------------------------------------
    def step_all(self) -> int:
        """Advance every running task; returns jobs replayed in this step."""
        total = 0
        for task in self.list():
            if task.get("state") == "running":
                total += self.step(task["queue"], task["id"])
        return total

    def step(self, queue: str, task_id: str) -> int:
        """Replay what the task's rate allows since its last step; returns jobs replayed."""
        task = self.get(queue, task_id)
        if task is None or task["state"] != "running":
            return 0
        now = self.clock()
        rate = float(task["rate_per_s"])
        elapsed_s = max(0, now - int(task["last_step_at"])) / 1000.0
        credit = min(float(task["credit"]) + rate * elapsed_s, max(rate * BURST_S, 1.0))
        budget = min(int(credit), int(task["maximum"]) - int(task["replayed"]))
        flt = filter_from_dict(task["filter"])
        flt = DeadFilter(flt.job_type, flt.group, flt.since_ms, int(task["until_ms"]))
        cursor = tuple(task["cursor"]) if task["cursor"] else None
        replayed = skipped = 0
        finished = False
        if budget > 0:
            walk = self._walk(queue, flt, cursor)
            q = self._queue(queue)
            note = {"bulk_task": task_id, "reason": task.get("reason") or ""}
            while replayed + skipped < budget:
                nxt = next(walk, None)
                if nxt is None:
                    finished = True
                    break
                cursor = (nxt[1], nxt[0])
                if q.replay(nxt[0], str(task.get("user") or ""), note):
                    replayed += 1
                else:
                    skipped += 1
        spent = replayed + skipped

        def change(cur: dict[str, Any]) -> dict[str, Any]:
            cur["replayed"] = int(cur["replayed"]) + replayed
            cur["skipped"] = int(cur["skipped"]) + skipped
            cur["cursor"] = list(cursor) if cursor else None
            cur["last_step_at"] = now
            cur["credit"] = credit - spent
            if cur["state"] == "running" and (finished or cur["replayed"] >= int(cur["maximum"])):
                cur["state"] = "done"
                cur["finished_at"] = now
            return cur
        self._update(queue, task_id, change)
        return replayed
