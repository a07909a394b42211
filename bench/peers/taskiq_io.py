"""taskiq with its Redis broker (taskiq-redis ListQueueBroker), I/O-bound: each task awaits
50 ms; the worker's --max-async-tasks raised (runs in bench/.venvs/taskiq)."""
import asyncio
import os

from taskiq_redis import ListQueueBroker

from bench.lib import progress

broker = ListQueueBroker(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


@broker.task
async def io_wait() -> None:
    await asyncio.sleep(0.05)
    progress.done()


async def _enqueue(n: int) -> None:
    await broker.startup()
    for start in range(0, n, 500):
        await asyncio.gather(*[io_wait.kiq() for _ in range(min(500, n - start))])
    await broker.shutdown()


def enqueue(n: int) -> None:
    asyncio.run(_enqueue(n))
