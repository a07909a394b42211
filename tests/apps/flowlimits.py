"""A test app for flow limits held at reserve: ``tests.apps.flowlimits:app``.
``limited`` (concurrency 2) and ``solo`` (concurrency 1) count how many of them run at once in
Redis (``flow:now``; the highest seen in ``flow:peak``) and list their runs (``flow:runs``:
``<i>:<delivery>:<pid>``), so a test in another process sees them. A job with
``{"hold": true}`` waits on its first delivery until the test sets ``flow:go``."""

from __future__ import annotations

import os
import time

from antre import Antre, LimitPolicy

app = Antre()

PEAK = """local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n"""


def _run(ctx, payload) -> int:
    app.redis.eval(PEAK, 2, "flow:now", "flow:peak")
    app.redis.rpush("flow:runs", f"{payload['i']}:{ctx.job.deliveries}:{os.getpid()}")
    try:
        if payload.get("hold") and ctx.job.deliveries == 1:
            while not app.redis.exists("flow:go"):
                time.sleep(0.02)
        time.sleep(float(payload.get("work_s", 0.01)))
    finally:
        app.redis.decr("flow:now")
    return int(payload["i"])


@app.handler("limited", flow=LimitPolicy(concurrency=2), visibility_timeout_s=30)
def limited(ctx, payload):
    return _run(ctx, payload)


@app.handler("solo", flow=LimitPolicy(concurrency=1), visibility_timeout_s=30)
def solo(ctx, payload):
    return _run(ctx, payload)
