"""A runner thread outlives an unexpected error while its batch is settled (a bug in the
settling code, not an outage): the exception is logged instead of ending the thread silently
(the process would go on with one runner fewer), the jobs not acked come back through their
leases, and the runner reserves the next jobs."""

from __future__ import annotations

import logging
import threading

from helpers import make_worker, wait_for


def test_an_unexpected_error_while_settling_does_not_end_the_runner(app, clock, q, caplog):
    ran: list[int] = []
    app.handler("s")(lambda ctx, payload: ran.append(payload["i"]))
    w = make_worker(app, clock, threads=1, prefetch=1)
    real, boom = w.settler.flush_acks, [RuntimeError("a bug in settling")]

    def fails_once():  # the fault: the first batch's flush raises what nothing expects
        if boom:
            raise boom.pop()
        return real()

    w.settler.flush_acks = fails_once
    ids = [app.enqueue("s", {"i": i}, idempotency_key=f"s{i}") for i in range(2)]
    with caplog.at_level(logging.ERROR, logger="antre.worker"):
        t = threading.Thread(target=w.run, name="worker")
        t.start()
        try:
            wait_for(lambda: ran == [0, 1], what="both jobs run by the one runner")
            wait_for(lambda: q.get(ids[1]).state == "done", what="the second job acked")
        finally:
            w.stop()
            t.join(30)
    assert not t.is_alive()
    assert any("unexpected error while settling" in r.getMessage() for r in caplog.records)
