"""arq: no-op task, worker settings and enqueue (runs in bench/.venvs/arq)."""
import asyncio
import os

from arq.connections import RedisSettings, create_pool

from bench.lib import progress

SETTINGS = RedisSettings.from_dsn(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


async def noop(ctx):
    progress.done()


class WorkerSettings:
    functions = [noop]
    redis_settings = SETTINGS
    max_jobs = 10          # arq's default concurrency
    keep_result = 60
    poll_delay = 0.01      # default 0.5 s: it would wait that long between batches
    handle_signals = True


async def _enqueue(n: int) -> None:
    pool = await create_pool(SETTINGS)
    for start in range(0, n, 500):
        await asyncio.gather(*[pool.enqueue_job("noop") for _ in range(min(500, n - start))])
    await pool.aclose()


def enqueue(n: int) -> None:
    asyncio.run(_enqueue(n))


async def slow(ctx):
    progress.started()
    await asyncio.sleep(3)
    progress.done()


WorkerSettings.functions = [noop, slow]


def enqueue_slow() -> None:
    async def go():
        pool = await create_pool(SETTINGS)
        await pool.enqueue_job("slow")
        await pool.aclose()
    asyncio.run(go())
