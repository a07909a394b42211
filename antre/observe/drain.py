"""Time to drain: how long a queue's backlog (a group's, a flow's) takes at the rate jobs have
been completing lately, with a range, and what N more workers would make of it.

A queue's **backlog** is its jobs that can run now or are running: ready (and parked), waiting
for their turn, in flight (not the scheduled ones: they run at their time). Its **completion
rate** is read off the samples the worker pool takes (``sampling.py``: the stats counters
``acked``, ``deduplicated`` and ``buried``, every job that left for good) over the last
``RECENT_MS``: the estimate is backlog / the rate over the whole span; its range comes from
the spread of the rate over ``WINDOWS`` equal windows of that span (the fastest window gives
the low end, the slowest the high end: ``None`` when a window completed nothing).

**More workers**: the rate is taken to grow linearly with the live worker processes serving
the queue (``rate / workers`` per worker, each new one as fast): an assumption that holds
while nothing else caps the throughput (a job type's or downstream's limit, a group's slots,
the database) and says nothing of a queue with no live worker.

A **group** drains its waiting jobs and the ones holding its slots at its share of the queue's
rate (its slots held over the queue's ready and in-flight jobs), at most its own rate when it
has one. A **flow** drains its members to go at the rate its members settled since it began.
"""

from __future__ import annotations

from typing import Any

import redis

from antre.clock import Clock, system_ms
from antre.flows.read import FlowRow
from antre.groups.read import GroupRow
from antre.engine.envelope import parse_rate
from antre.observe.readmodels import Drain, QueueInfo, ReadModels
from antre.observe.registry import WorkerRegistry
from antre.observe.sampling import series

RECENT_MS = 10 * 60_000  # the recent completion rate: over the last 10 minutes of samples
WINDOWS = 5  # its spread: the rate over each fifth of that span
COMPLETED = ("acked", "deduplicated", "buried")  # counters of jobs gone for good
MORE_WORKERS = (1, 2, 4)  # the "with N more workers" the pages show (Drain.more)


def _done(sample: dict[str, Any]) -> int:
    return sum(int(sample.get(c, 0) or 0) for c in COMPLETED)


def _rate(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    span = int(b["t"]) - int(a["t"])
    return max(0, _done(b) - _done(a)) * 1000 / span if span > 0 else None


def rates(samples: list[dict[str, Any]], windows: int = WINDOWS) -> tuple[float, list[float]]:
    """The completion rate (jobs/s) over ``samples`` (oldest first) and over each of ``windows``
    equal windows of their span (a window with fewer than two samples is skipped)."""
    if len(samples) < 2:
        return 0.0, []
    whole = _rate(samples[0], samples[-1]) or 0.0
    t0, t1 = int(samples[0]["t"]), int(samples[-1]["t"])
    step = (t1 - t0) / windows
    out = []
    for i in range(windows):
        lo, hi = t0 + i * step, t0 + (i + 1) * step
        inside = [s for s in samples if lo <= int(s["t"]) <= hi]
        if len(inside) >= 2:
            r = _rate(inside[0], inside[-1])
            if r is not None:
                out.append(r)
    return whole, out


def estimate(backlog: int, rate: float, spread: list[float], workers: int = 0,
             basis: str = "", sampled: bool = True) -> Drain:
    """``backlog`` at ``rate`` (jobs/s), its range from the window rates ``spread``."""
    if backlog <= 0:
        return Drain(0, rate, 0.0, 0.0, 0.0, workers, tuple((n, 0.0) for n in MORE_WORKERS)
                     if workers else (), basis, sampled)
    if rate <= 0:
        return Drain(backlog, 0.0, None, None, None, workers, (), basis, sampled)
    seconds = backlog / rate
    fastest, slowest = (max(spread), min(spread)) if spread else (rate, rate)
    low = backlog / max(fastest, rate)
    high = backlog / min(slowest, rate) if min(slowest, rate) > 0 else None
    more = tuple((n, seconds * workers / (workers + n)) for n in MORE_WORKERS) if workers else ()
    return Drain(backlog, rate, seconds, low, high, workers, more, basis, sampled)


def backlog_of(info: QueueInfo) -> int:
    return info.ready + info.waiting + info.inflight


class DrainModel:
    """Time to drain of queues, groups and flows (the overview, the Groups page, ``/metrics``,
    the incident rule)."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 recent_ms: int = RECENT_MS) -> None:
        self.redis = client
        self.clock = clock
        self.recent_ms = recent_ms
        self._workers: dict[str, int] | None = None

    def workers_of(self, queue: str) -> int:
        """Live worker processes serving ``queue`` (one registry read per model)."""
        if self._workers is None:
            counts: dict[str, int] = {}
            for w in WorkerRegistry(self.redis, self.clock).live():
                for q in w.queues:
                    counts[q] = counts.get(q, 0) + 1
            self._workers = counts
        return self._workers.get(queue, 0)

    def queue(self, info: QueueInfo) -> Drain:
        now = self.clock()
        samples = series(self.redis, info.name, now - self.recent_ms, now)
        whole, spread = rates(samples)
        return estimate(backlog_of(info), whole, spread, self.workers_of(info.name),
                        f"{len(spread)} windows of the last {self.recent_ms // 60_000} min",
                        len(samples) >= 2)

    def group(self, info: QueueInfo, queue_drain: Drain, row: GroupRow) -> Drain:
        """``row``'s waiting jobs and those holding its slots at its share of the queue's
        rate (``queue_drain``), capped by its own rate."""
        backlog = row.waiting + row.slots_held
        running = max(1, info.ready + info.inflight)
        share = min(1.0, row.slots_held / running) if row.slots_held else 0.0
        rate = queue_drain.rate * share
        basis = f"its share ({share:.0%}) of the queue's rate"
        if row.rate:
            try:
                count, window_ms = parse_rate(row.rate)
                cap = count * 1000 / window_ms
            except ValueError:  # (InvalidJob: a rate the page shows as given)
                cap = 0.0
            if cap and (rate <= 0 or cap < rate):
                rate, basis = cap, f"its rate {row.rate}"
        factor = rate / queue_drain.rate if queue_drain.rate > 0 else 0.0
        spread: list[float] = []
        if queue_drain.seconds and queue_drain.low_s and queue_drain.rate > 0:
            # the queue's spread, scaled to the group's rate
            fastest = queue_drain.backlog / queue_drain.low_s * factor
            spread.append(fastest)
            if queue_drain.high_s:
                spread.append(queue_drain.backlog / queue_drain.high_s * factor)
            else:
                spread.append(0.0)
        return estimate(backlog, rate, spread, queue_drain.workers, basis)

    def groups(self, queue: str, rows: list[GroupRow]) -> dict[str, Drain]:
        """Each group's of ``rows`` (the Groups page's), with one read of the queue's."""
        info = ReadModels(self.redis, self.clock).queue_info(queue)
        whole = self.queue(info)
        return {r.name: self.group(info, whole, r) for r in rows}

    def flow(self, row: FlowRow) -> Drain:
        """A flow's members to go at the rate its members settled since it began."""
        now = self.clock()
        settled = max(0, row.total - row.pending)
        span_s = max(0.001, (now - row.created_at) / 1000) if row.created_at else 0.0
        rate = settled / span_s if span_s else 0.0
        return estimate(row.to_go, rate, [], 0, "its members' rate since it began")


__all__ = ["COMPLETED", "Drain", "DrainModel", "MORE_WORKERS", "RECENT_MS", "WINDOWS",
           "backlog_of", "estimate", "rates"]
