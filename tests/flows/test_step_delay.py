"""A flow step's ``delay_s`` counts from its release, when its parents have settled, not from
the enqueue, on the injected clock: a step with a minute's delay behind a
step that took two minutes still waits its minute. A flow's first steps (nothing to wait for)
count from the enqueue, as any job does."""

from __future__ import annotations

from antre.flows import FlowReader


def test_a_held_steps_delay_starts_when_its_parent_completes(app, clock):
    q = app.queue()
    first = app.spec("t", {"i": 1}, idempotency_key="a", delay_s=30)
    second = app.spec("t", {"i": 2}, idempotency_key="b", delay_s=60)
    flow = app.chain(first, second).enqueue()
    later_id = FlowReader(app.redis).tree("default", flow.id).jobs[1].id
    assert q.reserve("w") == []  # the first step: due 30 s after the enqueue
    clock.advance(30_000)
    assert q.promote() == 1
    (job,) = q.reserve("w")
    clock.advance(120_000)  # the first step ran for two minutes: past the second's 60 s
    released_at = clock()
    q.ack(job, 1)
    later = q.get(later_id)
    assert later.state == "scheduled" and later.visible_at == released_at + 60_000
    clock.advance(59_999)
    assert q.promote() == 0 and q.reserve("w") == []
    clock.advance(1)
    assert q.promote() == 1
    (job,) = q.reserve("w")
    assert job.id == later_id and job.flow_inputs == 1
    released = [e for e in app.finder.timeline("default", later_id).events
                if e.kind == "released"]
    assert [e.details.get("delay_ms") for e in released] == [60_000]


def test_a_held_step_without_a_delay_is_ready_at_its_release(app, clock):
    q = app.queue()
    flow = app.chain(app.spec("t", {"i": 1}, idempotency_key="a"),
                     app.spec("t", {"i": 2}, idempotency_key="b")).enqueue()
    (job,) = q.reserve("w")
    q.ack(job, 1)
    (nxt,) = q.reserve("w")
    assert (nxt.flow, nxt.payload) == (flow.id, {"i": 2})
    assert "fdelay" not in app.redis.hgetall(q.keys.job(nxt.id))
