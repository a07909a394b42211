"""Bulk operations on the dead-letter queue as tracked, paced tasks (state in Redis).

The dashboard, the API and the CLI create tasks; the worker pool's scheduler calls
``BulkReplays.step_all()`` every second, which replays at most ``rate`` jobs per second of
each running task until its ``maximum`` or the end of its filter. (Implemented by the webapp
work; the worker only calls ``step_all``.)
"""

from __future__ import annotations

import redis

from .clock import Clock, system_ms


class BulkReplays:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock

    def step_all(self) -> int:
        """Advance every running task; returns jobs replayed in this step."""
        return 0
