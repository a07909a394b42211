"""Edges of flows: typed tasks as steps, a dependent whose record is broken (the
parent's ack still completes, the broken one is passed over), a batch of compositions, two
jobs given one id refused."""

from __future__ import annotations

import pytest

from antre import Antre, InvalidJob
from antre.flows import FlowReader
from antre.flows.read import inputs


def test_typed_task_specs_are_steps(app):
    @app.task(key=lambda n: f"double:{n}")
    def double(ctx, n: int) -> int:
        return 2 * n

    flow = app.chain(double.spec(n=1), double.spec(n=2)).enqueue()
    tree = FlowReader(app.redis).tree("default", flow.id)
    assert [j.type for j in tree.jobs] == ["double", "double"]
    assert tree.jobs[1].parents == (tree.jobs[0].id,)
    assert tree.jobs[0].children == (tree.jobs[1].id,)
    links = FlowReader(app.redis).links("default", tree.jobs[1].id)
    assert links is not None and links.flow_id == flow.id and links.flow_state == "running"
    assert FlowReader(app.redis).links("default", "nope") is None


def test_a_broken_dependent_record_does_not_fail_its_parents_ack(app):
    a = app.spec("t", {"i": 1}, idempotency_key="a")
    b = app.spec("t", {"i": 2}, idempotency_key="b")
    flow = app.chain(a, b).enqueue()
    first, second = FlowReader(app.redis).tree("default", flow.id).jobs
    q = app.queue()
    app.redis.delete(q.keys.job(second.id))
    app.redis.set(q.keys.job(second.id), "garbage")  # not a hash any more
    (job,) = q.reserve("w")
    q.ack(job, 1)
    assert q.get(first.id).state == "done"
    assert flow.status().done == 1


def test_a_batch_takes_compositions_and_every_job_is_a_member(app):
    b = app.batch()
    ids = b.add(app.chain(app.spec("t", {"i": 1}, idempotency_key="c1"),
                          app.spec("t", {"i": 2}, idempotency_key="c2")))
    b.close()
    q = app.queue()
    seen = []
    while jobs := q.reserve("w", count=10):
        for job in jobs:
            seen.append(inputs(q, job.id) if job.flow_inputs else [])
            q.ack(job, job.payload["i"])
    assert seen == [[], [1]] and len(ids) == 2
    assert b.status().state == "succeeded" and b.results() == [1, 2]


def test_two_jobs_with_one_id_are_refused(app: Antre):
    one = app.spec("t", {}, idempotency_key="x", job_id="same")
    with pytest.raises(InvalidJob, match="same job_id"):
        app.parallel([one, app.spec("t", {}, idempotency_key="y", job_id="same")]).enqueue()
    with pytest.raises(InvalidJob, match="parallel\\(\\) takes a list"):
        app.parallel(one)  # type: ignore[arg-type]


def test_the_old_spelling_of_a_fan_out_warns_and_still_works(app: Antre):
    with pytest.warns(DeprecationWarning, match=r"app\.parallel"):
        flow = app.group([app.spec("t", {}, idempotency_key="old")])
    assert type(flow).__name__ == "Parallel"


def test_the_old_name_of_limit_policy_warns_and_is_the_same_class():
    import antre
    with pytest.warns(DeprecationWarning, match="LimitPolicy"):
        old = antre.FlowPolicy
    assert old is antre.LimitPolicy
