"""Redis memory per dead job, for the README's "Sizing Redis": N jobs with a 2 KB payload each
fail in a real worker (a ``Permanent`` error raised three calls deep, so each keeps a traceback,
an error group and its timeline) on a private redis-server; ``used_memory`` after minus before,
divided by N, and what the default retention (100,000 dead jobs per queue) then takes.

    python3 bench/experiments/dead_job_memory.py [--jobs 5000] [--payload-bytes 2048]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from antre import Antre, Permanent  # noqa: E402
from antre.embedded import EmbeddedRedis  # noqa: E402
from antre_worker.runner import WorkerProcess  # noqa: E402

RETAINED_DEAD = 100_000  # ANTRE_DEAD_MAX_JOBS' default


def _charge(payload: dict[str, object]) -> None:
    _call_gateway(payload)


def _call_gateway(payload: dict[str, object]) -> None:
    raise Permanent(f"card declined for order {payload['order']}: do not honour (code 05)")


def measure(jobs: int, payload_bytes: int) -> dict[str, float]:
    with EmbeddedRedis() as server:
        app = Antre(redis_url=server.url)

        @app.handler("charge", max_attempts=1)
        def charge(ctx: object, payload: dict[str, object]) -> None:
            _charge(payload)

        before = int(app.redis.info("memory")["used_memory"])
        blob = "x" * max(0, payload_bytes - 40)
        for start in range(0, jobs, 1000):
            app.enqueue_many([app.spec("charge", {"order": i, "note": blob},
                                       idempotency_key=f"order:{i}")
                              for i in range(start, min(jobs, start + 1000))])
        WorkerProcess(app, threads=2, heartbeat_s=60).run_burst()
        q = app.queue()
        dead = int(app.redis.zcard(q.keys.dead))
        after = int(app.redis.info("memory")["used_memory"])
    per_job = (after - before) / jobs
    return {"jobs": jobs, "dead": dead, "payload_bytes": payload_bytes,
            "bytes_per_dead_job": round(per_job), "retained_dead": RETAINED_DEAD,
            "mb_for_retained": round(per_job * RETAINED_DEAD / 1e6)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--payload-bytes", type=int, default=2048)
    args = p.parse_args()
    logging.getLogger("antre").setLevel(logging.ERROR)  # a "buried" line per job otherwise
    print(json.dumps(measure(args.jobs, args.payload_bytes)))


if __name__ == "__main__":
    main()
