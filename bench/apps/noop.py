"""The Antre app of the no-op benchmarks: ``python -m antre_worker bench.apps.noop:app``.

Environment: ``BENCH_REDIS_URL``; ``BENCH_DATABASE_URL`` (an idempotency record per job when
set); ``BENCH_LOCK=1`` (jobs carry a lock_key; the worker takes the lock per job);
``BENCH_WRITE=1`` (the handler inserts one row through ``ctx.db``, committed with the record).
"""

import os

from antre import Antre
from bench.lib import progress

if os.environ.get("BENCH_COUNT_RTT"):
    progress.count_round_trips()

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"],
            database_url=os.environ.get("BENCH_DATABASE_URL") or None)


WRITE = bool(os.environ.get("BENCH_WRITE"))
if WRITE:
    from sqlalchemy import text
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS bench_effects (k VARCHAR(200) PRIMARY KEY)"))
    INSERT = text("INSERT INTO bench_effects (k) VALUES (:k)")


@app.handler("noop", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
def noop(ctx, payload):
    # the headline handler returns a small result, as a user's usually does (issue 29)
    if WRITE:
        ctx.db.execute(INSERT, {"k": ctx.job.idempotency_key})
    progress.done()
    return {"ok": True, "i": payload["i"]}


@app.handler("noop_none", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
def noop_none(ctx, payload):
    progress.done()  # returns None: bench/run's row "handler returning None"


@app.handler("latency", max_attempts=3)
def latency(ctx, payload):
    # enqueue-to-start: the producer put its wall clock in the payload
    import time

    import redis
    global _lat_client
    started = time.time()
    try:
        client = _lat_client
    except NameError:
        client = _lat_client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    client.rpush("bench:latency", f"{(started - payload['t']) * 1000:.3f}")


@app.handler("slow", max_attempts=3, visibility_timeout_s=5)
def slow(ctx, payload):
    import time
    progress.started()
    time.sleep(3)
    progress.done()


def enqueue(n):
    """``n`` no-op jobs, one ``app.enqueue`` each (the single-enqueue figure of bench/run,
    timed in blocks beside the peers' own ``enqueue(n)``: bench/lib/enqueue_paired.py)."""
    import uuid
    run = uuid.uuid4().hex[:8]
    for i in range(n):
        app.enqueue("noop", {"i": i}, idempotency_key=f"s:{run}:{i}")
