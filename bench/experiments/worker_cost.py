"""The worker's cost per no-op job, A/B between two source trees (issue 14: "fast as shipped").

    python bench/experiments/worker_cost.py --tree base=DIR --tree new=. \
        [--jobs 20000] [--rounds 3] [--processes 1] [--env ANTRE_LOG_LEVEL=WARNING]

Each ``--tree`` is a checkout (``git worktree add --detach DIR REV``) or a directory whose
``antre``, ``antre_worker``, ``antre_cli`` and ``bench`` import the tree to measure (symlinks,
for a revision older than the ``webapp/antre_web`` and ``worker/antre_worker`` folders); the
worker runs as ``python -m antre_cli worker bench.apps.noop:app`` with that directory as its
working directory and its code on ``PYTHONPATH`` (``bench/lib/tree.py``), the default
environment otherwise. The trees run interleaved
(a, b, a, b, ...) on one private Redis; every run first fills ``--jobs`` jobs with
``app.enqueue_many`` (this checkout's producer, the same for both), then starts the worker.

Measured between the first job done and the last (so the fill and the start-up are left out):
the worker tree's CPU µs per job (psutil, every process of the pool), the Redis server's CPU µs
per job (``INFO cpu`` used_cpu_user + used_cpu_sys), Redis commands per job (``INFO stats``
total_commands_processed, commands inside Lua included), EVALSHA per job, and jobs/s (noisy on
a shared machine: compare the CPU figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib import progress  # noqa: E402
from bench.lib.tree import code_path  # noqa: E402


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _snap(client: redis.Redis, cpu: ab.TreeCpu) -> tuple[float, float, int, int, int]:
    stats = client.info("stats")
    evalsha = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    return (cpu.total(), _redis_cpu(client), int(stats["total_commands_processed"]), evalsha,
            progress.read(client)[0])


def one_run(url: str, tree: str, n: int, processes: int, env: dict[str, str]) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    ab.fill(url, n)
    full_env = {k: v for k, v in os.environ.items() if k not in ab._NOT_DEFAULT}
    full_env.update({"BENCH_REDIS_URL": url, "ANTRE_REDIS_URL": url, "PYTHONPATH": code_path(tree),
                     **env})
    args = ["--processes", str(processes)] if processes != 1 else []
    log_path = f"/tmp/worker-cost-{os.getpid()}.log"
    with open(log_path, "wb") as log:
        p = subprocess.Popen([sys.executable, "-m", "antre_cli", "worker", ab.APP, *args],
                             cwd=tree, env=full_env, start_new_session=True, stdout=log,
                             stderr=log)
        cpu = ab.TreeCpu(p.pid)
        deadline = time.monotonic() + 120
        start = None
        while time.monotonic() < deadline:
            done = progress.read(client)[0]
            if start is None and done >= 1:
                start = _snap(client, cpu)
            if done >= n or p.poll() is not None:
                break
            time.sleep(0.01)
        end = _snap(client, cpu)
        got = progress.read(client)
        ab.stop([p])
    log_bytes = os.path.getsize(log_path)
    os.unlink(log_path)
    client.close()
    assert start is not None, "no job done"
    jobs = end[4] - start[4]
    done, first, last = got
    return {"done": done, "jobs_per_s": round((done - 1) / max(last - first, 1e-9)),
            "worker_cpu_us": round((end[0] - start[0]) / jobs * 1e6, 1),
            "redis_cpu_us": round((end[1] - start[1]) / jobs * 1e6, 1),
            "commands": round((end[2] - start[2]) / jobs, 2),
            "evalsha": round((end[3] - start[3]) / jobs, 3),
            "log_bytes_per_job": round(log_bytes / n)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", required=True, help="name=directory")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--env", action="append", default=[], help="NAME=value for the worker")
    args = p.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    env = dict(e.split("=", 1) for e in args.env)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        for _ in range(args.rounds):
            for name, tree in trees.items():
                r = one_run(server.url, tree, args.jobs, args.processes, env)
                results[name].append(r)
                print(name, json.dumps(r), flush=True)
    print(f"medians ({args.jobs} jobs, --processes {args.processes}, env {env or 'default'}):")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("jobs_per_s", "worker_cpu_us", "redis_cpu_us", "commands", "evalsha")}
        print(f"  {name}: {json.dumps(med)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
