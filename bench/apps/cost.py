"""The Antre app of ``bench/cost.py`` (``bench/run --ab``): one job type per row, the worker
started the same way for every row (``antre worker bench.apps.cost:app``).

Only the public surface (``Antre``, ``Permanent``, ``Retryable``) is used, so the same app runs
on every revision compared. Environment: ``BENCH_REDIS_URL``.

* ``none``: returns None (the cheapest success);
* ``small``: returns a small result (``{"ok": True, "i": i}``), the headline as shipped;
* ``bury``: raises ``Permanent`` three calls deep (a traceback, an error group, the DLQ);
* ``retry``: raises ``Retryable`` three calls deep with a 10-minute backoff (each job is
  retried once within a run, then waits in 'scheduled').
"""

import os

from antre import Antre, Permanent, Retryable
from bench.lib import progress

app = Antre(redis_url=os.environ["BENCH_REDIS_URL"])


@app.handler("none", max_attempts=3)
def none(ctx, payload):
    progress.done()


@app.handler("small", max_attempts=3)
def small(ctx, payload):
    progress.done()
    return {"ok": True, "i": payload["i"]}


def _gateway(payload, exc):
    raise exc(f"card declined for order {payload['i']}: do not honour (code 05)")


def _charge(payload, exc):
    _gateway(payload, exc)


@app.handler("bury", max_attempts=3)
def bury(ctx, payload):
    progress.done()
    _charge(payload, Permanent)


@app.handler("retry", max_attempts=3)
def retry(ctx, payload):
    progress.done()
    _charge(payload, lambda msg: Retryable(msg, retry_after_s=600))
