"""The Antre app of the I/O-bound benchmark (``bench/io_bound.py``): each job waits 50 ms, the
sync handler in ``time.sleep`` (one worker thread per job in flight), the async one in
``asyncio.sleep`` (many in flight on the worker's event loop)."""

import asyncio
import os
import time

from antre import Antre
from bench.lib import progress

WAIT_S = float(os.environ.get("BENCH_WAIT_S", "0.05"))

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"])


@app.handler("io_sync", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
def io_sync(ctx, payload):
    time.sleep(WAIT_S)
    progress.done()


@app.handler("io_async", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
async def io_async(ctx, payload):
    await asyncio.sleep(WAIT_S)
    progress.done()
