"""A test app for flows: ``tests.apps.flows:app``. ``part`` records each run in
Redis (``flows:runs``: ``<i>:<delivery>:<pid>``) and returns ``i * 10``; one with
``{"hold": true}`` waits on its first delivery until the test sets ``flows:go`` (killed
meanwhile). ``collect``, a chord's callback, counts its runs (``flows:callback_runs``) and keeps
the results it was handed (``flows:callback_got``)."""

from __future__ import annotations

import json
import os
import time

from antre import Antre

app = Antre()


@app.handler("part", visibility_timeout_s=30)
def part(ctx, payload):
    app.redis.rpush("flows:runs", f"{payload['i']}:{ctx.job.deliveries}:{os.getpid()}")
    if payload.get("hold") and ctx.job.deliveries == 1:
        while not app.redis.exists("flows:go"):
            time.sleep(0.02)
    return payload["i"] * 10


@app.handler("collect")
def collect(ctx, payload):
    app.redis.incr("flows:callback_runs")
    app.redis.set("flows:callback_got", json.dumps(ctx.flow_results))
    return sum(ctx.flow_results)
