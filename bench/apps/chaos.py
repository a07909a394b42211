"""The app of ``bench/chaos``: each job's effect inserts one row per idempotency key into the
``chaos_ledger`` table through ``ctx.db`` (committed with the idempotency record).

The ledger has no unique constraint on purpose: a duplicate committed effect shows up as two
rows for one key. ``poison`` jobs kill their own worker process on every delivery.

Jobs that carry a ``lock_key`` run under that business lock (TTL ``CHAOS_LOCK_TTL_S``) and
write the lock key and their fencing token with the row.

Environment: ``BENCH_REDIS_URL``, ``BENCH_DATABASE_URL``, ``CHAOS_VT_S`` (lease length),
``CHAOS_WORK_MS`` (max random handler time), ``CHAOS_LOCK_TTL_S`` (business lock TTL).
"""

import os
import random
import signal
import time

from sqlalchemy import text

from antre import Antre

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"],
            database_url=os.environ["BENCH_DATABASE_URL"])
VT_S = float(os.environ.get("CHAOS_VT_S", "3"))
WORK_MS = float(os.environ.get("CHAOS_WORK_MS", "20"))
LOCK_TTL_S = float(os.environ.get("CHAOS_LOCK_TTL_S", "30"))


@app.handler("ledger", max_attempts=8, timeout_s=30, visibility_timeout_s=VT_S,
             max_deliveries=25, lock_ttl_s=LOCK_TTL_S)
def ledger(ctx, payload):
    if WORK_MS:
        time.sleep(random.random() * WORK_MS / 1000)
    locked = ctx.lock is not None
    ctx.db.execute(text("INSERT INTO chaos_ledger (idem_key, job_id, epoch, at, lock_key, fence) "
                        "VALUES (:k, :j, :e, :t, :l, :f)"),
                   {"k": ctx.job.idempotency_key, "j": ctx.job.id, "e": ctx.job.epoch,
                    "t": time.time(), "l": ctx.job.lock_key if locked else None,
                    "f": ctx.fence if locked else None})
    return {"k": ctx.job.idempotency_key}


@app.handler("poison", max_attempts=8, visibility_timeout_s=VT_S, max_deliveries=3)
def poison(ctx, payload):
    os.kill(os.getpid(), signal.SIGKILL)
