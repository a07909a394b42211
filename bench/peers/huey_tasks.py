"""Huey (RedisHuey): no-op task and enqueue (runs in bench/.venvs/huey)."""
import os

from huey import RedisHuey

from bench import progress

huey = RedisHuey("bench", url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
                 results=False)


@huey.task()
def noop():
    progress.done()


def enqueue(n: int) -> None:
    for _ in range(n):
        noop()


@huey.task()
def slow():
    import time
    progress.started()
    time.sleep(3)
    progress.done()


def enqueue_slow() -> None:
    slow()
