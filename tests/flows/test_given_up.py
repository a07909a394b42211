"""A member that goes for good while it holds its flow: discarded from the
DLQ, deleted (purge), cancelled to discard. Under 'fail' and 'wait' the flow is given up: it
ends failed for good, its held jobs go with it (nothing of it starts any more), its other
members end on their own and settle; under 'ignore' the dead member had settled already and
the flow goes on as before. A held job of a failed flow may be deleted (the flow is given up
the same way); one of a running flow is refused with what to do instead."""

from __future__ import annotations

import pytest

from antre import Antre
from antre.actions import Actor, Ops, by_name
from antre.control.cancel import Cancels
from antre.control.purge import PurgeError, Purger
from antre.flows import FlowReader
from antre.flows.layout import depths


def spec(app: Antre, i: object, job_type: str = "t") -> object:
    return app.spec(job_type, {"i": i}, idempotency_key=f"k:{job_type}:{i}")


def chord(app: Antre, n: int = 3, **options) -> object:
    return app.chord([spec(app, i) for i in range(n)], spec(app, "cb", "cb")).enqueue(**options)


def states(app: Antre, flow) -> list[str]:
    return [j.state for j in FlowReader(app.redis).tree("default", flow.id).jobs]


def kill_first(app: Antre, count: int = 1) -> list:
    """Reserve ``count`` jobs and bury the first; returns the others (still in flight)."""
    jobs = app.queue().reserve("w", count=count)
    app.queue().bury(jobs[0], reason="boom")
    return jobs


@pytest.mark.parametrize("policy", ["fail", "wait"])
def test_discarding_the_dead_member_gives_the_flow_up(app, policy):
    flow = chord(app, on_failure="wait") if policy == "wait" else chord(app)
    dead, running = kill_first(app, 2)
    assert flow.status().state == ("waiting" if policy == "wait" else "failed")
    assert app.queue().discard(dead.id, "alice")
    row = flow.status()
    assert (row.state, row.given_up, row.given_up_by, row.failed_job) == (
        "failed", True, "discarded by alice", dead.id)
    assert row.failed_reason == "boom" and row.finished_at > 0
    assert states(app, flow) == ["gone", "inflight", "ready", "gone"]  # the callback dropped
    assert int(app.redis.hget(app.queue().keys.stats, "flow_held_dropped")) == 1
    assert (row.done, row.failed, row.to_go) == (0, 2, 2)  # the member and the callback
    app.queue().ack(running, "ok")  # the others end on their own and settle
    (last,) = app.queue().reserve("w")
    app.queue().bury(last, reason="also boom")
    row = flow.status()
    assert (row.state, row.done, row.failed, row.to_go) == ("failed", 1, 3, 0)
    assert flow.wait(timeout=0).state == "failed"  # a waiter is not left waiting
    assert app.queue().where(last.id) == ["dead"] and not app.redis.zcard(app.queue().keys.held)


def test_a_given_up_flow_refuses_a_replay_of_its_dead_jobs_saying_why(app):
    flow = chord(app)
    dead, _ = kill_first(app, 2)
    app.queue().discard(dead.id, "alice")
    ops = Ops(app)
    result = by_name("flow.replay_failed").run(ops, Actor("bob", "operator"),
                                               {"queue": "default", "flow_id": flow.id,
                                                "reason": ""})
    assert result.status == 409 and "given up" in result.message
    assert "discarded" in result.message and not app.redis.zcard(app.queue().keys.dead)


def test_under_ignore_discarding_a_dead_member_changes_nothing(app):
    flow = chord(app, ignore_failures=True)
    dead = kill_first(app, 1)[0]
    before = flow.status()
    assert app.queue().discard(dead.id, "alice")
    row = flow.status()
    assert not row.given_up and (row.state, row.failed, row.to_go) == ("running", 1, before.to_go)
    for job in app.queue().reserve("w", count=10):
        app.queue().ack(job, "ok")
    (cb,) = app.queue().reserve("w")
    assert cb.type == "cb"
    app.queue().ack(cb, "done")
    assert flow.status().state == "succeeded"


def test_deleting_a_ready_member_of_a_fail_flow_gives_it_up(app):
    flow = chord(app)
    first = FlowReader(app.redis).tree("default", flow.id).jobs[0].id
    assert Purger(app.redis, app.clock).delete("default", first) == "ready"
    row = flow.status()
    assert (row.state, row.given_up, row.given_up_by) == ("failed", True, "purged")
    assert states(app, flow) == ["gone", "ready", "ready", "gone"]


def test_cancelling_a_running_member_to_discard_gives_its_flow_up(app):
    flow = chord(app)
    (job,) = app.queue().reserve("w")
    Cancels(app.redis, app.clock).request("default", job.id, "carol", "discard", "wrong")
    app.queue().finish_cancelled(job, to="discard", reason="cancelled by carol")
    row = flow.status()
    assert (row.state, row.given_up) == ("failed", True) and row.given_up_by.startswith("cancelled")
    assert states(app, flow)[-1] == "gone"


def test_a_held_job_of_a_failed_flow_can_be_deleted_not_one_of_a_running_flow(app):
    flow = chord(app)
    cb = FlowReader(app.redis).tree("default", flow.id).jobs[-1].id
    purger = Purger(app.redis, app.clock)
    with pytest.raises(PurgeError, match="cancel the flow"):
        purger.delete("default", cb)
    assert app.queue().where(cb) == ["held"]
    kill_first(app, 1)
    assert flow.status().state == "failed"
    assert purger.delete("default", cb) == "held"
    row = flow.status()
    assert (row.state, row.given_up, row.given_up_by) == ("failed", True, "purged")
    assert app.queue().where(cb) == [] and not app.redis.zcard(app.queue().keys.held)


def test_a_dropped_callback_stays_one_step_below_its_group_on_the_flow_page(app):
    flow = chord(app)
    dead, _ = kill_first(app, 2)
    app.queue().discard(dead.id, "alice")
    jobs = FlowReader(app.redis).tree("default", flow.id).jobs
    assert [j.state for j in jobs][-1] == "gone" and not jobs[-1].parents  # its record went
    assert [depths(jobs)[j.id] for j in jobs] == [0, 0, 0, 1]  # its parents name it as a child
