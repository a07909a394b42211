"""The PostgreSQL + lock row of ``bench/run`` ("defaults + idempotency (PostgreSQL) + lock per
job, 1 process"), with what each job costs on every side: the worker tree's CPU, the PostgreSQL
backends' CPU, the Redis server's CPU, transactions committed, rows written, Redis commands and
EVALSHAs, per job. Optionally a py-spy profile of the worker child (all threads).

    .venv/bin/python bench/experiments/pg_lock.py --jobs 3000 --reps 2
    .venv/bin/python bench/experiments/pg_lock.py --roots /tmp/base,.   # A/B: each tree's code, interleaved
    .venv/bin/python bench/experiments/pg_lock.py --profile /tmp/pg.txt  # py-spy (put it on PATH or --py-spy)
    .venv/bin/python bench/experiments/pg_lock.py --no-lock   # or --write: the neighbouring rows

Same worker, app and environment as ``bench/run``'s row (``antre worker bench.apps.noop:app``,
defaults, ``BENCH_DATABASE_URL`` + ``BENCH_LOCK``); the jobs go into a fresh schema of a
database of its own (``antre_pgb``, created when missing), so that database's
``pg_stat_database`` counters are this run's alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

import psutil
import redis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib import progress  # noqa: E402
from bench.lib.tree import code_path  # noqa: E402

DB = "antre_pgb"
STATS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted",
         "tup_fetched")


def admin(base: str) -> Any:
    import psycopg
    return psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://"),
                           autocommit=True, connect_timeout=5)


def ensure_db(base: str) -> str:
    """The URL of the bench's own database on ``base``'s server (created when missing)."""
    conn = admin(base)
    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,)).fetchone() is None:
        conn.execute(f'CREATE DATABASE "{DB}"')
    conn.close()
    return base.rsplit("/", 1)[0] + "/" + DB


def db_stats(conn: Any) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(f"SELECT {', '.join(STATS)} FROM pg_stat_database WHERE datname = %s",
                       (DB,)).fetchone()
    return dict(zip(STATS, (int(v) for v in row)))


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def code_env(root: str) -> str:
    """PYTHONPATH that runs ``root``'s code: the tree itself plus ``antre_worker`` and
    ``antre_web`` (installed from folders of other names) linked from a shim folder."""
    return code_path(root)


def child_of(pid: int) -> psutil.Process | None:
    for _ in range(100):
        for c in psutil.Process(pid).children(recursive=True):
            if "antre_worker.child" in " ".join(c.cmdline()):
                return c
        time.sleep(0.05)
    return None


def backend_cpu(conn: Any, app_name: str) -> tuple[float, list[int]]:
    pids = [r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app_name,))]
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total, pids


def run_once(url: str, base: str, root: str, n: int, profile: str | None = None,
             py_spy: str = "py-spy", lock: bool = True, write: bool = False) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    ab.fill(url, n, lock=lock)
    conn = admin(base)
    schema = f"antre_pgb_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    pg_url = f"{base}?options=-csearch_path%3D{schema}&application_name={schema}"
    env = ab._env(url, BENCH_DATABASE_URL=pg_url, BENCH_LOCK="1" if lock else None,
                  BENCH_WRITE="1" if write else None)
    env["PYTHONPATH"] = code_env(root)
    cmds0 = client.info("stats")["total_commands_processed"]
    calls0, rcpu0 = ab.commandstats(client), redis_cpu(client)
    stats0 = db_stats(conn)
    log_path = os.path.join("/tmp", f"pg_lock_worker_{os.getpid()}.log")
    spy = None
    with open(log_path, "wb") as log:
        p = subprocess.Popen([sys.executable, "-m", "antre_cli", "worker", ab.APP],
                             cwd=os.path.abspath(root), env=env, start_new_session=True,
                             stdout=log, stderr=log)
        cpu = ab.TreeCpu(p.pid)
        deadline = time.monotonic() + 300
        pg0: tuple[float, list[int]] | None = None
        while time.monotonic() < deadline:
            got = progress.read(client)
            if cpu.at_start is None and got[0] >= 1:
                cpu.start(got[0])
                pg0 = backend_cpu(conn, schema)
                if profile:
                    child = child_of(p.pid)
                    assert child is not None
                    spy = subprocess.Popen(
                        [py_spy, "record", "--pid", str(child.pid), "--rate", "1000", "--gil",
                         "--format", "raw", "--output", profile, "--nonblocking"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if got[0] >= n or p.poll() is not None:
                break
            time.sleep(0.05)
        got = progress.read(client)
        cpu_us = cpu.us_per_job(got[0])
        pg1 = backend_cpu(conn, schema)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(timeout=30)
        ab.stop([p])
    time.sleep(1.5)  # exited backends have flushed their counters
    stats1 = db_stats(conn)
    cmds1 = client.info("stats")["total_commands_processed"]
    calls1, rcpu1 = ab.commandstats(client), redis_cpu(client)
    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    conn.close()
    done = got[0]
    jobs_after_start = max(done - cpu.jobs_at_start, 1)
    pg_cpu = None
    if pg0 is not None:
        pg_cpu = round((pg1[0] - pg0[0]) / jobs_after_start * 1e6)
    secs = max(got[2] - got[1], 1e-9)
    out: dict[str, Any] = {
        "root": root, "done": done, "jobs_per_s": round((done - 1) / secs) if done > 1 else 0,
        "worker_cpu_us_per_job": cpu_us, "pg_backend_cpu_us_per_job": pg_cpu,
        "pg_backends": len(pg1[1]),
        "redis_cpu_us_per_job": round((rcpu1 - rcpu0) / n * 1e6, 1),
        "redis_commands_per_job": round((cmds1 - cmds0) / n, 2),
        "evalsha_per_job": round(sum(calls1.get(c, 0) - calls0.get(c, 0)
                                   for c in ("evalsha", "fcall")) / n, 3),  # script calls
    }
    for k in STATS:
        out[f"{k}_per_job"] = round((stats1[k] - stats0[k]) / n, 3)
    if done < n:
        with open(log_path, "rb") as f:
            out["error"] = f"only {done}/{n}: " + f.read()[-1500:].decode(errors="replace")
    client.close()
    return out


def summarize_profile(path: str, top: int = 40) -> str:
    """Inclusive and self samples per function from py-spy's collapsed stacks (all threads)."""
    incl: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            c = int(count)
            frames = stack.split(";")
            total += c
            for fr in set(frames):
                incl[fr] += c
            self_[frames[-1]] += c
    lines = [f"total samples {total}", "", "inclusive:"]
    lines += [f"{v / total * 100:6.1f}%  {k}" for k, v in incl.most_common(top)]
    lines += ["", "self:"]
    lines += [f"{v / total * 100:6.1f}%  {k}" for k, v in self_.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--roots", default=ROOT, help="comma-separated code trees, run interleaved")
    p.add_argument("--pg-url", default=os.environ.get("ANTRE_TEST_PG_URL", ab.PG_DEFAULT))
    p.add_argument("--profile", default=None, help="py-spy collapsed stacks go here")
    p.add_argument("--py-spy", default="py-spy")
    p.add_argument("--no-lock", action="store_true", help="the row without a lock per job")
    p.add_argument("--write", action="store_true", help="+ one row written through ctx.db")
    args = p.parse_args(argv)
    base = ensure_db(args.pg_url)
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        for rep in range(args.reps):
            for root in args.roots.split(","):
                r = run_once(server.url, base, root, args.jobs, args.profile, args.py_spy,
                             lock=not args.no_lock, write=args.write)
                print(rep, " ".join(f"{k}={v}" for k, v in r.items()), flush=True)
                if args.profile:
                    print(summarize_profile(args.profile))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
