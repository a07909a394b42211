"""Per-key scheduling acts on a ``Queue`` directly: ``q`` is the queue "jobs" on the test Redis,
on the shared manual ``clock``."""

from __future__ import annotations

import pytest
import redis

from antre.clock import ManualClock
from antre.engine.queue import Queue


@pytest.fixture
def q(r: redis.Redis, clock: ManualClock) -> Queue:
    return Queue(r, "jobs", clock=clock)
