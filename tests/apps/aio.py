"""A test app with async handlers: ``tests.apps.aio:app``. Handlers record what they did in
Redis so a test in another process can see it."""

from __future__ import annotations

import asyncio
import os

from antre import Antre

app = Antre()


def _mark(ctx, what: str) -> None:
    app.redis.rpush(f"test:{what}", f"{ctx.job.id}:{ctx.job.deliveries}:{os.getpid()}")


@app.handler("hang_first_async", visibility_timeout_s=30)
async def hang_first_async(ctx, payload):
    """Hangs on its first delivery (the test kills the process); finishes on the next."""
    _mark(ctx, "started")
    if ctx.job.deliveries == 1:
        await asyncio.sleep(60)
    _mark(ctx, "done")
    return {"deliveries": ctx.job.deliveries}


@app.handler("slow_async")
async def slow_async(ctx, payload):
    _mark(ctx, "started")
    await asyncio.sleep(float(payload.get("seconds", 30)))
    _mark(ctx, "done")
    return "slept"
