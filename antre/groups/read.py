"""What the Groups page, the API, the CLI and ``/metrics`` read about fair-share groups and
lock_key lines. Every read is bounded: the busiest groups come from two ZSETs kept by
the scripts (``QueueKeys.group_waiting`` / ``group_slots``: top N by ZREVRANGE), a search looks a
name up directly (ZSCORE), a group's line is read a page at a time (LRANGE)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import redis

from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.engine.envelope import Job, format_rate, from_fields, parse_rate
from antre.errors import InvalidJob

TOP_N = 20
RATE_READ = 1000  # a group's rate starts read for its row, newest first
GROUP_TARGET = "group="  # the paused HASH's field of a group (antre.control.pause)


@dataclass(frozen=True)
class GroupOverride:
    slots: int | None  # None: the slots are not overridden (only the rate)
    by: str
    reason: str
    at_ms: int
    until_ms: int  # 0: until cleared
    rate: str = ""  # the overriding rate as given ('10/s'); '' when the rate is not overridden

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
    rate: str = ""  # its rate now as given ('10/s'; '' none): an operator's override, else
    # its jobs' group_rate (read off one of its jobs)
    rate_waiting: int = 0  # starts given in the future: its jobs scheduled for the rate
    next_start_ms: int = 0  # when the rate allows its next start (0: now, or no rate)
    damaged: str = ""  # its records that are not of their type ('' none): read as empty

    def held_why(self, now_ms: int) -> str:
        """Why its waiting jobs wait: '' when they do not."""
        if self.paused:
            return "paused by an operator"
        over = self.override if self.override is not None and self.override.active(now_ms) \
            else None
        if over is not None and over.slots is not None:
            if over.slots == 0:
                return f"held by {over.by}: {over.reason}"
            if self.waiting and self.slots_held >= over.slots:
                return f"at its limit of {over.slots} (set by {over.by})"
        if self.rate and self.rate_waiting:
            by = f" (set by {over.by})" if over is not None and over.rate else ""
            return (f"at its rate {self.rate}{by}: its next job is scheduled for its start"
                    + (f", {self.waiting} more wait in line" if self.waiting else ""))
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
        """The top groups of every partition merged (a group lives in one), counts summed."""
        every = partitions.all_keys(self.redis, queue)
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            pipe.zrevrange(k.group_waiting, 0, top - 1, withscores=True)
            pipe.zrevrange(k.group_slots, 0, top - 1, withscores=True)
            pipe.hkeys(k.paused)
            pipe.hlen(k.group_overrides)
            pipe.zcard(k.group_waiting)
            pipe.zcard(k.group_slots)
            pipe.hlen(k.turns)
            pipe.zcard(k.waiting)
        replies = [_sound(r, d) for r, d in zip(pipe.execute(raise_on_error=False),
                                               _VIEW_DEFAULTS * len(every))]

        def top_of(at: int) -> list[Any]:
            pairs = [p for reply in replies[at::8] for p in reply]
            return sorted(pairs, key=lambda p: (-p[1], str(p[0])))[:top]
        by_w, by_s, paused = top_of(0), top_of(1), replies[2]
        n_over, n_w, n_s, n_keys, n_jobs = (sum(int(n) for n in replies[i::8])
                                            for i in range(3, 8))
        names = [str(n) for n, _ in by_w] + [str(n) for n, _ in by_s]
        rows = {r.name: r for r in self.rows(queue, names)}
        groups_paused = sorted(p[len(GROUP_TARGET):] for p in paused
                               if str(p).startswith(GROUP_TARGET))
        return GroupsView(queue, [rows[str(n)] for n, _ in by_w],
                          [rows[str(n)] for n, _ in by_s], groups_paused, int(n_over),
                          int(n_w), int(n_s), int(n_keys), int(n_jobs), self.clock())

    def rows(self, queue: str, names: list[str]) -> list[GroupRow]:
        """One row per distinct name (seven reads each, then two, pipelined; of the group's
        rate starts the newest RATE_READ are counted)."""
        names = list(dict.fromkeys(n for n in names if keys.valid_name(n)))
        count = partitions.published(self.redis, queue)
        where = [keys.QueueKeys(queue, partitions.slot_of(n, count)) for n in names]
        pipe = self.redis.pipeline(transaction=False)
        for n, k in zip(names, where):  # each group in its partition
            pipe.zscore(k.group_waiting, n)
            pipe.scard(k.group_held(n))
            pipe.hexists(k.paused, GROUP_TARGET + n)
            pipe.hget(k.group_overrides, n)
            pipe.lindex(k.group_line(n), -1)
            pipe.srandmember(k.group_held(n))
            pipe.zrevrange(k.group_rate(n), 0, RATE_READ - 1, withscores=True)
        raw = pipe.execute(raise_on_error=False)
        replies = [_sound(r, d) for r, d in zip(raw, _ROW_DEFAULTS * len(names))]
        pipe = self.redis.pipeline(transaction=False)
        for i, k in enumerate(where):
            pipe.zscore(k.waiting, replies[i * 7 + 4] or "-")
            one = replies[i * 7 + 5] or replies[i * 7 + 4]  # a job holding a slot, or waiting
            pipe.hget(k.job(one or "-"), "grate")
        second = [_sound(r, None) for r in pipe.execute(raise_on_error=False)]
        now = self.clock()
        out = []
        for i, n in enumerate(names):
            waiting, held, paused, over, _, _, starts = replies[i * 7:i * 7 + 7]
            joined, grate = second[i * 2:i * 2 + 2]
            record = _override(over)
            if record is not None and record.rate and record.active(now):
                grate = _raw_rate(record.rate)
            rate, ahead, next_start = _rate(grate, starts, now)
            bad = [what for what, r in zip(_ROW_READS, raw[i * 7:i * 7 + 7])
                   if isinstance(r, redis.ResponseError)]
            out.append(GroupRow(n, int(float(waiting or 0)), int(held), bool(paused),
                                record, int(float(joined or 0)), rate, ahead, next_start,
                                ", ".join(dict.fromkeys(bad))))
        return out

    def find(self, queue: str, name: str) -> GroupRow | None:
        """A group by its exact name (None: it has no job waiting or holding a slot, and no
        pause or override)."""
        if not keys.valid_name(name):
            return None
        row = self.rows(queue, [name])[0]
        if not (row.waiting or row.slots_held or row.paused or row.override or row.rate_waiting):
            return None
        return row

    def jobs(self, queue: str, name: str, offset: int = 0, limit: int = 50
             ) -> tuple[list[Job], list[Job]]:
        """A group's jobs in order: those holding a slot, then a page of its line, oldest
        first."""
        k = partitions.keys_of_key(self.redis, queue, name)
        pipe = self.redis.pipeline(transaction=False)
        pipe.smembers(k.group_held(name))
        pipe.lrange(k.group_line(name), -(offset + limit), -(offset + 1))
        held_ids, line = (_sound(r, []) for r in pipe.execute(raise_on_error=False))
        held = sorted(cast(list[str], held_ids))[:limit]
        line = cast(list[str], line) if limit else []
        return self._jobs(k, held), self._jobs(k, list(reversed(line)))

    def _jobs(self, k: keys.QueueKeys, ids: list[str]) -> list[Job]:
        pipe = self.redis.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(k.job(i))
        return [from_fields(f, k.queue, i) for i, f in zip(ids, pipe.execute(raise_on_error=False))
                if f and not isinstance(f, redis.ResponseError)]


# what each read of a view / a row gives when its record is not of its type (WRONGTYPE: a
# damaged record, read as empty; the row says which: GroupRow.damaged)
_VIEW_DEFAULTS: tuple[Any, ...] = ([], [], [], 0, 0, 0, 0, 0)
_ROW_DEFAULTS: tuple[Any, ...] = (None, 0, False, None, None, None, [])
_ROW_READS = ("the Groups index", "its slots", "the pauses", "the overrides", "its line",
              "its slots", "its rate's starts")


def _sound(reply: Any, default: Any) -> Any:
    """``reply``, or ``default`` for an error reply (a record of another type)."""
    return default if isinstance(reply, redis.ResponseError) else reply


def _override(raw: Any) -> GroupOverride | None:
    if not raw:
        return None
    try:
        d = json.loads(raw)
        slots = d.get("slots")
        return GroupOverride(None if slots is None else int(slots), str(d.get("by", "?")),
                             str(d.get("reason", "")), int(d.get("at", 0)),
                             int(d.get("until_ms", 0)), str(d.get("rate") or ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _raw_rate(shown: str) -> str:
    """'10/s' -> '10/1000' (as the scripts store a rate); '' when it does not parse."""
    try:
        n, w = parse_rate(shown)
    except InvalidJob:
        return ""
    return f"{n}/{w}"


def _rate(grate: Any, starts: list[Any], now: int) -> tuple[str, int, int]:
    """A group's rate as given, how many of its starts are still ahead, and when the rate
    allows its next start (0: now)."""
    if not grate:
        return "", 0, 0
    times = [int(t) for _, t in starts]
    ahead = sum(1 for t in times if t > now)
    try:
        count, window = (int(x) for x in str(grate).split("/"))
    except ValueError:
        return "", ahead, 0
    next_start = times[count - 1] + window if len(times) >= count else 0
    return format_rate(str(grate)), ahead, next_start if next_start > now else 0
