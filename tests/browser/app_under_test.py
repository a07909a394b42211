"""The application the browser tests serve: ``tests.browser.app_under_test:app``.

Real handlers, run by a real worker pool in another process; they leave marks in Redis so the
test can tell what really happened.

- ``charge``: fails permanently (straight to the dead-letter queue) until the test "fixes the
  bug" by adding the payload's ``ref`` to the ``browser:fixed`` set; then it succeeds.
- ``sync_record``: the same, for the paced bulk replay.
- ``notify_partner``: always fails permanently (a redrive of its dead jobs pauses itself).
- ``flaky_fetch``: always a transient failure with a long back-off, so it sits in the
  scheduled-retries list.
- ``slow_report``: runs ~``seconds`` s, extending its own lease once, checkpointing and
  reporting its progress (``ctx.progress``, a message with markup in it), so there is a
  running lease to look at and extend, and a progress bar.
- ``stubborn_report``: a sync handler that runs ``seconds`` s ignoring ``ctx.cancelled`` (a
  cancel abandons it after its 3 s grace).
- ``echo``: the start-up probe.
- ``diary``: logs three lines (two with ``ctx.log``, one a ``logging`` warning with markup in
  it), for the job page's log.
- ``nightly_digest``: a periodic schedule (once a year, so it only runs when asked to: the
  Schedules page's "Run now").
"""

from __future__ import annotations

import logging
import time

from antre import Antre, Permanent, Retryable

app = Antre()  # ANTRE_REDIS_URL / ANTRE_DATABASE_URL from the environment

FIXED = "browser:fixed"


def _mark(what: str, value: str) -> None:
    app.redis.rpush(f"browser:{what}", value)


def _fails_until_fixed(ctx, payload) -> dict:
    ref = str(payload["ref"])
    if not app.redis.sismember(FIXED, ref):
        _mark("failed", ref)
        raise Permanent(f"card declined for ref {ref}: gateway said 'do not honor' (code 05)")
    _mark("done", ref)
    return {"ref": ref, "charged": True}


@app.handler("charge", max_attempts=3)
def charge(ctx, payload):
    return _fails_until_fixed(ctx, payload)


@app.handler("sync_record", max_attempts=3)
def sync_record(ctx, payload):
    return _fails_until_fixed(ctx, payload)


@app.handler("notify_partner", max_attempts=3)
def notify_partner(ctx, payload):
    _mark("failed", str(payload["ref"]))
    raise Permanent("partner endpoint gone: 410 Gone")


@app.handler("flaky_fetch", max_attempts=5)
def flaky_fetch(ctx, payload):
    _mark("failed", str(payload["ref"]))
    raise Retryable("upstream 503 Service Unavailable", retry_after_s=900)


@app.handler("slow_report", visibility_timeout_s=60, timeout_s=120, max_runtime_s=3600)
def slow_report(ctx, payload):
    ref = str(payload["ref"])
    _mark("started", ref)
    ctx.extend_lease(90)
    seconds = float(payload.get("seconds", 20))
    started = time.monotonic()
    step = 0
    while time.monotonic() - started < seconds:
        step += 1
        ctx.checkpoint({"step": step})  # raises when cancelled (timeout or shutdown)
        ctx.progress(min(1.0, (time.monotonic() - started) / seconds), f"<step> {step}")
        time.sleep(0.25)
    _mark("done", ref)
    return {"steps": step}


@app.handler("stubborn_report", visibility_timeout_s=60, timeout_s=120, cancel_grace_s=3)
def stubborn_report(ctx, payload):
    """A sync handler that ignores ``ctx.cancelled`` (a cancel keeps its word
    anyway: past the grace the worker abandons it and the job goes where the cancel said)."""
    ref = str(payload["ref"])
    _mark("started", ref)
    end = time.monotonic() + float(payload.get("seconds", 20))
    while time.monotonic() < end:
        time.sleep(0.2)
    _mark("done", ref)
    return {}


@app.handler("echo")
def echo(ctx, payload):
    _mark("done", str(payload["ref"]))
    return payload


@app.handler("diary")
def diary(ctx, payload):
    ctx.log("opened the ledger for %s", payload["ref"])
    logging.getLogger("browser.diary").warning("<em>two</em> entries look odd")
    ctx.log("closed the ledger")
    _mark("done", str(payload["ref"]))


@app.periodic("0 3 1 1 *", "nightly_digest", payload={"ref": "digest"})
def nightly_digest(ctx, payload):
    _mark("done", f"digest:{ctx.job.id}")
    return {"sent": True}
