"""Samples of queue figures over time, for the dashboard's charts.

A sample is taken on a schedule by the worker pool (``take``) and stored per queue in the ZSET
``keys.QueueKeys(q).samples`` (score = ms, member = JSON). Kept ``RETENTION_MS``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import cast

import redis

from antre.engine import keys
from antre.clock import Clock, system_ms
from antre.observe.readmodels import ReadModels

RETENTION_MS = 48 * 3_600_000
COUNTERS = ("enqueued", "acked", "retried", "buried", "expired", "snoozed", "lock_busy",
            "deduplicated", "replayed", "discarded", "handed_back")


def take(client: "redis.Redis", clock: Clock = system_ms) -> int:
    """Record one sample per queue; returns the number of queues sampled."""
    reads = ReadModels(client, clock)
    now = clock()
    infos = [reads.queue_info(name) for name in reads.queue_names()]
    conflicts = int(client.zcount(keys.lock_conflict_times(), "-inf", "+inf"))
    pipe = client.pipeline(transaction=False)
    for info in infos:
        k = keys.QueueKeys(info.name)
        sample = {"t": now, "ready": info.ready, "scheduled": info.scheduled,
                  "inflight": info.inflight, "dead": info.dead,
                  "oldest_ready_age_ms": info.oldest_ready_age_ms,
                  "lock_conflicts_1h": conflicts,
                  **{c: info.stats.get(c, 0) for c in COUNTERS}}
        pipe.zadd(k.samples, {json.dumps(sample, separators=(",", ":")): now})
        pipe.zremrangebyscore(k.samples, "-inf", now - RETENTION_MS)
    pipe.execute()
    return len(infos)


def series(client: "redis.Redis", queue: str, since_ms: int, until_ms: int | None = None
           ) -> list[dict[str, int]]:
    """Samples of ``queue`` in a time window, oldest first."""
    raw = cast(list[str], client.zrangebyscore(keys.QueueKeys(queue).samples, since_ms,
                                               "+inf" if until_ms is None else until_ms))
    return [json.loads(m) for m in raw]


__all__ = ["take", "series", "RETENTION_MS", "COUNTERS", "asdict"]
