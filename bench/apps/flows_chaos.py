"""The app of ``bench/flows_chaos`` (issue 26): chords of ``fchild`` jobs closed by one ``fclose``
callback, each committing its effect in SQL through ``ctx.db`` (with the idempotency record, as
shipped).

- ``fchild`` inserts one row into ``flow_child`` (flow id, its idempotency key) and returns
  ``{"i": its index}``; with ``FLOWS_CHAOS_FAIL`` (a fraction) its first attempt fails now and
  then with a retryable error (retries inside a flow).
- ``fclose``, the chord's callback, inserts one row into ``flow_callback`` keyed by the flow id,
  with what it saw: how many results it got, whether they came in the group's order, and how
  many of its flow's children's rows were committed when it ran (read in its own transaction).

Neither table has a unique constraint on purpose: a callback that ran twice shows up as two
rows for one flow, a child that ran twice as two rows for one key.

Environment: ``BENCH_REDIS_URL``, ``BENCH_DATABASE_URL``, ``CHAOS_VT_S`` (lease length),
``CHAOS_WORK_MS`` (max random handler time), ``FLOWS_CHAOS_FAIL``.
"""

import os
import random
import time

from sqlalchemy import text

from antre import Antre, Retryable

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"],
            database_url=os.environ["BENCH_DATABASE_URL"])
VT_S = float(os.environ.get("CHAOS_VT_S", "3"))
WORK_MS = float(os.environ.get("CHAOS_WORK_MS", "10"))
FAIL = float(os.environ.get("FLOWS_CHAOS_FAIL", "0.02"))

SCHEMA = (
    "CREATE TABLE flow_child (id INTEGER PRIMARY KEY, flow_id TEXT NOT NULL, "
    "idem_key TEXT NOT NULL, job_id TEXT, at REAL)",
    "CREATE TABLE flow_callback (id INTEGER PRIMARY KEY, flow_id TEXT NOT NULL, job_id TEXT, "
    "results_seen INT, in_order INT, children_committed INT, at REAL)",
)


@app.handler("fchild", max_attempts=10, timeout_s=30, visibility_timeout_s=VT_S,
             max_deliveries=50)
def fchild(ctx, payload):
    if WORK_MS:
        time.sleep(random.random() * WORK_MS / 1000)
    if FAIL and ctx.job.attempt <= 1 and random.random() < FAIL:
        raise Retryable("injected: the ledger service answered 503")
    ctx.db.execute(text("INSERT INTO flow_child (flow_id, idem_key, job_id, at) "
                        "VALUES (:f, :k, :j, :t)"),
                   {"f": ctx.flow_id, "k": ctx.job.idempotency_key, "j": ctx.job.id,
                    "t": time.time()})
    return {"i": payload["i"]}


@app.handler("fclose", max_attempts=10, timeout_s=30, visibility_timeout_s=VT_S,
             max_deliveries=50)
def fclose(ctx, payload):
    results = list(ctx.flow_results)
    in_order = all(isinstance(r, dict) and r.get("i") == n for n, r in enumerate(results))
    committed = ctx.db.execute(text("SELECT count(DISTINCT idem_key) FROM flow_child "
                                    "WHERE flow_id = :f"), {"f": ctx.flow_id}).scalar()
    ctx.db.execute(text("INSERT INTO flow_callback (flow_id, job_id, results_seen, in_order, "
                        "children_committed, at) VALUES (:f, :j, :n, :o, :c, :t)"),
                   {"f": ctx.flow_id, "j": ctx.job.id, "n": len(results), "o": int(in_order),
                    "c": int(committed or 0), "t": time.time()})
    return {"closed": ctx.flow_id, "results": len(results)}
