"""Celery (Redis broker, acks_late): no-op task and enqueue (runs in bench/.venvs/celery)."""
import os

from celery import Celery

from bench.lib import progress

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(task_acks_late=True, task_ignore_result=True, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True)


@app.task(ignore_result=True)
def noop():
    progress.done()


def enqueue(n: int) -> None:
    for _ in range(n):
        noop.delay()


@app.task(ignore_result=True)
def slow():
    import time
    progress.started()
    time.sleep(3)
    progress.done()


def enqueue_slow() -> None:
    slow.delay()
