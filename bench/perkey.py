"""Per-key scheduling (issue 23), measured with the real worker as a user starts it.

``python3 bench/perkey.py hot --jobs 3000`` : N jobs on one lock_key, one default
``antre worker bench.apps.perkey:app --burst``, 2 ms handler; prints the drain time, order
inversions, lock-busy snoozes per job, what is left in the DLQ and in every other state.

Each run starts its own private Redis (EmbeddedRedis, appendonly off).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# BENCH_TREE=/work/main: the producer and the worker are that checkout's code (the figure
# before per-key turns); the bench app module stays this tree's
TREE = os.path.abspath(os.environ.get("BENCH_TREE", ROOT))
sys.path.insert(0, ROOT)
sys.path.insert(0, TREE)

from antre.embedded import EmbeddedRedis  # noqa: E402
from antre.engine.queue import JobSpec, Queue  # noqa: E402

APP = "bench.apps.perkey:app"


def fill_hot(client: redis.Redis, n: int, key: str) -> None:
    q = Queue(client, "default")
    for start in range(0, n, 1000):
        q.enqueue_many([JobSpec("hot", {"k": key, "i": i}, f"hot:{i}", key)
                        for i in range(start, min(n, start + 1000))])


def burst(url: str, timeout_s: float) -> float:
    """One default ``antre worker APP --burst`` of TREE's code."""
    path = os.pathsep.join(p for p in (os.path.join(TREE, ".pkgs"), TREE, ROOT)
                           if os.path.isdir(p))
    env = dict(os.environ, BENCH_REDIS_URL=url, ANTRE_REDIS_URL=url, PYTHONPATH=path)
    env.pop("ANTRE_DATABASE_URL", None)
    log_path = os.path.join(ROOT, "bench", "out", "perkey-worker.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        p = subprocess.run([sys.executable, "-m", "antre_cli", "worker", APP, "--burst"],
                           cwd=ROOT, env=env, stdout=log, stderr=log, timeout=timeout_s)
    took = time.monotonic() - started
    if p.returncode != 0:
        raise SystemExit(f"worker exited {p.returncode}; see {log_path}")
    return took


def inversions(order: list[int]) -> int:
    return sum(1 for a, b in zip(order, order[1:]) if b < a)


def states(client: redis.Redis) -> dict[str, int]:
    k = Queue(client, "default").keys
    return {"ready": client.llen(k.ready), "scheduled": client.zcard(k.scheduled),
            "inflight": client.zcard(k.inflight), "waiting": client.zcard(f"{k.tag}:waiting"),
            "dead": client.zcard(k.dead), "done": client.zcard(k.done)}


def hot(args: argparse.Namespace) -> dict[str, object]:
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        url = server.url
        client = redis.Redis.from_url(url, decode_responses=True)
        client.flushall()
        fill_hot(client, args.jobs, "order:42")
        client.config_resetstat()
        took = burst(url, args.timeout)
        cmd = client.info("commandstats")

        order = [int(x) for x in client.lrange("perkey:order:order:42", 0, -1)]
        stats = {k: int(v) for k, v in client.hgetall(Queue(client, "default").keys.stats).items()}
        k = Queue(client, "default").keys
        first = client.zrange(k.done, 0, 0, withscores=True)
        last = client.zrange(k.done, -1, -1, withscores=True)
        span_s = (last[0][1] - first[0][1]) / 1000 if first else 0.0
        out = {"case": "hot key", "jobs": args.jobs, "ran": len(order),
               "distinct": len(set(order)),
               "worker_wall_s": round(took, 2),  # the process's start and exit included
               "drain_s": round(span_s, 2),  # first job finished -> last job finished
               "serial_ideal_s": round(args.jobs * 0.002, 2),
               "inversions": inversions(order),
               "lock_busy_per_job": round(stats.get("lock_busy", 0) / args.jobs, 4),
               "snoozes": stats.get("snoozed", 0) + stats.get("lock_busy", 0),
               "left": states(client),
               "redis_us_per_job": round(sum(v["usec"] for v in cmd.values()) / args.jobs, 1),
               "evalsha_us_per_call": round(cmd["cmdstat_evalsha"]["usec_per_call"], 1)}
        return out
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("case", choices=["hot"])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--timeout", type=float, default=600)

    args = p.parse_args()
    print(json.dumps(hot(args), indent=1))


if __name__ == "__main__":
    main()

