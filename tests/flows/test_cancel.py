"""Cancelling a whole flow: its held callback and scheduled jobs end at once, a
ready job ends when a reserve pops it, a running one gets the cancel request its worker
carries out; nothing of the flow settles or starts afterwards. The table's ``flow.cancel``
entry: the API, role-checked and audited (the dashboard route and the CLI command come from
the same entry: tests/web/test_action_table.py)."""

from __future__ import annotations

import pytest

from antre import Antre, LeaseLost
from antre.flows import FlowError, FlowReader


def spec(app: Antre, i: object, **kw: object) -> object:
    return app.spec("t", {"i": i}, idempotency_key=f"k:{i}", **kw)


def test_cancel_ends_what_waits_and_asks_what_runs_to_stop(app, clock):
    flow = app.chord([spec(app, 1), spec(app, 2), spec(app, 3, delay_s=60)],
                     spec(app, "cb")).enqueue()
    q = app.queue()
    running = q.reserve("w", count=1)[0]
    done = flow.cancel("alice", reason="wrong order", to="dlq")
    assert (done.ended, done.requested) == (2, 2)  # callback + scheduled; in flight + ready
    jobs = {j.id: j for j in FlowReader(app.redis).tree("default", flow.id).jobs}
    assert sorted(j.state for j in jobs.values()) == ["dead", "dead", "inflight", "ready"]
    cb = next(j for j in jobs.values() if j.type == "t" and j.state == "dead" and not j.children)
    assert "with its flow" in q.get(cb.id).reason and "alice" in q.get(cb.id).reason
    assert q.reserve("w", count=5) == []  # the ready one ends as cancelled when popped
    q.ack(running, "late")  # a worker that did not look: its ack settles nothing
    status = flow.status()
    assert (status.state, status.cancelled_by, status.cancel_reason) == (
        "cancelled", "alice", "wrong order")
    assert status.done == 0
    assert app.redis.zcard(q.keys.held) == 0
    with pytest.raises(FlowError, match="cancelled already"):
        flow.cancel("bob")


def test_a_succeeded_flow_cannot_be_cancelled(app):
    flow = app.chain(spec(app, 1)).enqueue()
    (job,) = app.queue().reserve("w")
    app.queue().ack(job, 1)
    with pytest.raises(FlowError, match="succeeded"):
        flow.cancel("alice")
    assert flow.status().state == "succeeded"
