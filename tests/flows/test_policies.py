"""What a dead member does to its flow: fail (default) stops what comes after it and
says where and why, ignore lets it run with the failure in its results, wait holds the flow for
an operator; a replayed dead member that then completes lets the flow go on. Batches: jobs
added over time, on_complete / on_success once the batch is closed and settled."""

from __future__ import annotations

import pytest

from antre import Antre
from antre.flows import ChildFailure, FlowError, FlowReader
from antre.observe.readmodels import ReadModels
from antre.flows.read import inputs


def spec(app: Antre, i: object, job_type: str = "t") -> object:
    return app.spec(job_type, {"i": i}, idempotency_key=f"k:{job_type}:{i}")


def step(app: Antre, fail: set = frozenset()) -> list:
    """One pass: reserve what is ready; bury those whose payload 'i' is in ``fail``, ack the
    others with their inputs. Returns [(type, i, inputs)]."""
    q = app.queue()
    out = []
    for job in q.reserve("w", count=100):
        ins = inputs(q, job.id) if job.flow_inputs else []
        if job.payload["i"] in fail:
            q.bury(job, reason=f"boom {job.payload['i']}")
        else:
            q.ack(job, job.payload["i"])
        out.append((job.type, job.payload["i"], ins))
    return out


def drain(app: Antre, fail: set = frozenset()) -> list:
    ran = []
    while True:
        got = step(app, fail)
        if not got:
            return ran
        ran += got


def test_fail_stops_the_callback_and_says_which_job_and_why(app):
    flow = app.chord([spec(app, 1), spec(app, 2)], spec(app, "cb", "cb")).enqueue()
    ran = drain(app, fail={2})
    assert [r[0] for r in ran] == ["t", "t"]
    status = flow.status()
    assert (status.state, status.failed, status.pending, status.done) == ("failed", 1, 2, 1)
    assert status.to_go == 1  # the callback: the dead member counts once, as failed
    dead = app.queue().get(status.failed_job)
    assert dead.state == "dead" and status.failed_reason == "boom 2"
    tree = FlowReader(app.redis).tree("default", flow.id)
    assert [j.state for j in tree.jobs] == ["done", "dead", "held"]
    assert app.queue().where(tree.jobs[2].id) == ["held"]  # in exactly one place
    assert ReadModels(app.redis, app.clock).queue_info("default").held == 1
    assert app.finder.job_status(tree.jobs[2].id).state == "held"


def test_a_replayed_dead_member_that_completes_lets_the_flow_go_on(app):
    flow = app.chord([spec(app, 1), spec(app, 2)], spec(app, "cb", "cb")).enqueue()
    drain(app, fail={2})
    failed_job = flow.status().failed_job
    assert app.queue().replay(failed_job)
    assert flow.status().state == "failed"  # still: until the replay completes
    ran = drain(app)
    assert [(t, i) for t, i, _ in ran] == [("t", 2), ("cb", "cb")]
    assert ran[-1][2] == [1, 2]
    status = flow.status()
    assert (status.state, status.failed, status.done) == ("succeeded", 0, 3)


def test_ignore_runs_the_callback_with_the_failure_in_its_results(app):
    flow = app.chord([spec(app, 1), spec(app, 2)], spec(app, "cb", "cb")).enqueue(
        ignore_failures=True)
    ran = drain(app, fail={2})
    cb_inputs = ran[-1][2]
    assert ran[-1][0] == "cb" and cb_inputs[0] == 1
    assert isinstance(cb_inputs[1], ChildFailure) and cb_inputs[1].error == "boom 2"
    status = flow.status()
    assert (status.state, status.failed, status.done, status.to_go) == ("succeeded", 1, 2, 0)


def test_wait_holds_the_flow_for_an_operator(app):
    flow = app.chain(spec(app, 1), spec(app, 2)).enqueue(on_failure="wait")
    drain(app, fail={1})
    status = flow.status()
    assert status.state == "waiting" and status.failed == 1 and status.to_go == 1
    assert FlowReader(app.redis).list_flows("default", "waiting").rows[0].id == flow.id
    app.queue().replay(status.failed_job)
    drain(app)
    assert flow.status().state == "succeeded"
    assert FlowReader(app.redis).counts("default")["succeeded"] == 1


def test_a_batch_gets_jobs_over_time_and_fires_its_callbacks_once_closed(app):
    b = app.batch(on_success=spec(app, "ok", "report"), on_complete=spec(app, "end", "report"),
                  description="nightly import")
    b.add(spec(app, 1), spec(app, 2))
    assert drain(app) == [("t", 1, []), ("t", 2, [])]  # settled, but the batch is open
    assert b.status().state == "running" and b.status().open
    b.add(spec(app, 3))
    b.close()
    ran = drain(app)
    assert sorted(str(i) for _, i, _ in ran) == ["3", "end", "ok"]
    status = b.status()
    assert (status.state, status.total, status.done) == ("succeeded", 3, 3)
    assert b.results() == [1, 2, 3]
    with pytest.raises(FlowError, match="closed"):
        b.add(spec(app, 4))


def test_a_batch_with_a_dead_job_completes_then_succeeds_after_its_replay(app):
    with app.batch(on_success=spec(app, "ok", "report"),
                   on_complete=spec(app, "end", "report")) as b:
        b.add(spec(app, 1), spec(app, 2))
    ran = drain(app, fail={2})
    assert [i for t, i, _ in ran if t == "report"] == ["end"]
    assert b.status().state == "failed"
    dead = [j for j in FlowReader(app.redis).tree("default", b.id).jobs if j.state == "dead"]
    app.queue().replay(dead[0].id)
    ran = drain(app)
    assert [(t, i) for t, i, _ in ran] == [("t", 2), ("report", "ok")]
    assert b.status().state == "succeeded" and b.results() == [1, 2]
