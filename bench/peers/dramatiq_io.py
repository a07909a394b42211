"""Dramatiq (Redis broker), I/O-bound: each job sleeps 50 ms in one of many worker threads
(runs in bench/.venvs/dramatiq)."""
import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.lib import progress

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=0)
def io_wait():
    time.sleep(0.05)
    progress.done()


def enqueue(n: int) -> None:
    for _ in range(n):
        io_wait.send()
