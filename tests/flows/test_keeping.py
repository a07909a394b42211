"""What is kept of a flow (issue 26): a finished flow's records go with the done jobs'
retention, a failed one stays for its operator; a member removed by an operator (deleted from
ready) counts as dead for its flow, so the flow never waits on a job that is gone."""

from __future__ import annotations

from antre import Antre
from antre.control.purge import Purger
from antre.control.retention import Retention, RetentionPolicy
from antre.flows import FlowReader
from antre.observe import metrics


def spec(app: Antre, i: object) -> object:
    return app.spec("t", {"i": i}, idempotency_key=f"k:{i}")


def finish(app: Antre, fail: set = frozenset()) -> None:
    q = app.queue()
    while jobs := q.reserve("w", count=10):
        for job in jobs:
            if job.payload["i"] in fail:
                q.bury(job, reason="no")
            else:
                q.ack(job, job.payload["i"])


def test_finished_flows_go_with_the_done_jobs_retention_failed_ones_stay(app, clock):
    ok = app.chain(spec(app, 1), spec(app, 2)).enqueue()
    bad = app.chain(spec(app, 3), spec(app, 4)).enqueue()
    finish(app, fail={3})
    k = app.queue().keys
    policy = RetentionPolicy(done_max_age_s=3600)
    retention = Retention(app.redis, clock=clock)
    retention.run("default", policy)
    assert ok.status().state == "succeeded"  # not old enough yet
    clock.advance(3_601_000)
    retention.run("default", policy)
    assert FlowReader(app.redis).get("default", ok.id) is None
    assert app.redis.exists(k.flow_results(ok.id), k.flow_jobs(ok.id), k.flow_wake(ok.id)) == 0
    assert bad.status().state == "failed"  # kept for the operator
    assert app.queue().stats()["flows_dropped"] == 1


def test_a_member_deleted_by_an_operator_counts_as_dead_for_its_flow(app, clock):
    flow = app.chord([spec(app, 1), spec(app, 2)], spec(app, "cb")).enqueue(
        ignore_failures=True)
    first = FlowReader(app.redis).tree("default", flow.id).jobs[0]
    assert Purger(app.redis, clock).delete("default", first.id) == "ready"
    finish(app)
    status = flow.status()
    assert (status.state, status.failed, status.done) == ("succeeded", 1, 2)
    assert flow.results() == ["cb"]


def test_held_jobs_are_a_state_of_the_queue_depth_metric(app, clock):
    app.chord([spec(app, 1), spec(app, 2)], spec(app, "cb")).enqueue()
    body, _ = metrics.render(app.redis, clock)
    assert 'antre_queue_depth{queue="default",state="held"} 1.0' in body.decode()
