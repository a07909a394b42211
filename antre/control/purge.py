"""Remove jobs outside the dead-letter flow: delete one ready, scheduled or waiting job, purge a
filtered set from ready, scheduled, waiting (behind a lock_key's head) or dead (incident controls).
A removed job that held its lock_key's turn passes it to the next job in line (purge.lua).

Every Redis call is bounded: a purge walks its source in chunks of at most ``CHUNK`` ids, each
one ``purge.lua`` call that looks at the chunk and removes what matches. The ready list (and the
parked lists of paused job types, which are ready jobs too) is walked from the oldest end with
a cursor (the next id to look at, and its distance from that end); a removed id is marked in
place and dropped by the next reserve that pops it (see ``purge.lua``). Scheduled and dead are
walked in index order, the next chunk starting after ``ZRANK`` of the last id kept, on the
per-type / per-group index when the filter names one. The same walk with
``dry=True`` counts, so a dry run and the real purge apply the same rules. The paced, tracked
form (rate, maximum, progress, pause, cancel) is a ``BulkTask`` of kind ``purge`` in
``antre.control.bulk``.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.engine.scripts import Scripts
from antre.engine import states

SOURCES = (states.READY, states.SCHEDULED, states.WAITING, states.DEAD)
CHUNK = 100  # ids per purge.lua call: ~0.5 ms of Redis time each (bench/experiments/incident.md)
COUNT_CHUNKS = 40  # chunks one bounded count walks (4,000 jobs, ~20 ms of Redis time)
COUNT_BUDGET_MS = 100  # and it stops after this long, whichever comes first
MAX_TOKEN = 2_000
MAX_FIELD = 200


class PurgeError(ValueError):
    """A purge or delete that was refused; the message says what to do."""


@dataclass(frozen=True)
class PurgeFilter:
    """Which jobs of one source: type, error group (dead only), created more than
    ``older_than_s`` ago, a top-level payload ``field`` equal to ``value`` (as text)."""

    source: str = states.READY
    job_type: str | None = None
    group: str | None = None
    older_than_s: float | None = None
    field: str | None = None
    value: str | None = None

    def check(self) -> "PurgeFilter":
        if self.source not in SOURCES:
            raise PurgeError(f"source must be one of {', '.join(SOURCES)}, not {self.source!r}")
        for name in ("job_type", "group"):
            v = getattr(self, name)
            if v is not None and not keys.valid_name(v):
                raise PurgeError(f"bad {name} {v!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        if self.group and self.source != states.DEAD:
            raise PurgeError("an error group filter only applies to the dead-letter queue")
        if self.older_than_s is not None and not 0 <= float(self.older_than_s) <= 366 * 86400:
            raise PurgeError("older_than_s must be from 0 to 31622400 seconds")
        if (self.field is None) != (self.value is None):
            raise PurgeError("a payload filter needs both field and value")
        if self.field is not None and not 0 < len(self.field) <= MAX_FIELD:
            raise PurgeError(f"field must be 1-{MAX_FIELD} characters")
        return self

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in (("type", self.job_type), ("group", self.group),
                                          ("older_than_s", self.older_than_s)) if v is not None]
        if self.field is not None:
            parts.append(f"payload.{self.field}={self.value}")
        return f"{self.source}: " + (", ".join(parts) or "all")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PurgeFilter":
        return cls(str(data.get("source") or states.READY), data.get("job_type"), data.get("group"),
                   data.get("older_than_s"), data.get("field"), data.get("value"))

    def lua(self, now_ms: int) -> str:
        out: dict[str, Any] = {}
        if self.job_type:
            out["type"] = self.job_type
        if self.group:
            out["group"] = self.group
        if self.older_than_s is not None:
            out["created_before"] = now_ms - int(float(self.older_than_s) * 1000)
        if self.field is not None:
            out["field"], out["value"] = self.field, str(self.value)
        return json.dumps(out)


@dataclass(frozen=True)
class Tally:
    """A count made within a budget: ``matched`` of ``looked`` so far; ``cursor`` None when
    the walk finished (the count is exact), else where the next request goes on."""

    matched: int
    looked: int
    cursor: dict[str, Any] | None

    @property
    def exact(self) -> bool:
        return self.cursor is None

    def token(self) -> str:
        """The cursor and the figures so far, as one URL-safe string to continue from."""
        raw = json.dumps({"c": self.cursor, "m": self.matched, "l": self.looked})
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def from_token(cls, token: str) -> "Tally":
        """The tally a ``token()`` stood for; ``PurgeError`` for anything else."""
        try:
            if len(token) > MAX_TOKEN:
                raise ValueError("too long")
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            cursor, matched, looked = data["c"], data["m"], data["l"]
            if not (isinstance(cursor, dict) and all(
                    isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool)
                    for k, v in cursor.items())):
                raise ValueError("bad cursor")
            if not all(type(n) is int and 0 <= n < 2**53 for n in (matched, looked)):
                raise ValueError("bad figures")
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise PurgeError("bad count cursor: count again from the start (without "
                             "count_cursor)") from exc
        return cls(matched, looked, cursor)


@dataclass(frozen=True)
class Chunk:
    looked: int
    matched: int
    cursor: dict[str, Any] | None  # None: the walk is over


class Purger:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)

    # -- one job ------------------------------------------------------------------------------
    def delete(self, queue: str, job_id: str) -> str:
        """Delete one ready (or parked), scheduled or waiting job, or a held job of a flow
        that failed or waits (``_may_delete_held``); returns where it was. Raises
        ``PurgeError`` when it is none of them (running, dead, done or gone)."""
        k = keys.of_job(queue, job_id)
        state = str(self.redis.hget(k.job(job_id), "state") or "")
        if state == states.SCHEDULED and self._zset_delete(k, k.scheduled, job_id):
            return states.SCHEDULED
        if state == states.WAITING and self._zset_delete(k, k.waiting, job_id):
            return states.WAITING
        if state == states.READY and self._list_delete(k, job_id):
            return states.READY
        if state == states.HELD:
            self._may_delete_held(k, job_id)
            if self._zset_delete(k, k.held, job_id):
                return states.HELD
        raise PurgeError(f"job {job_id} is not ready, scheduled, waiting or held in {queue} "
                         f"(it is {state or 'gone'}); nothing was changed")

    def _may_delete_held(self, k: keys.QueueKeys, job_id: str) -> None:
        """A held job (its flow's parents unsettled) is deleted only once its flow is stuck
        (failed or waiting on a dead member) or gone: deleting it gives the flow up under
        policy fail / wait (purge.lua: flow_gone; the flow stays failed, its other held jobs
        go too). In a running flow it would start when its parents finish: refused."""
        flow_id = str(self.redis.hget(k.job(job_id), "flow") or "")
        state = str(self.redis.hget(k.flow(flow_id), "state") or "") if flow_id else ""
        if state == "running":
            raise PurgeError(f"job {job_id} is held until its parents in flow {flow_id} finish "
                             "and the flow is running: cancel the flow to stop it (flow "
                             "cancel), or delete it once the flow has failed; nothing was "
                             "changed")

    def _zset_delete(self, k: keys.QueueKeys, zkey: str, job_id: str) -> bool:
        reply = self.scripts.purge(keys=[zkey, k.stats, k.tombstones],
                                   args=[k.job_prefix, "zset", 0, "{}", json.dumps([job_id])])
        return int(reply[1]) == 1

    def _list_delete(self, k: keys.QueueKeys, job_id: str) -> bool:
        """One job out of the ready list or a parked list: a one-id chunk that starts at it."""
        only = json.dumps({"id": job_id})
        for lkey in self._lists(k, None):
            reply = self.scripts.purge(keys=[lkey, k.stats, k.tombstones],
                                       args=[k.job_prefix, "list", 0, only, job_id, 1])
            if int(reply[1]) == 1:
                return True
        return False

    # -- a filtered set ----------------------------------------------------------------------
    def count(self, queue: str, flt: PurgeFilter) -> int:
        """Dry run: how many jobs the filter matches now (the same walk, nothing removed)."""
        total, cursor = 0, None
        while True:
            chunk = self.step(queue, flt, cursor, CHUNK, dry=True)
            total += chunk.matched
            if chunk.cursor is None:
                return total
            cursor = chunk.cursor

    def tally(self, queue: str, flt: PurgeFilter, start: Tally | None = None,
              max_chunks: int = COUNT_CHUNKS, budget_ms: int = COUNT_BUDGET_MS) -> Tally:
        """Dry run within a budget: at most ``max_chunks`` chunks and about ``budget_ms``,
        going on from ``start`` (a tally not exact yet). Exact when the walk ends within the
        budget; else "at least ``matched``", with the cursor to continue."""
        matched, looked = (start.matched, start.looked) if start else (0, 0)
        cursor = start.cursor if start else None
        deadline = time.monotonic() + budget_ms / 1000
        for _ in range(max(1, max_chunks)):
            chunk = self.step(queue, flt, cursor, CHUNK, dry=True)
            matched, looked, cursor = matched + chunk.matched, looked + chunk.looked, chunk.cursor
            if cursor is None or time.monotonic() >= deadline:
                break
        return Tally(matched, looked, cursor)

    def purge(self, queue: str, flt: PurgeFilter, maximum: int) -> int:
        """Remove up to ``maximum`` matching jobs at once (chunked); returns how many."""
        done, cursor = 0, None
        while done < maximum:
            chunk = self.step(queue, flt, cursor, min(CHUNK, maximum - done), dry=False)
            done += chunk.matched
            if chunk.cursor is None:
                break
            cursor = chunk.cursor
        return done

    def step(self, queue: str, flt: PurgeFilter, cursor: dict[str, Any] | None, size: int,
             dry: bool) -> Chunk:
        """One bounded chunk of the walk: looks at up to ``size`` jobs after ``cursor``. A
        partitioned queue's partitions are walked one after the other (the cursor's ``p``)."""
        cursor = cursor or {}
        p = cursor.get("p", 0)
        if not isinstance(p, int) or not 0 <= p < keys.MAX_PARTITIONS:
            return Chunk(0, 0, None)
        k = keys.QueueKeys(queue, p)
        inner = {name: v for name, v in cursor.items() if name != "p"}
        if flt.source == states.READY:
            chunk = self._list_step(k, flt, inner, size, dry)
        else:
            chunk = self._zset_step(k, flt, inner, size, dry)
        if chunk.cursor is not None:
            return Chunk(chunk.looked, chunk.matched, {**chunk.cursor, "p": p} if p else
                         chunk.cursor)
        if p + 1 < partitions.published(self.redis, queue):  # the next partition's walk
            return Chunk(chunk.looked, chunk.matched, {"p": p + 1})
        return chunk

    def _lists(self, k: keys.QueueKeys, job_type: str | None) -> list[str]:
        parked = sorted(cast(set[str], self.redis.smembers(k.parked_types)))
        return [k.ready] + [k.parked(t) for t in parked if job_type in (None, t)]

    def _list_step(self, k: keys.QueueKeys, flt: PurgeFilter, cursor: dict[str, Any],
                   size: int, dry: bool) -> Chunk:
        lists = self._lists(k, flt.job_type)
        lkey, start = _list_at(lists, cursor)
        if lkey is None:
            return Chunk(0, 0, None)
        hint = str(cursor.get("hint") or "") if start else ""
        looked, matched, nxt, nxt_hint = self.scripts.purge(
            keys=[lkey, k.stats, k.tombstones],
            args=[k.job_prefix, "list", int(dry), flt.lua(self.clock()), start, size, hint])
        if nxt:
            return Chunk(int(looked), int(matched), {"list": lkey, "id": nxt, "hint": nxt_hint})
        rest = lists[lists.index(lkey) + 1:]
        return Chunk(int(looked), int(matched), {"list": rest[0], "id": ""} if rest else None)

    def _zset_step(self, k: keys.QueueKeys, flt: PurgeFilter, cursor: dict[str, Any],
                   size: int, dry: bool) -> Chunk:
        source = {states.SCHEDULED: k.scheduled, states.WAITING: k.waiting}.get(flt.source, k.dead)
        index = source
        if flt.source == states.DEAD and flt.group:
            index = k.dead_by_group(flt.group)
        elif flt.source == states.DEAD and flt.job_type:
            index = k.dead_by_type(flt.job_type)
        ids = self._candidates(index, cursor, size)
        prefixes = [k.dead_type_prefix, k.dead_group_prefix] if flt.source == states.DEAD else ["", ""]
        looked, matched, kept, _ = self.scripts.purge(
            keys=[source, k.stats, k.tombstones],
            args=[k.job_prefix, "zset", int(dry), flt.lua(self.clock()), json.dumps(ids), size,
                  *prefixes])
        if len(ids) < size:
            return Chunk(int(looked), int(matched), None)
        # the next chunk starts after the last id still indexed (or where this one started)
        return Chunk(int(looked), int(matched), {"id": kept} if kept else cursor)

    def _candidates(self, index: str, cursor: dict[str, Any], size: int) -> list[str]:
        """Up to ``size`` ids after the cursor's id in ``index`` (by rank: scores may repeat,
        and ZRANK finds the id in O(log n)); from the start when it has none or it is gone."""
        start = 0
        if cursor.get("id"):
            rank = self.redis.zrank(index, str(cursor["id"]))
            start = 0 if rank is None else int(cast(int, rank)) + 1
        return cast(list[str], self.redis.zrange(index, start, start + size - 1))


def _list_at(lists: list[str], cursor: dict[str, Any]) -> tuple[str | None, str]:
    """The list a cursor points into and the id to start at; ready first, then the parked
    lists in name order (a parked list emptied meanwhile is stepped over)."""
    current = cursor.get("list")
    if not current:
        return lists[0], ""
    if current in lists:
        return str(current), str(cursor.get("id") or "")
    later = [name for name in lists[1:] if name > current]
    return (later[0], "") if later else (None, "")
