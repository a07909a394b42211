"""A quick no-op drain (default 20,000 jobs, a few runs) to compare the worker's figure before and
after a change to the hot-path scripts, without running ``bench/run``.

Besides jobs/s (noisy on a shared machine) it reports the Redis server's own CPU per job
(``INFO cpu`` before and after), which tells what a script change costs Redis regardless of
what else runs on the machine.

    PYTHONPATH=$PWD python3 bench/experiments/noop_quick.py [--jobs 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import redis

from antre.embedded import EmbeddedRedis
from bench.lib import antre_bench as ab
from antre_worker.runner import DEFAULT_PREFETCH


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def one_run(url: str, n: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    cpu0 = redis_cpu_s(client)
    out = ab.worker_run(url, n, 1, 4, DEFAULT_PREFETCH, count_rtt=True)
    # the server's CPU for worker_run's fill (enqueue_many) and the drain together
    out["redis_cpu_us_per_job"] = round((redis_cpu_s(client) - cpu0) * 1e6 / n, 1)
    client.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        runs = [one_run(server.url, args.jobs) for _ in range(args.runs)]
    finally:
        server.stop()
    for r in runs:
        print({k: r.get(k) for k in ("jobs_per_s", "redis_commands_per_job", "evalsha_per_job",
                                     "round_trips_per_job", "redis_cpu_us_per_job", "error")})
    print("median jobs/s", statistics.median(r["jobs_per_s"] for r in runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
