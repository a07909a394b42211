"""``app.enqueue_many`` of a git revision against this tree's, rounds alternating.

    PYTHONPATH=$PWD python3 bench/experiments/enqueue_many_ab.py --before REV [--rounds 10] [--n 30000]
        [--url redis://127.0.0.1:6391/0]

REV is extracted with ``git archive`` to a temporary directory. Each round runs one fresh
process per side (the order alternating), with ``PYTHONPATH`` at that side's tree: the bench
app's defaults (``bench.apps.noop``), ``--n`` no-op jobs (``{"i": i}``, an idempotency key
each) in calls of 1,000, made before the clock starts. Per run: the PING rate of the moment
(2,000 one at a time: the machine's phase), jobs/s (wall), producer CPU µs per job
(``process_time``) and Redis CPU µs per job (``INFO cpu`` user + sys around the calls, the
flushes outside). Prints each round, then the medians per side and the median of the per-round
jobs/s ratios. The server is flushed: use a private one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(url: str, n: int) -> dict[str, float]:
    import antre
    import redis
    from bench.lib import antre_bench as ab
    client = redis.Redis.from_url(url)

    def cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    app = ab.producer(url)
    client.flushall()
    app.enqueue("noop", {}, idempotency_key="warm")
    app.enqueue_many(ab._specs(app, 1000))  # scripts loaded, connection made
    client.flushall()
    t = time.perf_counter()
    for _ in range(2000):
        client.ping()
    ping = 2000 / (time.perf_counter() - t)
    specs = ab._specs(app, n)
    r0 = cpu()
    t, p0 = time.perf_counter(), time.process_time()
    for start in range(0, n, 1000):
        app.enqueue_many(specs[start:start + 1000])
    wall, producer = time.perf_counter() - t, time.process_time() - p0
    r1 = cpu()
    assert client.llen(app.queue(None).keys.ready) == n
    client.flushall()
    return {"tree": os.path.dirname(os.path.dirname(antre.__file__)), "ping": round(ping),
            "jobs_s": round(n / wall), "producer_us": round(producer / n * 1e6, 2),
            "redis_us": round((r1 - r0) / n * 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--n", type=int, default=30_000)
    parser.add_argument("--url", default="redis://127.0.0.1:6391/0")
    parser.add_argument("--one", action="store_true", help="(internal) one run, as JSON")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.url, args.n)))
        return
    with tempfile.TemporaryDirectory() as before:
        subprocess.run(f"git -C {ROOT} archive {args.before} | tar -x -C {before}", shell=True,
                       check=True)
        trees = {"before": before, "now": ROOT}
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        ratios = []
        for r in range(args.rounds):
            got = {}
            for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--one", "--n", str(args.n),
                     "--url", args.url], env={**os.environ, "PYTHONPATH": trees[name]},
                    cwd=tempfile.gettempdir(), check=True, capture_output=True, text=True).stdout
                got[name] = json.loads(out)
                rows[name].append(got[name])
            ratios.append(got["now"]["jobs_s"] / got["before"]["jobs_s"])
            print(r, {k: {f: v for f, v in g.items() if f != "tree"} for k, g in got.items()},
                  f"now/before {ratios[-1]:.3f}", flush=True)
        for name, runs in rows.items():
            print(name, {f: statistics.median(run[f] for run in runs)
                         for f in ("ping", "jobs_s", "producer_us", "redis_us")})
        print(f"jobs/s now/before: median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
