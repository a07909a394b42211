"""What the performance page costs the worker per job: ``perf.record_run`` (the per-type
slots, issue 25 item 5) next to ``DurationBuffer.add`` (the Prometheus histograms the worker
already counts twice per job), both in memory, interleaved in one run so shared-CPU noise hits
both alike; and one flush of a heartbeat's worth of jobs to a private Redis.

    python3 bench/experiments/perf_cost.py [--jobs 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from antre.embedded import EmbeddedRedis
from antre.observe import perf
from antre.observe.metrics import DurationBuffer

TYPES = ("send_email", "charge_card", "sync_stock", "render_invoice")


def per_job_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    buf = DurationBuffer()
    now = int(time.time() * 1000)
    rec, add = [], []
    for _ in range(args.rounds):  # interleaved: A, B, A, B, ...
        rec.append(per_job_us(lambda i: perf.record_run(buf, "default", TYPES[i % 4], now,
                                                        i % 900, i % 50, i % 10 == 0),
                              args.jobs))
        add.append(per_job_us(lambda i: buf.add("default", TYPES[i % 4], "processing",
                                                i % 900), args.jobs))
        buf = DurationBuffer()
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for i in range(1000):  # a busy heartbeat's worth
            perf.record_run(buf, "default", TYPES[i % 4], now, i % 900, i % 50, i % 10 == 0)
        t0 = time.perf_counter()
        fields = buf.flush(client)
        flush_ms = (time.perf_counter() - t0) * 1000
    print(f"perf.record_run: median {statistics.median(rec):.2f} us/job "
          f"(rounds: {', '.join(f'{x:.2f}' for x in rec)})")
    print(f"DurationBuffer.add: median {statistics.median(add):.2f} us/job "
          f"(rounds: {', '.join(f'{x:.2f}' for x in add)})")
    print(f"flush of 1,000 jobs of 4 types: {fields} fields in {flush_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
