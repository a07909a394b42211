"""saq, I/O-bound: each job awaits 50 ms; concurrency raised (default 10) (runs in
bench/.venvs/saq)."""
import asyncio
import os

from redis import asyncio as aioredis
from saq.queue.redis import RedisQueue

from bench.lib import progress

CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "500"))
# each of saq's worker slots dequeues on a connection of its own: the pool must be larger
# than the concurrency (redis-py's default pool refuses with "Too many connections")
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
queue = RedisQueue(aioredis.from_url(URL, max_connections=CONCURRENCY + 100))


async def io_wait(ctx):
    await asyncio.sleep(0.05)
    progress.done()


settings = {"queue": queue, "functions": [io_wait], "concurrency": CONCURRENCY}


async def _enqueue(n: int) -> None:
    await queue.connect()
    for start in range(0, n, 500):
        await asyncio.gather(*[queue.enqueue("io_wait") for _ in range(min(500, n - start))])
    await queue.disconnect()


def enqueue(n: int) -> None:
    asyncio.run(_enqueue(n))
