"""Dramatiq (Redis broker): no-op actor and enqueue (runs in bench/.venvs/dramatiq)."""
import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench import progress

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
