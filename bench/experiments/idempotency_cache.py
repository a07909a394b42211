"""Does the in-process TTL cache of completed keys help? ``IdempotencyStore.begin`` for keys
that are already completed (the duplicate-delivery path), with and without ``CompletedCache``,
on SQLite and PostgreSQL.

    python3 bench/experiments/idempotency_cache.py [--keys 2000] [--pg postgresql+psycopg://postgres@127.0.0.1:5432/test]

Writes bench/experiments/idempotency-cache.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from sqlalchemy import text

from antre.stores import sql
from antre.stores.idempotency import CompletedCache, IdempotencyStore, fingerprint


def setup(url: str, n: int) -> tuple[IdempotencyStore, list[str]]:
    engine = sql.make_engine(url)
    sql.migrate(engine)
    factory = sql.session_factory(engine)
    store = IdempotencyStore(factory)
    keys = [f"bench:{i}" for i in range(n)]
    fp = fingerprint("t", {})
    for i, key in enumerate(keys):
        store.begin(key, fp, "t", f"job{i}", 1, "w", 10**13)
        with factory() as s:
            store.complete(s, key, 1, {"ok": i}, job_id=f"job{i}")
            s.commit()
    return store, keys


def rate(store: IdempotencyStore, keys: list[str], rounds: int) -> float:
    fp = fingerprint("t", {})
    t0 = time.perf_counter()
    for _ in range(rounds):
        for i, key in enumerate(keys):
            assert store.begin(key, fp, "t", f"dup{i}", 1, "w", 10**13).outcome == "completed"
    return rounds * len(keys) / (time.perf_counter() - t0)


def measure(url: str, n: int) -> tuple[float, float]:
    store, keys = setup(url, n)
    plain = rate(store, keys, 2)
    store.cache = CompletedCache(ttl_ms=600_000, max_entries=n * 2)
    rate(store, keys, 1)  # warm
    cached = rate(store, keys, 2)
    return plain, cached


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--pg", default=os.environ.get(
        "ANTRE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
    args = ap.parse_args()
    rows = []
    rows.append(("SQLite (file, WAL)", *measure(f"sqlite:///{tempfile.mkdtemp()}/i.db", args.keys)))
    schema = "bench_" + uuid.uuid4().hex[:8]
    admin = sql.make_engine(args.pg)
    try:
        with admin.begin() as c:
            c.execute(text(f"CREATE SCHEMA {schema}"))
        rows.append(("PostgreSQL 15 (loopback)",
                     *measure(f"{args.pg}?options=-csearch_path%3D{schema}", args.keys)))
    except Exception as exc:  # noqa: BLE001 - report what could be measured
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
    finally:
        try:
            with admin.begin() as c:
                c.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        except Exception:  # noqa: BLE001
            pass
    lines = ["# Idempotency: does the in-process cache of completed keys help?", "",
             f"`IdempotencyStore.begin` on {args.keys} keys that are already completed (the "
             "duplicate-delivery path), one thread. Command: "
             f"`python3 bench/experiments/idempotency_cache.py --keys {args.keys}`", "",
             "| database | without cache (begins/s) | with cache (begins/s) | speed-up |",
             "|---|---:|---:|---:|"]
    for name, plain, cached in rows:
        lines.append(f"| {name} | {plain:,.0f} | {cached:,.0f} | {cached / plain:.0f}x |")
        print(f"{name}: {plain:,.0f}/s without, {cached:,.0f}/s with the cache")
    lines += ["", "The cache only answers 'completed' for keys it saw complete in this process; "
              "anything else goes to the database, which stays the source of truth. It helps "
              "duplicate-heavy workloads (redeliveries, producers re-sending); for first "
              "deliveries it changes nothing."]
    with open(os.path.join(ROOT, "bench", "experiments", "idempotency-cache.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
