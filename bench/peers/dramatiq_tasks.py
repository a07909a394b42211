"""Dramatiq (Redis broker): no-op actor and enqueue (runs in bench/.venvs/dramatiq)."""
import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.lib import progress

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=0)
def noop():
    progress.done()


def enqueue(n: int) -> None:
    for _ in range(n):
        noop.send()


@dramatiq.actor(max_retries=3)
def slow():
    import time
    progress.started()
    time.sleep(3)
    progress.done()


def enqueue_slow() -> None:
    slow.send()


_latency_client = None


@dramatiq.actor(max_retries=0)
def latency(sent_at):
    """Enqueue-to-start: the producer put its wall clock in the message."""
    import time

    import redis
    global _latency_client
    started = time.time()
    if _latency_client is None:
        _latency_client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    _latency_client.rpush("bench:latency", f"{(started - sent_at) * 1000:.3f}")


def send_latency() -> None:
    import time
    latency.send(time.time())
