"""The Antre app of bench/perkey.py (per-key scheduling, issue 23):
``antre worker perkey:app --burst`` with bench/apps on the path.

Environment: ``BENCH_REDIS_URL``. The ``hot`` handler works 2 ms (``BENCH_WORK_MS``) and
appends its payload's sequence number and the time its work ended (``<i>:<ms>``) to
``perkey:order:<lock key or group>``, so the harness counts order inversions per key afterwards
and measures the drain at any size (the done index keeps only the newest 10,000).
"""

import os
import time

from antre import Antre

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"])
WORK_S = float(os.environ.get("BENCH_WORK_MS", "2")) / 1000


@app.handler("hot", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
def hot(ctx, payload):
    time.sleep(WORK_S)
    # "<sequence number>:<ms when its work ended>": the order, and the drain of any size
    app.redis.rpush(f"perkey:order:{payload['k']}", f"{payload['i']}:{time.time_ns() // 1_000_000}")


@app.handler("noop", max_attempts=3, timeout_s=30, visibility_timeout_s=30)
def noop(ctx, payload):
    """No work: the scheduling's own cost (bench/perkey.py noop)."""
