"""A test app: ``tests.apps.basic:app``. Handlers record what they did in Redis so a test in
another process can see it."""

from __future__ import annotations

import ctypes
import os
import signal
import time

from antre import Antre

app = Antre()


def _mark(ctx, what: str) -> None:
    app.redis.rpush(f"test:{what}", f"{ctx.job.id}:{ctx.job.deliveries}:{os.getpid()}")


@app.handler("echo")
def echo(ctx, payload):
    _mark(ctx, "done")
    return payload


@app.handler("hang_first", visibility_timeout_s=30)
def hang_first(ctx, payload):
    """Hangs on its first delivery (the test kills the process); finishes on the next."""
    _mark(ctx, "started")
    if ctx.job.deliveries == 1:
        time.sleep(60)
    _mark(ctx, "done")
    return {"deliveries": ctx.job.deliveries}


@app.handler("slow")
def slow(ctx, payload):
    _mark(ctx, "started")
    deadline = time.monotonic() + float(payload.get("seconds", 30))
    while time.monotonic() < deadline:
        time.sleep(0.02)
    _mark(ctx, "done")
    return "slept"


@app.handler("suicide", max_deliveries=3, visibility_timeout_s=30)
def suicide(ctx, payload):
    _mark(ctx, "started")
    os.kill(os.getpid(), signal.SIGKILL)


@app.handler("hang_forever")
def hang_forever(ctx, payload):
    """Ignores ``ctx.cancelled`` in a call that does not return to Python (a ``time.sleep``):
    only a hard timeout and its process's retirement end it."""
    _mark(ctx, "started")
    time.sleep(120)


@app.handler("spin_forever")
def spin_forever(ctx, payload):
    """Ignores ``ctx.cancelled`` while it runs Python code: its hard timeout interrupts it."""
    _mark(ctx, "started")
    while True:
        time.sleep(0.01)


@app.handler("hang_in_c")
def hang_in_c(ctx, payload):
    """Ignores ``ctx.cancelled`` inside a C call that never returns (libc's ``pause``)."""
    _mark(ctx, "started")
    ctypes.CDLL(None).pause()


@app.handler("until_flag")
def until_flag(ctx, payload):
    """Runs until the test sets the Redis key ``test:flag``, then completes."""
    _mark(ctx, "started")
    while not app.redis.exists("test:flag"):
        time.sleep(0.02)
    _mark(ctx, "done")
    return "finished"


@app.handler("ignores_cancel_long", cancel_grace_s=600)
def ignores_cancel_long(ctx, payload):
    """Ignores ``ctx.cancelled`` with a long grace: its worker is restarted within it."""
    _mark(ctx, "started")
    time.sleep(120)


@app.handler("ignores_cancel", cancel_grace_s=0.5)
def ignores_cancel(ctx, payload):
    """Ignores ``ctx.cancelled``: only the cancel grace (and a recycled process) ends it. Its
    SQL write (when the app has a database) must never commit."""
    _mark(ctx, "started")
    time.sleep(120)
