"""Flows settle exactly once inside the scripts that end their jobs: a chain passes
results along, a chord's callback gets every result in order, nesting fans out and in, and a
duplicate ack, a stale-epoch ack or a sweep of an in-flight member never counts twice. Against
a real Redis, on the injected clock (the queue's scripts driven by hand)."""

from __future__ import annotations

import pytest

from antre import Antre, LeaseLost
from antre.flows import FlowReader
from antre.flows.read import inputs


def spec(app: Antre, i: object, job_type: str = "t") -> object:
    return app.spec(job_type, {"i": i}, idempotency_key=f"k:{job_type}:{i}")


def run_all(app: Antre, result=lambda job, ins: job.payload["i"]) -> list[str]:
    """Reserve and ack until nothing is ready; each job's result from its payload and inputs.
    Returns the job types in the order they ran."""
    q, ran = app.queue(), []
    while True:
        jobs = q.reserve("w", count=50)
        if not jobs:
            return ran
        for job in jobs:
            ins = inputs(q, job.id) if job.flow_inputs else []
            ran.append(job.type)
            q.ack(job, result(job, ins))


def states(app: Antre, flow_id: str) -> dict[str, str]:
    tree = FlowReader(app.redis).tree("default", flow_id)
    assert tree is not None
    return {j.id: j.state for j in tree.jobs}


def test_a_chain_of_three_passes_each_result_to_the_next(app):
    flow = app.chain(spec(app, 1), spec(app, 2), spec(app, 3)).enqueue()
    q = app.queue()
    seen = []

    def result(job, ins):
        seen.append(ins)
        return (ins[0] if ins else 0) * 10 + job.payload["i"]
    assert list(states(app, flow.id).values()) == ["ready", "held", "held"]
    run_all(app, result)
    assert seen == [[], [1], [12]]
    status = flow.status()
    assert (status.state, status.done, status.pending, status.total) == ("succeeded", 3, 0, 3)
    assert flow.results() == [123]
    assert q.where(list(states(app, flow.id))[2]) == ["done"]


def test_a_chord_of_1000_gets_every_result_in_group_order(app):
    children = [spec(app, i) for i in range(1000)]
    flow = app.chord(children, spec(app, "cb", "cb")).enqueue()
    q = app.queue()
    got = {}

    def result(job, ins):
        if job.type == "cb":
            got["ins"] = ins
            return len(ins)
        return job.payload["i"] * 2
    # the children run in any order (reversed here): the callback's inputs keep the group's
    ran = []
    while True:
        jobs = q.reserve("w", count=1000)
        if not jobs:
            break
        for job in reversed(jobs):
            ins = inputs(q, job.id) if job.flow_inputs else []
            ran.append(job.type)
            q.ack(job, result(job, ins))
    assert ran.count("cb") == 1 and ran[-1] == "cb"
    assert got["ins"] == [i * 2 for i in range(1000)]
    assert flow.status().state == "succeeded" and flow.results() == [1000]


def test_nested_chain_of_groups_fans_out_and_in(app):
    flow = app.chain(spec(app, "a"), app.parallel([spec(app, "b1"), app.chain(spec(app, "c1"), spec(app, "c2"))]),
                     spec(app, "d")).enqueue()
    seen = {}

    def result(job, ins):
        seen[job.payload["i"]] = ins
        return job.payload["i"]
    run_all(app, result)
    assert seen["a"] == [] and seen["b1"] == ["a"] and seen["c1"] == ["a"]
    assert seen["c2"] == ["c1"] and seen["d"] == ["b1", "c2"]
    assert flow.status().state == "succeeded" and flow.results() == ["d"]


def test_a_duplicate_or_stale_ack_and_a_sweep_never_settle_twice(app, clock):
    flow = app.chord([spec(app, 1), spec(app, 2)], spec(app, "cb", "cb")).enqueue()
    q = app.queue()
    first, second = q.reserve("w", count=2)
    q.ack(first, 1)
    with pytest.raises(LeaseLost):
        q.ack(first, 1)  # a duplicate ack: refused, nothing counted
    assert flow.status().done == 1
    clock.advance(31_000)  # the second's lease ends: the sweep puts it back
    assert q.sweep().requeued == 1
    with pytest.raises(LeaseLost):
        q.ack(second, 2)  # its old worker's ack carries a stale epoch
    again = q.reserve("w2", count=5)
    assert [j.id for j in again] == [second.id]
    q.ack_many([(again[0], 2), (again[0], 2)])  # one call holding it twice
    status = flow.status()
    assert (status.done, status.pending) == (2, 1)
    cb = q.reserve("w", count=5)
    assert [j.type for j in cb] == ["cb"]
    assert inputs(q, cb[0].id) == [1, 2]
    q.ack(cb[0], "ok")
    assert flow.status().state == "succeeded" and flow.status().done == 3
    assert q.reserve("w", count=5) == []
