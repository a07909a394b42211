"""``status_summary``: the one read behind the overview page, ``GET /api/overview`` and
``antre status`` (a ``StatusSummary``). Every figure is an indexed read: a queue's counts, its
last 5 minutes of samples, the flow-control indexes, the lock-conflict timeline and buckets."""

from __future__ import annotations

import redis

from antre.observe import sampling
from antre.clock import Clock, system_ms
from antre.limits.admission import Limits
from antre.engine.locks import Locks
from antre.observe.readmodels import QueueRates, ReadModels, StatusSummary
from antre.observe.drain import DrainModel
from antre.observe.memory import memory_policy
from antre.observe.registry import WorkerInfo, WorkerRegistry, live_of

RATE_WINDOW_MS = 5 * 60_000
HOUR_MS = 3_600_000
CONTENDED_KEYS = 5


def rate_per_min(samples: list[dict[str, int]], name: str) -> float | None:
    """Growth of counter ``name`` per minute between the first and last sample."""
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    minutes = (last["t"] - first["t"]) / 60_000
    if minutes <= 0:
        return None
    return max(0, last.get(name, 0) - first.get(name, 0)) / minutes


def queue_rates(client: "redis.Redis", queue: str, now_ms: int) -> QueueRates:
    recent = sampling.series(client, queue, now_ms - RATE_WINDOW_MS)
    return QueueRates(*(rate_per_min(recent, c) for c in ("acked", "retried", "buried",
                                                           "expired")))


def status_summary(client: "redis.Redis", clock: Clock = system_ms, *,
                   locks: Locks | None = None,
                   workers: list[WorkerInfo] | None = None) -> StatusSummary:
    """``workers``: the registry's list when the caller read it already (``antre status``
    prints it), else it is read here."""
    overview = ReadModels(client, clock).overview()
    now = overview.as_of
    locks = locks or Locks(client, clock=clock)
    flow = Limits(client, clock)
    drain = DrainModel(client, clock)
    return StatusSummary(
        overview=overview,
        rates={q.name: queue_rates(client, q.name, now) for q in overview.queues},
        breakers=flow.breakers(), semaphores=flow.semaphores(),
        rate_limiters=flow.rate_limiters(),
        conflicts_5m=locks.conflicts_since(now - RATE_WINDOW_MS),
        conflicts_1h=locks.conflicts_since(now - HOUR_MS),
        conflicts_total=locks.conflicts_total(),
        contention=locks.contention(CONTENDED_KEYS),
        live_workers=len(live_of(workers, now) if workers is not None
                         else WorkerRegistry(client, clock=clock).live()),
        oldest_ready_ms=max((q.oldest_ready_age_ms for q in overview.queues), default=0),
        as_of=now, memory=memory_policy(client),
        drains={q.name: drain.queue(q) for q in overview.queues})


__all__ = ["status_summary", "queue_rates", "rate_per_min", "RATE_WINDOW_MS"]
