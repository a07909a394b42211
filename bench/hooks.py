"""What the lifecycle hooks cost the worker: no-op jobs run by an in-process ``WorkerProcess``
(``run_burst``, one runner thread) on a private Redis, with no hook and with one hook whose
every method is a no-op, taking turns.

    python3 bench/hooks.py [--jobs 20000] [--rounds 3]

Per run: jobs/s (wall, from the burst's start to its end) and this process's CPU µs per job
(``time.process_time``: the worker's threads and the hooks, not Redis). The jobs are enqueued
before each run with ``enqueue_many`` (not measured). Prints one JSON line per run and the
medians. Results: ``bench/results/hooks.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from antre import Antre
from antre.embedded import EmbeddedRedis
from antre.hooks import Enqueued, Hook, JobEvent, Tick
from antre_worker.runner import WorkerProcess


class NoOp(Hook):
    def on_enqueue(self, event: Enqueued) -> None: ...
    def before_job(self, event: JobEvent) -> None: ...
    def after_job(self, event: JobEvent) -> None: ...
    def on_retry(self, event: JobEvent) -> None: ...
    def on_dead(self, event: JobEvent) -> None: ...
    def on_tick(self, event: Tick) -> None: ...


def run(url: str, jobs: int, hooked: bool) -> dict[str, float]:
    app = Antre(redis_url=url)
    app.handler("noop")(lambda ctx, payload: None)
    app.redis.flushall()
    for start in range(0, jobs, 1000):
        app.enqueue_many([app.spec("noop", {"i": i}, idempotency_key=f"k{i}")
                          for i in range(start, min(jobs, start + 1000))])
    if hooked:  # added after the fill: the enqueue hook's cost is not in this figure
        app.add_hook(NoOp())
    worker = WorkerProcess(app, threads=1, worker_id="bench", heartbeat_s=1)
    wall, cpu = time.perf_counter(), time.process_time()
    counts = worker.run_burst()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert counts.get("succeeded") == jobs, counts
    return {"hooked": hooked, "jobs_per_s": jobs / wall, "cpu_us_per_job": cpu / jobs * 1e6}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rows: list[dict[str, float]] = []
    with EmbeddedRedis() as server:
        for _ in range(args.rounds):
            for hooked in (False, True):
                rows.append(run(server.url, args.jobs, hooked))
                print(json.dumps(rows[-1]), flush=True)
    for hooked in (False, True):
        mine = [r for r in rows if r["hooked"] == hooked]
        print(f"{'one no-op hook' if hooked else 'no hook':>15}: "
              f"{statistics.median(r['jobs_per_s'] for r in mine):,.0f} jobs/s, "
              f"{statistics.median(r['cpu_us_per_job'] for r in mine):.1f} us CPU per job")


if __name__ == "__main__":
    main()
