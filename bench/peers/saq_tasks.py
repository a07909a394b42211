"""saq: no-op task, worker settings and enqueue (runs in bench/.venvs/saq)."""
import asyncio
import os

from saq import Queue

from bench.lib import progress

queue = Queue.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


async def noop(ctx):
    progress.done()


settings = {"queue": queue, "functions": [noop], "concurrency": 10}


async def _enqueue(n: int) -> None:
    await queue.connect()
    for start in range(0, n, 500):
        await asyncio.gather(*[queue.enqueue("noop") for _ in range(min(500, n - start))])
    await queue.disconnect()


def enqueue(n: int) -> None:
    asyncio.run(_enqueue(n))


async def slow(ctx):
    progress.started()
    await asyncio.sleep(3)
    progress.done()


settings["functions"] = [noop, slow]


def enqueue_slow() -> None:
    async def go():
        await queue.connect()
        await queue.enqueue("slow")
        await queue.disconnect()
    asyncio.run(go())
