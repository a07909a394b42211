"""taskiq with taskiq-redis's RedisStreamBroker (a Redis stream and a consumer group; a message
is acknowledged after the task ran, so a killed worker's message stays pending): no-op task,
enqueue, the slow task of the kill -9 check and the latency probe (runs in
bench/.venvs/taskiq). The consumer group starts at '$' (the broker's default), so every
producer calls ``broker.startup()`` first: that declares the group before anything is sent."""
import asyncio
import os
import time

from taskiq_redis import RedisStreamBroker

from bench.lib import progress

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
broker = RedisStreamBroker(URL)


@broker.task
async def noop() -> None:
    progress.done()


@broker.task
async def slow() -> None:
    progress.started()
    await asyncio.sleep(3)
    progress.done()


_latency_client = None


@broker.task
async def latency(sent_at: float) -> None:
    """Enqueue-to-start: the producer put its wall clock in the message."""
    import redis
    global _latency_client
    started = time.time()
    if _latency_client is None:
        _latency_client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    _latency_client.rpush("bench:latency", f"{(started - sent_at) * 1000:.3f}")


def _run(coro_fn) -> None:
    async def go() -> None:
        await broker.startup()
        try:
            await coro_fn()
        finally:
            await broker.shutdown()
    asyncio.run(go())


def enqueue(n: int) -> None:
    async def send() -> None:
        for _ in range(n):
            await noop.kiq()  # one job per call, as a producer sends one
    _run(send)


def enqueue_slow() -> None:
    _run(lambda: slow.kiq())


_loop = None


def send_latency() -> None:
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        _loop.run_until_complete(broker.startup())
    _loop.run_until_complete(latency.kiq(time.time()))
