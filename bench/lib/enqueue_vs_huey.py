"""A single ``app.enqueue`` and ``app.enqueue_many`` beside Huey's ``task()``, interleaved.

    PYTHONPATH=$PWD python3 bench/lib/enqueue_vs_huey.py [--before REV] [--rounds 4] [--n 5000]

One private Redis (``EmbeddedRedis``, TCP 127.0.0.1, appendonly off). Each round runs, one
after the other, in fresh subprocesses: Huey's ``task()`` ``--n`` times (its own virtualenv,
``bench/.venvs/huey``, as ``bench/run`` does), Antre's ``app.enqueue`` ``--n`` times and
``app.enqueue_many`` over ``--many`` jobs in chunks of 1,000 (``bench.apps.noop:app``, as a
producer imports it); with ``--before REV`` also the same Antre loops from a ``git archive``
of REV. Per run: jobs/s (wall), producer CPU µs per job (``time.process_time`` of the loop)
and the Redis server's CPU µs per job (``INFO cpu`` user + sys, before and after the loop).
The order of the sides rotates each round; a shared machine's load drifts, so read the
per-round figures side by side and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib import peer_bench as pb  # noqa: E402
from bench.lib.tree import code_path  # noqa: E402

ANTRE = r"""
import json, os, sys, time, uuid
import redis
from bench.lib import antre_bench as ab
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
server = redis.Redis.from_url(url)
def cpu():
    i = server.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])
app = ab.producer(url)
app.enqueue("noop", {}, idempotency_key="warm")
run = uuid.uuid4().hex[:6]
if mode == "single":
    s0 = cpu(); wall, c = time.perf_counter(), time.process_time()
    for i in range(n):
        app.enqueue("noop", {"i": i}, idempotency_key=f"s:{run}:{i}")
else:
    specs = ab._specs(app, n)
    s0 = cpu(); wall, c = time.perf_counter(), time.process_time()
    for start in range(0, n, 1000):
        app.enqueue_many(specs[start:start + 1000])
wall, c = time.perf_counter() - wall, time.process_time() - c
s = cpu() - s0
print(json.dumps({"per_s": round(n / wall), "cpu_us": round(c / n * 1e6, 1),
                  "server_us": round(s / n * 1e6, 1)}))
"""

HUEY = r"""
import json, sys, time
import redis
mod = __import__(sys.argv[1]); n = int(sys.argv[2]); url = sys.argv[3]
server = redis.Redis.from_url(url)
def cpu():
    i = server.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])
mod.enqueue(20)
s0 = cpu(); wall, c = time.perf_counter(), time.process_time()
mod.enqueue(n)
wall, c = time.perf_counter() - wall, time.process_time() - c
s = cpu() - s0
print(json.dumps({"per_s": round(n / wall), "cpu_us": round(c / n * 1e6, 1),
                  "server_us": round(s / n * 1e6, 1)}))
"""


def archive(rev: str) -> str:
    out = tempfile.mkdtemp(prefix=f"antre-{rev[:8]}-")
    tar = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=tar, check=True)
    return out


def antre_run(tree: str, url: str, mode: str, n: int) -> dict[str, Any]:
    env = ab._env(url)
    env["PYTHONPATH"] = code_path(tree)
    out = subprocess.run([sys.executable, "-c", ANTRE, mode, str(n), url], cwd=tree, env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def huey_run(url: str, n: int) -> dict[str, Any]:
    peer = pb.PEERS["huey"]
    pb.ensure_venv(peer["venv"], peer["pip"])
    env, _ = pb._peer_env(url, peer)
    out = subprocess.run([pb.venv_python(peer["venv"]), "-c", HUEY, peer["module"], str(n), url],
                         cwd=os.path.join(ROOT, "bench", "peers"), env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--before", help="a git revision to run beside this tree")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--n", type=int, default=5_000, help="single enqueues per run")
    p.add_argument("--many", type=int, default=50_000, help="jobs per enqueue_many run")
    p.add_argument("--no-huey", action="store_true")
    p.add_argument("--no-many", action="store_true")
    args = p.parse_args()
    trees = {"after": ROOT}
    if args.before:
        trees = {"before": archive(args.before), **trees}
    results: dict[str, list[dict[str, Any]]] = {}
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        client = redis.Redis.from_url(server.url)
        sides: list[tuple[str, Any]] = []
        if not args.no_huey:
            sides.append(("huey task()", lambda: huey_run(server.url, args.n)))
        for name, tree in trees.items():
            sides.append((f"{name} enqueue", lambda tree=tree: antre_run(
                tree, server.url, "single", args.n)))
            if not args.no_many:
                sides.append((f"{name} enqueue_many", lambda tree=tree: antre_run(
                    tree, server.url, "many", args.many)))
        for r in range(args.rounds):
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            for name, fn in order:
                client.flushall()
                res = fn()
                results.setdefault(name, []).append(res)
                print(f"round {r + 1} {name:24} {json.dumps(res)}", flush=True)
            client.flushall()
    if args.before:
        shutil.rmtree(trees["before"], ignore_errors=True)
    print("\nmedians (per_s, producer cpu µs/job, server cpu µs/job):")
    for name, runs in results.items():
        med = {k: statistics.median(x[k] for x in runs) for k in ("per_s", "cpu_us",
                                                                   "server_us")}
        print(f"  {name:24} {med['per_s']:>8.0f} /s  {med['cpu_us']:>6.1f} µs  "
              f"{med['server_us']:>6.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
