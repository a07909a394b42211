"""RQ: no-op task and bulk enqueue (runs in bench/.venvs/rq)."""
import os

from bench.lib import progress


def noop():
    progress.done()


def enqueue(n: int) -> None:
    from redis import Redis
    from rq import Queue
    from rq_tasks import noop as task  # by its importable name, not __main__
    q = Queue("bench", connection=Redis.from_url(os.environ["BENCH_REDIS_URL"]))
    for start in range(0, n, 1000):
        with q.connection.pipeline() as pipe:
            q.enqueue_many([Queue.prepare_data(task, result_ttl=600)
                            for _ in range(min(1000, n - start))], pipeline=pipe)
            pipe.execute()

def slow():
    progress.started()
    import time
    time.sleep(3)
    progress.done()


def enqueue_slow() -> None:
    from redis import Redis
    from rq import Queue

    from rq_tasks import slow as task
    Queue("bench", connection=Redis.from_url(os.environ["BENCH_REDIS_URL"])).enqueue(task)
