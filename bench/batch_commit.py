"""The PostgreSQL rows of ``bench/run`` whose handler writes one row through ``ctx.db``, with
the batch's shared transaction (as shipped) and with a transaction per job
(``ANTRE_DB_COMMIT_WINDOW_MS=0``) taking turns, beside pgbench's single-row commit rate
measured in the same run; PostgreSQL commits per job counted on a database of their own
(``pg_stat_database.xact_commit`` delta / jobs).

    .venv/bin/python bench/batch_commit.py [--jobs 5000] [--reps 2] [--pgbench-s 5]

Writes bench/results/batch-commit.json and .md (bench/results/batch-commit-notes.md, written
by hand, appended).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402

DB = "antre_bench_batch"
ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
BASE = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB}"


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def ensure_db() -> None:
    with psycopg.connect(ADMIN, autocommit=True) as c:
        if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,)).fetchone() is None:
            c.execute(f'CREATE DATABASE "{DB}"')


def commits() -> int:
    with psycopg.connect(ADMIN, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        row = c.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                        (DB,)).fetchone()
        return int(row[0])


def pgbench(seconds: int) -> float:
    """Single-row inserts, one client, synchronous_commit as configured: commits/s."""
    libpq = ["-h", "127.0.0.1", "-U", "postgres"]
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{DB}", autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS pgbench_one (id BIGSERIAL PRIMARY KEY, v INT)")
    script = os.path.join(HERE, "out", "pgbench-one.sql")
    os.makedirs(os.path.dirname(script), exist_ok=True)
    with open(script, "w") as f:
        f.write("INSERT INTO pgbench_one (v) VALUES (1);\n")
    out = subprocess.run(["pgbench", *libpq, "-n", "-c", "1", "-T", str(seconds), "-f", script,
                          DB], capture_output=True, text=True, check=True).stdout
    m = re.search(r"tps = ([\d.]+)", out)
    return float(m.group(1)) if m else 0.0


def sync_commit() -> str:
    with psycopg.connect(ADMIN, autocommit=True) as c:
        return str(c.execute("SHOW synchronous_commit").fetchone()[0])


def run_one(url: str, n: int, lock: bool, window: str | None) -> dict[str, Any]:
    pg, drop = ab.pg_schema_url(BASE)
    try:
        before = commits()
        got = ab.worker_run(url, n, database_url=pg, lock=lock, write=True,
                            env={"ANTRE_DB_COMMIT_WINDOW_MS": window})
        time.sleep(0.6)  # the statistics collector's flush (PGSTAT_MIN_INTERVAL 500 ms)
        got["commits_per_job"] = round((commits() - before) / n, 3)
        return got
    finally:
        drop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--pgbench-s", type=int, default=5)
    p.add_argument("--render-only", action="store_true", help="rewrite the .md from the .json")
    args = p.parse_args()
    out = os.path.join(HERE, "results", "batch-commit.json")
    if args.render_only:
        with open(out) as f, open(out[:-4] + "md", "w") as md:
            md.write(render(json.load(f)))
        return 0
    ensure_db()
    started = time.time()
    res: dict[str, Any] = {
        "command": "bench/batch_commit.py " + " ".join(sys.argv[1:]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(), "cpus": os.cpu_count(), "load_at_start": list(os.getloadavg()),
        "synchronous_commit": sync_commit(), "jobs": args.jobs, "reps": args.reps}
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    url = server.url
    configs = [("ctx.db row", False), ("ctx.db row + lock per job", True)]
    sides = [("before: a transaction per job (ANTRE_DB_COMMIT_WINDOW_MS=0)", "0"),
             ("after: the batch's shared transaction (defaults, window 10 ms)", None),
             ("after, ANTRE_DB_COMMIT_WINDOW_MS=25", "25")]
    runs: dict[str, list[dict[str, Any]]] = {}
    pgb: list[float] = []
    try:
        for rep in range(args.reps):
            pgb.append(pgbench(args.pgbench_s))
            ab.log(f"pgbench {pgb[-1]:.0f} commits/s")
            for name, lock in configs:
                order = sides if rep % 2 == 0 else list(reversed(sides))
                for side, window in order:
                    key = f"{name} | {side}"
                    got = run_one(url, args.jobs, lock, window)
                    ab.log(f"{key}: {got.get('jobs_per_s')} jobs/s, "
                           f"{got['commits_per_job']} commits/job")
                    runs.setdefault(key, []).append(got)
        pgb.append(pgbench(args.pgbench_s))
    finally:
        server.stop()
    res["pgbench_single_row_commits_per_s"] = pgb
    res["load_at_end"] = list(os.getloadavg())
    res["seconds"] = round(time.time() - started, 1)
    res["runs"] = runs
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    with open(out[:-4] + "md", "w") as f:
        f.write(render(res))
    print(render(res))
    return 0


def render(res: dict[str, Any]) -> str:
    lines = [
        "# ctx.db writers: the batch's shared transaction vs a transaction per job",
        "",
        f"Generated by `{res['command']}` on {res['date']} in {res['seconds']} s.",
        "",
        f"- CPU: {res['cpus']} x {res['cpu']}; load average at start {res['load_at_start']}, "
        f"at end {res['load_at_end']} (other engineers' work shares the machine: compare "
        "within this run only)",
        f"- PostgreSQL 127.0.0.1:5432, synchronous_commit={res['synchronous_commit']}; pgbench, "
        f"one client, single-row INSERT: "
        f"{', '.join(f'{x:,.0f}' for x in res['pgbench_single_row_commits_per_s'])} commits/s "
        "(before, between and after the rounds)",
        f"- {res['jobs']:,} jobs per run, {res['reps']} runs per row taking turns (the order "
        "reversed every other round); `antre worker bench.apps.noop:app` with BENCH_WRITE=1 "
        "(one row "
        "inserted through ctx.db) and an idempotency record per job, 1 process x 4 threads, "
        "defaults otherwise (`bench/lib/antre_bench.py` worker_run, as `bench/run` runs it)",
        "- commits/job: `pg_stat_database.xact_commit` delta of a database of its own / jobs "
        "(claims, completions, effects, schema set-up)",
        "",
        "| handler | transaction | jobs/s (median) | runs | commits/job | worker CPU µs/job |",
        "|---|---|---:|---|---:|---:|",
    ]
    for key, got in res["runs"].items():
        rates = [g.get("jobs_per_s") or 0 for g in got]
        lines.append(f"| {key} | {statistics.median(rates):,.0f} | {rates} | "
                     f"{round(statistics.median(g['commits_per_job'] for g in got), 3)} | "
                     f"{statistics.median(g.get('worker_cpu_us_per_job') or 0 for g in got):.0f}"
                     " |")
    notes = os.path.join(HERE, "results", "batch-commit-notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            lines += ["", f.read().rstrip()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
