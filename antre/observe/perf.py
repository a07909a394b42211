"""Per job type performance: runs, failures, handler duration and queue wait
(p50 / p95 / p99) over the last hour, 24 hours and 7 days, a duration histogram and the
deploys in the window, read from Redis (the performance page, its JSON twin and the CLI).

Where the data lives, and its bound: each queue keeps time-slotted HASHes
(``keys.QueueKeys.perf``): 5-minute slots (kept 2 h, for the last hour), hourly slots (kept
7 d + 1 h, for 24 h, 7 d and the hourly series) and, written with them, 6-hour and daily slots
(kept 7 d + their length) that hold the sums of their hours. A slot holds per job type
``runs``, ``fail`` and two histograms over the fixed buckets of ``metrics.BUCKETS_MS`` (``d``:
the handler's run time, ``w``: the time from ready, its ``visible_at``, to reserved) with their
sums: at most 42 fields per type. So a queue holds at most 24 + 169 + 30 + 9 slots (each
expires by itself, relative to the writer's clock), whatever the traffic. The worker counts
every job that ran into its ``DurationBuffer`` in memory and writes the sums once per heartbeat
(``record_run``): no Redis call per job.

A window's figures read the fewest slots that tile its hours exactly (``cover``: whole days,
then 6-hour slots, then hours at its two ends: at most 22 slots for 7 days instead of 168), so
they are the sums of the same hours as before. A coarse slot whose key does not exist (nothing
ran in it, or its hours were written by a worker older than the coarse slots) is read from its
hours instead, so older data still counts; during a rolling upgrade, the runs that older
workers record in a block the newer ones also wrote are missing from the coarse figures until
that block leaves the window (the hourly series and the 24 h page's hours still count them).

Percentiles come from the histograms: linear within the bucket that holds the rank (so exact
to the bucket's bounds, which grow about 2.5x each); a rank in the last, open bucket reads as
its lower bound (shown as "> 60m"). Deploy markers are worker starts whose code version
differs from the previous start's (``WorkerRegistry.starts``); the page adds the operators'
actions from the audit log.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.observe.metrics import BUCKETS_MS, DurationBuffer, bucket_of
from antre.observe.registry import WorkerRegistry

SLOT_MS = {"m": 300_000, "h": 3_600_000, "q": 21_600_000, "d": 86_400_000}
KEEP_MS = {"m": 2 * 3_600_000, "h": 7 * 86_400_000 + 3_600_000,
           "q": 7 * 86_400_000 + 21_600_000, "d": 8 * 86_400_000}
TIERS = ("d", "q", "h")  # coarse to fine; each slot is a whole number of the next one's
COARSE = {"q": "h", "d": "h"}  # a coarse slot missing: read from these (its hours)
WINDOWS = {"1h": ("m", 3_600_000), "24h": ("h", 86_400_000), "7d": ("h", 7 * 86_400_000)}
BUCKET_NAMES = tuple(str(b) for b in BUCKETS_MS) + ("inf",)
QUANTILES = (0.5, 0.95, 0.99)
_BUCKET_AT = {b: i for i, b in enumerate(BUCKET_NAMES)}
_HIST = 2 * len(BUCKET_NAMES)


def slot_of(resolution: str, ms: int) -> int:
    return ms // SLOT_MS[resolution]


def cover(start_ms: int, end_ms: int) -> list[tuple[str, int]]:
    """The fewest slots of ``TIERS`` that tile ``[start_ms, end_ms)`` exactly (both on hour
    bounds), in time order: at each point the coarsest slot that starts there and fits."""
    out: list[tuple[str, int]] = []
    at = start_ms
    while at < end_ms:
        for res in TIERS:
            size = SLOT_MS[res]
            if at % size == 0 and at + size <= end_ms:
                out.append((res, at // size))
                at += size
                break
        else:
            raise ValueError(f"cover: {at} is not on an hour bound")
    return out


def hours_of(res: str, slot: int) -> list[int]:
    """The hourly slots that make up one slot of ``TIERS``."""
    n = SLOT_MS[res] // SLOT_MS["h"]
    return list(range(slot * n, slot * n + n))


class _Tally:
    """Runs counted in memory per (queue, type, 5-minute slot, hour): per job a few integer
    additions; ``drain`` (the buffer's flush) turns them into the slots' fields."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str, int, int], list[int]] = {}

    def add(self, queue: str, job_type: str, now_ms: int, d: int, w: int, failed: bool) -> None:
        at = (queue, job_type, now_ms // SLOT_MS["m"], now_ms // SLOT_MS["h"])
        db, wb = _BUCKET_AT[bucket_of(d)], _BUCKET_AT[bucket_of(w)]
        with self._lock:
            row = self._rows.get(at)
            if row is None:
                row = self._rows[at] = [0] * (_HIST + 5)
            row[0] += 1
            row[1] += failed
            row[2] += d
            row[3] += w
            row[5 + db] += 1
            row[5 + len(BUCKET_NAMES) + wb] += 1
            row[4] = now_ms  # the newest count's time: the slots' expiry counts from it

    def drain(self) -> tuple[list[tuple[tuple[str, str], int]], dict[str, int],
                             list[tuple[tuple[str, str], int]]]:
        with self._lock:
            rows, self._rows = self._rows, {}
        incs: list[tuple[tuple[str, str], int]] = []
        ranks: list[tuple[tuple[str, str], int]] = []
        ttls: dict[str, int] = {}
        for (queue, job_type, m, h), row in rows.items():
            qk, p, now = keys.QueueKeys(queue), job_type + "|", row[4]
            names = [p + "runs", p + "fail", p + "d|sum", p + "w|sum"]
            values = row[:4]
            for i, b in enumerate(BUCKET_NAMES):
                names += [p + "d|" + b, p + "w|" + b]
                values += [row[5 + i], row[5 + len(BUCKET_NAMES) + i]]
            for res, slot in (("m", m), ("h", h), ("q", h // 6), ("d", h // 24)):
                key, rank = qk.perf(res, slot), qk.perf_rank(res, slot)
                incs += [((key, n), v) for n, v in zip(names, values) if v]
                ranks.append(((rank, job_type), row[0]))
                ttls[key] = ttls[rank] = max(1, slot * SLOT_MS[res] + KEEP_MS[res] - now)
        return incs, ttls, ranks


def record_run(buffer: DurationBuffer, queue: str, job_type: str, now_ms: int,
               duration_ms: int, wait_ms: int, failed: bool) -> None:
    """Count one job that ran into the 5-minute and hourly slots of ``now_ms``: in memory (a
    few integer additions), written by ``buffer.flush`` with the slots' expiry."""
    tally = buffer.sources.get("perf")
    if tally is None:
        tally = buffer.sources.setdefault("perf", _Tally())
    tally.add(queue, job_type, now_ms, max(0, int(duration_ms)), max(0, int(wait_ms)),
              failed)


def type_fields(job_type: str) -> list[str]:
    """The fields of one type in a slot, in the order ``_Sums.add_values`` reads them."""
    p = job_type + "|"
    return ([p + "runs", p + "fail", p + "d|sum", p + "w|sum"]
            + [p + "d|" + b for b in BUCKET_NAMES] + [p + "w|" + b for b in BUCKET_NAMES])


def percentile(counts: tuple[int, ...] | list[int], q: float) -> float | None:
    """The ``q`` quantile (ms) of a histogram over ``BUCKET_NAMES``; None when it is empty."""
    total = sum(counts)
    if total <= 0:
        return None
    rank, cum, lower = q * total, 0, 0.0
    for i, c in enumerate(counts):
        if c and cum + c >= rank:
            if i >= len(BUCKETS_MS):
                return lower  # the open bucket: at least its lower bound
            return lower + (BUCKETS_MS[i] - lower) * max(0.0, rank - cum) / c
        cum += c
        if i < len(BUCKETS_MS):
            lower = float(BUCKETS_MS[i])
    return lower


@dataclass(frozen=True)
class Quantiles:
    p50: float | None
    p95: float | None
    p99: float | None
    open_ended: bool  # p99 fell into the last, open bucket (a lower bound)

    @classmethod
    def of(cls, counts: tuple[int, ...]) -> "Quantiles":
        p50, p95, p99 = (percentile(counts, q) for q in QUANTILES)
        top = counts[-1] if counts else 0
        return cls(p50, p95, p99, bool(top) and sum(counts[:-1]) < 0.99 * sum(counts))


@dataclass(frozen=True)
class Figures:
    """One type's figures over one window (or one slot)."""

    runs: int
    failures: int
    duration_sum_ms: int
    wait_sum_ms: int
    duration_hist: tuple[int, ...]  # counts per BUCKET_NAMES
    wait_hist: tuple[int, ...]

    @property
    def duration(self) -> Quantiles:
        return Quantiles.of(self.duration_hist)

    @property
    def wait(self) -> Quantiles:
        return Quantiles.of(self.wait_hist)

    @property
    def failure_pct(self) -> float:
        return 100.0 * self.failures / self.runs if self.runs else 0.0

    @property
    def mean_ms(self) -> float | None:
        return self.duration_sum_ms / self.runs if self.runs else None

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "failures": self.failures,
                "failure_pct": round(self.failure_pct, 2), "mean_ms": self.mean_ms,
                "duration_ms": _q(self.duration), "wait_ms": _q(self.wait),
                "duration_histogram": dict(zip(BUCKET_NAMES, self.duration_hist))}


def _q(q: Quantiles) -> dict[str, Any]:
    return {"p50": q.p50, "p95": q.p95, "p99": q.p99, "open_ended": q.open_ended}


@dataclass
class _Sums:
    runs: int = 0
    fail: int = 0
    dsum: int = 0
    wsum: int = 0
    dh: list[int] = field(default_factory=lambda: [0] * len(BUCKET_NAMES))
    wh: list[int] = field(default_factory=lambda: [0] * len(BUCKET_NAMES))

    def add_values(self, values: list[Any]) -> None:
        """Add one slot's values of ``type_fields`` (missing or damaged ones read 0)."""
        n = len(BUCKET_NAMES)
        nums = [_num(v) for v in values]
        self.runs += nums[0]
        self.fail += nums[1]
        self.dsum += nums[2]
        self.wsum += nums[3]
        for i in range(n):
            self.dh[i] += nums[4 + i]
            self.wh[i] += nums[4 + n + i]

    def figures(self) -> Figures:
        return Figures(self.runs, self.fail, self.dsum, self.wsum, tuple(self.dh),
                       tuple(self.wh))




def _num(v: Any) -> int:
    try:
        n = int(v or 0)
    except (TypeError, ValueError):
        return 0
    return max(0, n)


@dataclass(frozen=True)
class TypeRow:
    """One job type on the index: its queues and its figures over the window."""

    job_type: str
    queues: tuple[str, ...]
    figures: Figures


PAGE = 50  # types per page of the index
PAGE_MAX = 500


@dataclass(frozen=True)
class TypesPage:
    """One page of the index: its rows (busiest first), how many types ran in the window,
    where the page starts and its size."""

    rows: list[TypeRow]
    total: int
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None

    @property
    def previous_offset(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset else None


@dataclass(frozen=True)
class Point:
    """One slot of a type's series: when it starts, its runs, failures and p95 duration."""

    t: int
    runs: int
    failures: int
    p95_ms: float | None


@dataclass(frozen=True)
class Marker:
    t: int
    kind: str  # 'deploy' (a worker started with another code version) or 'operator'
    text: str


@dataclass(frozen=True)
class TypePerf:
    """One job type's page: its figures over each window, the selected window's series and
    histogram, and the deploys in it."""

    job_type: str
    queues: tuple[str, ...]
    window: str
    windows: dict[str, Figures]
    series: list[Point]
    markers: list[Marker]
    as_of: int

    @property
    def selected(self) -> Figures:
        return self.windows[self.window]


def window_arg(raw: str | None) -> str:
    """``raw`` when it names a window, else '24h'."""
    return raw if raw in WINDOWS else "24h"


class Perf:
    """The performance read model, over one Redis."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock

    def _slots(self, window: str, now: int) -> tuple[str, list[int]]:
        res, span = WINDOWS[window]
        first, last = slot_of(res, now - span), slot_of(res, now)
        return res, list(range(first + 1, last + 1))

    def queue_types(self, queue: str | None = None) -> dict[str, list[str]]:
        """job type -> the queues it was seen in (the queues' ``types`` SETs)."""
        names = [queue] if queue else sorted(cast(set[str], self.redis.smembers(
            keys.queues_index())))
        every = [k for name in names for k in partitions.all_keys(self.redis, name)]
        pipe = self.redis.pipeline(transaction=False)
        for k in every:  # each partition's (the figures themselves are in partition 0's)
            pipe.smembers(k.types)
        out: dict[str, list[str]] = {}
        for k, types in zip(every, pipe.execute()):
            for t in types:
                seen = out.setdefault(str(t), [])
                if k.queue not in seen:
                    seen.append(k.queue)
        return out

    def queues_of(self, job_type: str, queue: str | None = None) -> list[str]:
        """The queues ``job_type`` was seen in (one SISMEMBER per queue partition)."""
        names = [queue] if queue else sorted(cast(set[str], self.redis.smembers(
            keys.queues_index())))
        every = [k for name in names for k in partitions.all_keys(self.redis, name)]
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            pipe.sismember(k.types, job_type)
        return list(dict.fromkeys(k.queue for k, yes in zip(every, pipe.execute()) if yes))

    def summary(self, window: str, queue: str | None = None, limit: int = PAGE_MAX,
                offset: int = 0) -> list[TypeRow]:
        """The busiest types of the window (``page``'s rows)."""
        return self.page(window, queue, limit, offset).rows

    def page(self, window: str, queue: str | None = None, limit: int = PAGE,
             offset: int = 0) -> TypesPage:
        """The types that ran in the window, busiest first, ``limit`` of them from
        ``offset``: ranked by their runs from the slots' ``perf_rank`` ZSETs (one ZUNION per
        queue over the window's ``cover``), then one HMGET of the type's fields per slot of
        the cover for the types shown only. Its cost: O(queues x slots) commands for the
        ranking (the server sums every type's runs in C) and O(types shown x slots) for the
        figures, however many types exist."""
        limit, offset = max(1, min(int(limit), PAGE_MAX)), max(0, int(offset))
        cov = self._cover(window, self.clock())
        names = [queue] if queue else sorted(cast(set[str], self.redis.smembers(
            keys.queues_index())))
        runs: dict[str, int] = {}
        where: dict[str, list[str]] = {}
        for name, ranked in zip(names, self._ranks(names, cov)):
            for job_type, n in ranked:
                if n > 0:
                    runs[job_type] = runs.get(job_type, 0) + n
                    where.setdefault(job_type, []).append(name)
        order = sorted(runs, key=lambda t: (-runs[t], t))
        shown = order[offset:offset + limit]
        plan = [(t, q) for t in shown for q in sorted(where[t])]
        sums: dict[str, _Sums] = {}
        seen: dict[str, list[str]] = {}
        for (job_type, name), replies in zip(plan, self._read(plan, cov) if plan else []):
            totals = _column_sums(replies)
            if totals and totals[0]:
                sums.setdefault(job_type, _Sums()).add_values(totals)
                seen.setdefault(job_type, []).append(name)
        rows = [TypeRow(t, tuple(sorted(seen[t])), sums[t].figures()) for t in shown
                if t in sums]
        rows.sort(key=lambda r: (-r.figures.runs, r.job_type))
        return TypesPage(rows, len(order), offset, limit)

    def _ranks(self, names: list[str], slots: list[tuple[str, int]]
               ) -> list[list[tuple[str, int]]]:
        """Per queue of ``names``, every type's runs over ``slots`` (type, runs): its
        ``perf_rank`` ZSETs summed by one ZUNION; a coarse slot whose ZSET does not exist is
        summed from its hours'. Two pipelines."""
        coarse = [s for s in slots if s[0] in COARSE]
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            qk = keys.QueueKeys(name)
            for res, slot in coarse:
                pipe.exists(qk.perf_rank(res, slot))
        there = iter(pipe.execute())
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            qk = keys.QueueKeys(name)
            found = {s: bool(next(there)) for s in coarse}
            ranked = [qk.perf_rank(res, slot) for res, slot in slots
                      if res not in COARSE or found[(res, slot)]]
            ranked += [qk.perf_rank("h", h) for s in coarse if not found[s]
                       for h in hours_of(*s)]
            pipe.zunion(ranked, withscores=True)
        return [[(str(t), int(n)) for t, n in reply] for reply in pipe.execute()]

    def _cover(self, window: str, now: int) -> list[tuple[str, int]]:
        """The slots a window's figures read: its 5-minute slots, or the ``cover`` of its
        hours (the same hours ``_slots`` names, in fewer slots)."""
        res, slots = self._slots(window, now)
        if res == "m" or not slots:
            return [(res, s) for s in slots]
        return cover(slots[0] * SLOT_MS["h"], (slots[-1] + 1) * SLOT_MS["h"])

    def _read(self, plan: list[tuple[str, str]], slots: list[tuple[str, int]]
              ) -> list[list[Any]]:
        """Per (job type, queue) of ``plan``, the HMGET reply of the type's fields in each of
        ``slots``; a coarse slot whose key does not exist is read from its hours (its reply is
        their column sums): one pipeline, and a second only for such slots."""
        coarse = [s for s in slots if s[0] in COARSE]
        queues = sorted({name for _, name in plan})
        probes = [(name, s) for name in queues for s in coarse]
        pipe = self.redis.pipeline(transaction=False)
        for name, (res, slot) in probes:
            pipe.exists(keys.QueueKeys(name).perf(res, slot))
        for job_type, name in plan:
            fields, qk = type_fields(job_type), keys.QueueKeys(name)
            for res, slot in slots:
                pipe.hmget(qk.perf(res, slot), fields)
        replies = pipe.execute()
        missing = {p for p, there in zip(probes, replies) if not there}
        n, width = len(probes), len(slots)
        out = [replies[n + i * width:n + (i + 1) * width] for i in range(len(plan))]
        if missing:
            self._read_hours(plan, slots, missing, out)
        return out

    def _read_hours(self, plan: list[tuple[str, str]], slots: list[tuple[str, int]],
                    missing: set[tuple[str, tuple[str, int]]], out: list[list[Any]]) -> None:
        """Replace the replies of the ``missing`` coarse slots in ``out`` with the column
        sums of their hours: those that exist (nothing ran in the others), probed once per
        queue, so a type costs one HMGET per hour that holds data, not per hour of the slot."""
        probes = sorted({(name, h) for name, s in missing for h in hours_of(*s[0:2])})
        pipe = self.redis.pipeline(transaction=False)
        for name, h in probes:
            pipe.exists(keys.QueueKeys(name).perf("h", h))
        held = {p for p, there in zip(probes, pipe.execute()) if there}
        pipe = self.redis.pipeline(transaction=False)
        todo: list[tuple[int, int, int]] = []
        for i, (job_type, name) in enumerate(plan):
            fields, qk = type_fields(job_type), keys.QueueKeys(name)
            for j, s in enumerate(slots):
                if (name, s) in missing:
                    hours = [h for h in hours_of(*s) if (name, h) in held]
                    for h in hours:
                        pipe.hmget(qk.perf("h", h), fields)
                    todo.append((i, j, len(hours)))
        more = iter(pipe.execute())
        width = len(type_fields(""))
        for i, j, count in todo:
            out[i][j] = _column_sums([next(more) for _ in range(count)]) if count else \
                [None] * width

    def type_perf(self, job_type: str, window: str, queue: str | None = None,
                  audit_markers: list[Marker] | None = None) -> TypePerf:
        """``job_type``'s figures over every window (summed over its queues, or ``queue``),
        the selected window's series per slot, and the deploys in it. The selected window
        reads its every slot (its series); the others their ``cover``."""
        now = self.clock()
        queues = tuple(sorted(self.queues_of(job_type, queue)))
        res, slots = self._slots(window, now)
        covers = {w: ([(res, s) for s in slots] if w == window else self._cover(w, now))
                  for w in WINDOWS}
        plan = sorted({s for cov in covers.values() for s in cov})
        per_slot: dict[tuple[str, int], _Sums] = {p: _Sums() for p in plan}
        for replies in self._read([(job_type, name) for name in queues], plan):
            for p, values in zip(plan, replies):
                per_slot[p].add_values(values)
        windows: dict[str, Figures] = {}
        for w, cov in covers.items():
            total = _Sums()
            for s in cov:
                _merge(total, per_slot[s])
            windows[w] = total.figures()
        series = [Point(s * SLOT_MS[res], x.runs, x.fail, percentile(x.dh, 0.95))
                  for s in slots for x in [per_slot[(res, s)]]]
        since = slots[0] * SLOT_MS[res] if slots else now
        markers = self.deploys(since) + [m for m in audit_markers or [] if m.t >= since]
        markers.sort(key=lambda m: m.t)
        return TypePerf(job_type, queues, window, windows, series, markers, now)

    def deploys(self, since_ms: int) -> list[Marker]:
        """Worker starts since ``since_ms`` with another code version than the start before
        them (the first start of the record counts as one)."""
        out, prev = [], None
        for start in WorkerRegistry(self.redis, self.clock).starts(0):
            version = str(start.get("version", ""))
            t = int(start.get("t", 0))
            if version != prev and t >= since_ms:
                out.append(Marker(t, "deploy", f"workers on {version or 'unknown code'} "
                                               f"(first: {start.get('id', '?')})"))
            prev = version
        return out


def _column_sums(rows: list[list[Any]]) -> list[int]:
    """The per-field sums of several slots' HMGET replies (missing or damaged values: 0)."""
    out = []
    for col in zip(*rows):
        try:
            out.append(sum(int(v) for v in col if v))
        except (TypeError, ValueError):
            out.append(sum(_num(v) for v in col))
    return out


def _merge(into: _Sums, other: _Sums) -> None:
    into.runs += other.runs
    into.fail += other.fail
    into.dsum += other.dsum
    into.wsum += other.wsum
    for i in range(len(BUCKET_NAMES)):
        into.dh[i] += other.dh[i]
        into.wh[i] += other.wh[i]


def fmt_ms(ms: float | None) -> str:
    """A duration for the page: '—' none, '7.5ms', '1.2s', '3m05s'."""
    if ms is None or math.isnan(ms):
        return "—"
    if ms < 1000:
        return f"{ms:.1f}ms" if ms < 100 else f"{ms:.0f}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
