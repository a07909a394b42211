"""The worked example of docs/how-to/testing.md, as a user of Antre writes it: a chord, a
retry and a per-key turn, run by ``drain`` with no Redis started by hand (the ``antre_app``
fixture of ``pytest_plugins = ["antre.testing"]``). How long it takes is printed (with ``-s``)
and written down in the guide, not asserted."""

from __future__ import annotations

import time

from antre import Retryable
from antre.testing import assert_enqueued, drain


def test_a_chord_a_retry_and_a_key_turn(antre_app):
    app = antre_app
    started = time.perf_counter()
    calls: list[str] = []

    @app.handler("price")
    def price(ctx, payload):
        return payload["qty"] * 3

    @app.handler("total")
    def total(ctx, payload):
        return sum(ctx.flow_results)

    @app.handler("charge", max_attempts=3)
    def charge(ctx, payload):
        if ctx.attempt == 1:
            raise Retryable("card network timed out")
        return "charged"

    @app.handler("ship")
    def ship(ctx, payload):
        calls.append(payload["step"])

    flow = app.chord([app.spec("price", {"qty": q}, idempotency_key=f"price:{q}")
                      for q in (1, 2, 3)],
                     app.spec("total", {}, idempotency_key="total")).enqueue()
    app.enqueue("charge", {"order": 7}, idempotency_key="charge:7")
    for step in ("pack", "label", "send"):  # one key: one at a time, in order
        app.enqueue("ship", {"step": step}, idempotency_key=f"ship:{step}", lock_key="order:7")

    done = drain(app)

    assert flow.status().state == "succeeded" and flow.results() == [18]
    assert app.result("charge:7").result == "charged"
    assert [e.job_type for e in done.retried] == ["charge"]  # one retry, its clock advanced
    assert calls == ["pack", "label", "send"]
    assert not done.dead
    assert_enqueued(app, type="ship", payload={"step": "label"}, lock_key="order:7")
    print(f"\nworked example: {time.perf_counter() - started:.3f}s, {done.rounds} bursts, "
          f"clock advanced {done.advanced_ms / 1000:.1f}s")
