"""Where a single ``app.enqueue`` spends its producer CPU (issue 14 item 3).

    PYTHONPATH=$PWD python3 bench/experiments/enqueue_profile.py              # figures
    PYTHONPATH=$PWD python3 bench/experiments/enqueue_profile.py --profile    # + cProfile top 25

Against a private Redis (``EmbeddedRedis``, TCP 127.0.0.1, appendonly off). Reports, for
``app.enqueue`` one at a time and ``app.enqueue_many`` in chunks of 1,000: jobs/s (wall) and
µs of producer CPU per job (``time.process_time``; the Redis server's time is not counted).
The round trip itself is measured by a plain ``PING`` loop for scale.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre import Antre  # noqa: E402
from antre.embedded import EmbeddedRedis  # noqa: E402


def _app(url: str) -> Antre:
    app = Antre(redis_url=url)

    @app.handler("noop", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
    def noop(ctx: Any, payload: Any) -> None:
        return None
    return app


def _timed(fn: Any, n: int) -> tuple[float, float]:
    """(jobs/s wall, µs of process CPU per job)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, cpu / n * 1e6


def single(app: Antre, n: int) -> tuple[float, float]:
    def run() -> None:
        for i in range(n):
            app.enqueue("noop", {"i": i}, idempotency_key=f"s:{i}")
    return _timed(run, n)


def many(app: Antre, n: int, chunk: int = 1_000) -> tuple[float, float]:
    specs = [app.spec("noop", {"i": i}, idempotency_key=f"m:{i}") for i in range(n)]

    def run() -> None:
        for start in range(0, n, chunk):
            app.enqueue_many(specs[start:start + chunk])
    return _timed(run, n)


def ping(app: Antre, n: int) -> tuple[float, float]:
    def run() -> None:
        for _ in range(n):
            app.redis.ping()
    return _timed(run, n)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=10_000, help="single enqueues per trial")
    p.add_argument("--many", type=int, default=50_000, help="jobs for enqueue_many")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        app = _app(server.url)
        app.enqueue("noop", {}, idempotency_key="warm")
        out: dict[str, Any] = {}
        for name, fn, n in (("ping", ping, args.n), ("enqueue", single, args.n),
                            ("enqueue_many", many, args.many)):
            runs = []
            for _ in range(args.trials):
                app.redis.flushall()
                runs.append(fn(app, n))
            best = max(runs)
            out[name] = {"per_s": round(best[0]), "cpu_us_per_job": round(min(r[1] for r in runs), 1),
                         "runs_per_s": [round(r[0]) for r in runs]}
        print(json.dumps(out, indent=1))
        if args.profile:
            app.redis.flushall()
            prof = cProfile.Profile()
            prof.runcall(single, app, args.n)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
