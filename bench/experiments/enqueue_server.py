"""The Redis server's time per enqueue script call (issue 14 item 3, the server side).

    PYTHONPATH=$PWD python3 bench/experiments/enqueue_server.py [--n 20000] [--trials 3]

Against a private Redis (``EmbeddedRedis``, unix socket, appendonly off). For each case, n
single ``app.enqueue`` calls after ``CONFIG RESETSTAT``; reports ``INFO commandstats``
``usec_per_call`` of ``evalsha`` (the script's time in the server, without the socket) and of
``sadd`` (the queue-index command sent with it). Cases: an immediate job, an immediate job with
``unique=True``, a job with a delay (scheduled, with its 'enqueued' timeline event). The best
of ``--trials`` is printed per case (the machine is shared; the spread is printed too). Also the
server process's CPU per enqueue (``INFO cpu`` user + sys over the n calls: the script, the
SADD and the socket work), which a busy machine inflates less than ``usec_per_call``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre import Antre  # noqa: E402
from antre.embedded import EmbeddedRedis  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "immediate": {},
    "immediate, unique=True": {"unique": True},
    "delay_s=60 (scheduled)": {"delay_s": 60},
}


def _app(url: str) -> Antre:
    app = Antre(redis_url=url)

    @app.handler("noop", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
    def noop(ctx: Any, payload: Any) -> None:
        return None
    return app


def usec_per_call(app: Antre, command: str) -> float:
    stats = app.redis.info("commandstats").get(f"cmdstat_{command}", {})
    return float(stats.get("usec_per_call", 0.0))


def server_cpu_s(app: Antre) -> float:
    cpu = app.redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def trial(app: Antre, n: int, options: dict[str, Any], tag: str) -> tuple[float, float, float]:
    """(evalsha usec_per_call, sadd usec_per_call, server CPU µs per enqueue)."""
    app.redis.flushall()
    app.enqueue("noop", {}, idempotency_key="warm", **options)  # loads the script
    app.redis.config_resetstat()
    cpu_s = server_cpu_s(app)
    for i in range(n):
        app.enqueue("noop", {"i": i}, idempotency_key=f"{tag}:{i}", **options)
    cpu_us = (server_cpu_s(app) - cpu_s) / n * 1e6
    return usec_per_call(app, "evalsha"), usec_per_call(app, "sadd"), cpu_us


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args()
    out: dict[str, Any] = {}
    with EmbeddedRedis(appendonly=False) as server:
        app = _app(server.url)
        for name, options in CASES.items():
            runs = [trial(app, args.n, options, f"t{t}") for t in range(args.trials)]
            script = sorted(r[0] for r in runs)
            out[name] = {"evalsha_usec_per_call_best": script[0],
                         "evalsha_usec_per_call_all": script,
                         "sadd_usec_per_call_best": min(r[1] for r in runs),
                         "server_cpu_us_per_enqueue_all": sorted(round(r[2], 1) for r in runs)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
