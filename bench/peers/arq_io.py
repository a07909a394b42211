"""arq, I/O-bound: each job awaits 50 ms; max_jobs raised (default 10) as its docs advise for
I/O-bound work (runs in bench/.venvs/arq)."""
import asyncio
import os

from arq.connections import RedisSettings, create_pool

from bench.lib import progress

SETTINGS = RedisSettings.from_dsn(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "500"))


async def io_wait(ctx):
    await asyncio.sleep(0.05)
    progress.done()


class WorkerSettings:
    functions = [io_wait]
    redis_settings = SETTINGS
    max_jobs = CONCURRENCY
    keep_result = 60
    poll_delay = 0.01      # default 0.5 s
    handle_signals = True


async def _enqueue(n: int) -> None:
    pool = await create_pool(SETTINGS)
    for start in range(0, n, 500):
        await asyncio.gather(*[pool.enqueue_job("io_wait") for _ in range(min(500, n - start))])
    await pool.aclose()


def enqueue(n: int) -> None:
    asyncio.run(_enqueue(n))
