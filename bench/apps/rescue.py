"""The app of ``bench/rescue.py``: ``python -m antre_worker worker bench.apps.rescue:app``.

``hold`` records each start (job id, delivery, pid, wall time) in the list
``bench:rescue:started`` and runs ``payload["first_s"]`` seconds on its first delivery,
``payload["again_s"]`` on a later one (the harness kills or pauses the process meanwhile).
"""

import json
import os
import time

from antre import Antre

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"])


@app.handler("hold", visibility_timeout_s=30, timeout_s=120)
def hold(ctx, payload):
    app.redis.rpush("bench:rescue:started", json.dumps(
        {"id": ctx.job.id, "d": ctx.job.deliveries, "pid": os.getpid(), "t": time.time()}))
    seconds = payload["first_s"] if ctx.job.deliveries == 1 else payload["again_s"]
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return {"delivery": ctx.job.deliveries}
