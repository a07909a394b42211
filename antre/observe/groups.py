"""What the Groups page, the API, the CLI and ``/metrics`` read about fair-share groups and
lock_key lines (issue 23). Every read is bounded: the busiest groups come from two ZSETs kept by
the scripts (``QueueKeys.group_waiting`` / ``group_slots``: top N by ZREVRANGE), a search looks a
name up directly (ZSCORE), a group's line is read a page at a time (LRANGE)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import redis

from antre.clock import Clock, system_ms
from antre.engine import keys
from antre.engine.envelope import Job, from_fields

TOP_N = 20
GROUP_TARGET = "group="  # the paused HASH's field of a group (antre.control.pause)


@dataclass(frozen=True)
class GroupOverride:
    slots: int
    by: str
    reason: str
    at_ms: int
    until_ms: int  # 0: until cleared

    def active(self, now_ms: int) -> bool:
        return self.until_ms == 0 or now_ms < self.until_ms


@dataclass(frozen=True)
class GroupRow:
    name: str
    waiting: int  # in the group's line (purged ids not stepped over yet included)
    slots_held: int  # its jobs ready, scheduled or in flight
    paused: bool
    override: GroupOverride | None
    oldest_waiting_ms: int  # when its oldest waiting job joined (0: none)

    def held_why(self, now_ms: int) -> str:
        """Why its waiting jobs wait: '' when they do not."""
        if self.paused:
            return "paused by an operator"
        if self.override is not None and self.override.active(now_ms):
            if self.override.slots == 0:
                return f"held by {self.override.by}: {self.override.reason}"
            if self.waiting and self.slots_held >= self.override.slots:
                return f"at its limit of {self.override.slots} (set by {self.override.by})"
        if self.waiting:
            return f"all {self.slots_held} slots taken"
        return ""


@dataclass(frozen=True)
class GroupsView:
    queue: str
    by_waiting: list[GroupRow]
    by_slots: list[GroupRow]
    paused: list[str]
    overrides: int
    groups_waiting: int  # how many groups have waiting jobs
    groups_active: int  # how many groups hold slots
    keys_held: int  # lock_keys with a head
    jobs_waiting: int
    as_of: int


class Groups:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock

    def view(self, queue: str, top: int = TOP_N) -> GroupsView:
        k = keys.QueueKeys(queue)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrevrange(k.group_waiting, 0, top - 1, withscores=True)
        pipe.zrevrange(k.group_slots, 0, top - 1, withscores=True)
        pipe.hkeys(k.paused)
        pipe.hlen(k.group_overrides)
        pipe.zcard(k.group_waiting)
        pipe.zcard(k.group_slots)
        pipe.hlen(k.turns)
        pipe.zcard(k.waiting)
        by_w, by_s, paused, n_over, n_w, n_s, n_keys, n_jobs = pipe.execute()
        names = [str(n) for n, _ in by_w] + [str(n) for n, _ in by_s]
        rows = {r.name: r for r in self.rows(queue, names)}
        groups_paused = sorted(p[len(GROUP_TARGET):] for p in paused
                               if str(p).startswith(GROUP_TARGET))
        return GroupsView(queue, [rows[str(n)] for n, _ in by_w],
                          [rows[str(n)] for n, _ in by_s], groups_paused, int(n_over),
                          int(n_w), int(n_s), int(n_keys), int(n_jobs), self.clock())

    def rows(self, queue: str, names: list[str]) -> list[GroupRow]:
        """One row per distinct name (five reads each, pipelined)."""
        k = keys.QueueKeys(queue)
        names = list(dict.fromkeys(n for n in names if keys.valid_name(n)))
        pipe = self.redis.pipeline(transaction=False)
        for n in names:
            pipe.zscore(k.group_waiting, n)
            pipe.scard(k.group_held(n))
            pipe.hexists(k.paused, GROUP_TARGET + n)
            pipe.hget(k.group_overrides, n)
            pipe.lindex(k.group_line(n), -1)
        replies = pipe.execute()
        oldest_ids = [replies[i * 5 + 4] for i in range(len(names))]
        pipe = self.redis.pipeline(transaction=False)
        for oid in oldest_ids:
            pipe.zscore(k.waiting, oid or "-")
        joined = pipe.execute()
        out = []
        for i, n in enumerate(names):
            waiting, held, paused, over = replies[i * 5:i * 5 + 4]
            out.append(GroupRow(n, int(float(waiting or 0)), int(held), bool(paused),
                                _override(over), int(float(joined[i] or 0))))
        return out

    def find(self, queue: str, name: str) -> GroupRow | None:
        """A group by its exact name (None: it has no job waiting or holding a slot, and no
        pause or override)."""
        if not keys.valid_name(name):
            return None
        row = self.rows(queue, [name])[0]
        if not (row.waiting or row.slots_held or row.paused or row.override):
            return None
        return row

    def jobs(self, queue: str, name: str, offset: int = 0, limit: int = 50
             ) -> tuple[list[Job], list[Job]]:
        """A group's jobs in order: those holding a slot, then a page of its line, oldest
        first."""
        k = keys.QueueKeys(queue)
        held = cast(list[str], sorted(self.redis.smembers(k.group_held(name))))[:limit]
        line = cast(list[str], self.redis.lrange(k.group_line(name), -(offset + limit),
                                                 -(offset + 1))) if limit else []
        return self._jobs(k, held), self._jobs(k, list(reversed(line)))

    def _jobs(self, k: keys.QueueKeys, ids: list[str]) -> list[Job]:
        pipe = self.redis.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(k.job(i))
        return [from_fields(f) for f in pipe.execute() if f]


def _override(raw: Any) -> GroupOverride | None:
    if not raw:
        return None
    try:
        d = json.loads(raw)
        return GroupOverride(int(d["slots"]), str(d.get("by", "?")), str(d.get("reason", "")),
                             int(d.get("at", 0)), int(d.get("until_ms", 0)))
    except (ValueError, KeyError, TypeError):
        return None
