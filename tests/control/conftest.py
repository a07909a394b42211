"""The operator's controls act on a ``Queue`` directly: ``q`` is the queue "jobs" on the test
Redis, on the shared manual ``clock``; ``populated`` is that queue holding jobs in every state
(ready, scheduled, in flight, dead, done), their ids by state."""

from __future__ import annotations

import pytest
import redis

from antre.clock import ManualClock
from antre.engine.queue import Queue


@pytest.fixture
def q(r: redis.Redis, clock: ManualClock) -> Queue:
    return Queue(r, "jobs", clock=clock)


@pytest.fixture
def populated(q: Queue, clock: ManualClock) -> dict[str, list[str]]:
    """Two jobs in each state of queue "jobs" (type ``t``, payload ``{"i": n}``)."""
    def add(n: int, **kw: object) -> str:
        return q.enqueue("t", {"i": n}, idempotency_key=f"populated:{n}", **kw)  # type: ignore[arg-type]
    ids: dict[str, list[str]] = {"done": [add(0), add(1)]}
    for job in q.reserve("w-populated", 2):
        q.ack(job)
    ids["dead"] = [add(2), add(3)]
    for job in q.reserve("w-populated", 2):
        q.bury(job, reason="permanent failure", error="boom")
    ids["inflight"] = [add(4), add(5)]
    q.reserve("w-populated", 2)
    ids["scheduled"] = [add(6, delay_s=3600), add(7, delay_s=3600)]
    ids["ready"] = [add(8), add(9)]
    return ids
