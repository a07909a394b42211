"""What is kept of a flow: a finished flow's records go with the done jobs'
retention, a failed or waiting one stays for its operator as long as a dead job is kept,
then goes with its held jobs (none left outside every list); a member removed by an operator
(deleted from ready) counts as dead for its flow, so the flow never waits on a job that is
gone."""

from __future__ import annotations

from antre import Antre
from antre.control.purge import Purger
from antre.maintenance.retention import Retention, RetentionPolicy
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


DAY_MS = 86_400_000


def test_failed_and_waiting_flows_go_with_their_held_jobs_after_the_dead_jobs_age(app, clock):
    q, k = app.queue(), app.queue().keys
    failed = app.chain(spec(app, 1), spec(app, 2), spec(app, 3)).enqueue()
    finish(app, fail={1})
    clock.advance(DAY_MS)  # the waiting one begins waiting a day later: its clock starts then
    waiting = app.chain(spec(app, 4), spec(app, 5)).enqueue(on_failure="wait")
    finish(app, fail={4})
    assert (failed.status().state, waiting.status().state) == ("failed", "waiting")
    held = {j.id for f in (failed, waiting) for j in FlowReader(app.redis).tree(
        "default", f.id).jobs if j.state == "held"}
    assert len(held) == 3
    policy = RetentionPolicy(dead_max_age_s=7 * 86_400)
    retention = Retention(app.redis, clock=clock)
    clock.advance(6 * DAY_MS - 1)  # the failed one: one ms short of 7 days
    retention.run("default", policy)
    assert failed.status().state == "failed" and waiting.status().state == "waiting"
    clock.advance(2)
    retention.run("default", policy)
    reader = FlowReader(app.redis)
    assert reader.get("default", failed.id) is None and waiting.status().state == "waiting"
    gone = {j for j in held if not app.redis.exists(k.job(j))}
    assert len(gone) == 2 and app.redis.zcard(k.held) == 1  # the failed flow's two
    assert q.stats()["flow_held_dropped"] == 2 and q.stats()["flows_dropped"] == 1
    clock.advance(DAY_MS)
    retention.run("default", policy)
    assert reader.get("default", waiting.id) is None
    assert not any(app.redis.exists(k.job(j)) for j in held) and app.redis.zcard(k.held) == 0
    assert q.stats()["flow_held_dropped"] == 3 and q.stats()["flows_dropped"] == 2
    for f in (failed, waiting):
        assert app.redis.exists(k.flow(f.id), k.flow_jobs(f.id), k.flow_results(f.id),
                                k.flow_failed(f.id), k.flow_wake(f.id)) == 0
    assert app.redis.exists(k.flow_trims) == 0
    assert app.redis.zcard(k.dead) == 0  # their dead members went by their own retention


def test_a_large_failed_flow_is_walked_a_chunk_per_call_and_a_late_ack_changes_nothing(app,
                                                                                       clock):
    q, k = app.queue(), app.queue().keys
    flow = app.chord([spec(app, 1), spec(app, 2)],
                     app.chain(*(spec(app, f"c{i}") for i in range(7)))).enqueue()
    one, two = q.reserve("w", count=2)
    q.bury(one if one.payload["i"] == 1 else two, reason="no")
    running = two if one.payload["i"] == 1 else one  # still in flight when its flow goes
    assert flow.status().state == "failed" and app.redis.zcard(k.held) == 7
    clock.advance(31 * DAY_MS)
    got = Retention(app.redis, clock=clock).run("default", RetentionPolicy(), chunk=3)
    assert got.flow_steps >= 9 + 1  # every job looked at, over several calls
    assert app.redis.zcard(k.held) == 0 and q.stats()["flow_held_dropped"] == 7
    assert FlowReader(app.redis).get("default", flow.id) is None
    assert app.redis.exists(k.flow_jobs(flow.id), k.flow_trims) == 0
    q.ack(running, "late")  # its flow is gone: it ends as a done job, nothing released
    assert app.redis.zcard(k.held) == 0 and app.redis.zscore(k.done, running.id) is not None
    assert app.redis.llen(k.ready) == 0


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
