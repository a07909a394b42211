"""A test app for per-key turns: ``tests.apps.turns:app``. The ``step`` handler
records its start and end in Redis (``turns:runs``: ``<i>:start|end:<delivery>:<pid>``) so a
test in another process sees the order, and a run that overlaps another. A job with
``{"hold": true}`` waits on its first delivery until the test sets ``turns:go`` (killed,
stopped or let go meanwhile). Its lock TTL is short, so a lock left by a killed worker expires
within a second (the next holder snoozes on it until then, saying why)."""

from __future__ import annotations

import os
import time

from antre import Antre

app = Antre()


def _mark(ctx, payload, what: str) -> None:
    app.redis.rpush("turns:runs", f"{payload['i']}:{what}:{ctx.job.deliveries}:{os.getpid()}")


@app.handler("step", lock_ttl_s=1.0, visibility_timeout_s=30)
def step(ctx, payload):
    _mark(ctx, payload, "start")
    if payload.get("hold") and ctx.job.deliveries == 1:
        while not app.redis.exists("turns:go"):
            time.sleep(0.02)
    time.sleep(float(payload.get("work_s", 0.01)))
    _mark(ctx, payload, "end")
    return payload["i"]
