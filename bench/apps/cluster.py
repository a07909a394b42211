"""The app of ``bench/cluster_scale`` and ``bench/cluster_chaos``: one queue on a Redis Cluster.

    python -m antre_worker worker bench.apps.cluster:app

``noop`` returns a small result (the scale run); ``effect`` inserts one row per delivery
that commits into ``cluster_effects`` through ``ctx.db`` (committed with the idempotency
record, as ``bench/apps/chaos.py`` does), so a duplicate committed effect shows as two rows for
one key (no unique constraint, on purpose).

Environment: ``BENCH_REDIS_URL`` (``redis://`` any node of the cluster), ``BENCH_PARTITIONS`` (the queue's
partition count, default 1), ``BENCH_DATABASE_URL`` (the idempotency store; none for the scale
run), ``BENCH_HOST`` (the host's name, written with each effect), ``CHAOS_VT_S`` (lease),
``CHAOS_WORK_MS`` (most random handler time).
"""

import inspect
import os
import random
import time

from redis.cluster import RedisCluster

from antre import Antre

URL = os.environ["BENCH_REDIS_URL"]
PARTITIONS = int(os.environ.get("BENCH_PARTITIONS") or 1)
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL") or None
HOST = os.environ.get("BENCH_HOST", "")
VT_S = float(os.environ.get("CHAOS_VT_S", "30"))
WORK_MS = float(os.environ.get("CHAOS_WORK_MS", "0"))


def make_app() -> Antre:
    """``Antre(redis_url="redis+cluster://...", partitions=N)`` where this tree has partitions;
    before they landed, a Redis Cluster client of our own and one partition."""
    if "partitions" in inspect.signature(Antre).parameters:
        return Antre(redis_url=URL.replace("redis://", "redis+cluster://", 1),
                     database_url=DATABASE_URL, partitions=PARTITIONS)
    if PARTITIONS != 1:
        raise SystemExit("BENCH_PARTITIONS > 1 needs a tree with Antre(partitions=N)")
    client = RedisCluster.from_url(URL, decode_responses=True, socket_timeout=10,
                                   socket_connect_timeout=5)
    return Antre(redis_url=URL, database_url=DATABASE_URL, redis_client=client)


app = make_app()


@app.handler("noop", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
def noop(ctx, payload):
    return {"ok": True, "i": payload["i"]}


if DATABASE_URL:
    from sqlalchemy import text

    INSERT = text("INSERT INTO cluster_effects (idem_key, job_id, epoch, host, at) "
                  "VALUES (:k, :j, :e, :h, :t)")


@app.handler("effect", max_attempts=10, timeout_s=30, visibility_timeout_s=VT_S,
             max_deliveries=50)
def effect(ctx, payload):
    if WORK_MS:
        time.sleep(random.random() * WORK_MS / 1000)
    ctx.db.execute(INSERT, {"k": ctx.job.idempotency_key, "j": ctx.job.id, "e": ctx.job.epoch,
                            "h": HOST, "t": time.time()})
    return {"k": ctx.job.idempotency_key}


def partitions(name: str = "default") -> list:
    """Every partition of the queue ``name`` (one ``Queue`` each; one before partitions)."""
    of = getattr(app, "partitions_of", None)
    return of(name).queues() if of is not None else [app.queue(name)]
