"""Time to drain, checked against a backlog really drained: jobs acked at a varying pace on a
manual clock, the worker pool's samples taken as it goes; the estimate made from the last ten
minutes is within 25% of the time the rest of the backlog then took, inside its range, and the
"more workers" figure is the linear one."""

from __future__ import annotations

import itertools

from antre.observe import sampling
from antre.observe.drain import DrainModel, estimate, rates
from antre.observe.readmodels import ReadModels
from antre.observe.registry import WorkerInfo, WorkerRegistry

STEP_MS = 30_000
PACE = (8, 12, 10, 7, 13)  # jobs acked per step: 20 a minute on average, unevenly


def _step(app, q, clock, n: int) -> int:
    jobs = q.reserve("w1", count=n)
    for job in jobs:
        q.ack(job)
    clock.advance(STEP_MS)
    sampling.take(app.redis, clock)
    WorkerRegistry(app.redis, clock).beat(WorkerInfo("w1", queues=["default"]))  # alive
    return len(jobs)


def test_the_estimate_is_within_a_quarter_of_the_measured_drain(app, q, clock):
    q.enqueue_many([app.spec("import", {"n": i}, idempotency_key=f"import:{i}")
                    for i in range(1000)])
    sampling.take(app.redis, clock)
    pace = itertools.cycle(PACE)
    for _ in range(20):  # ten minutes of history
        _step(app, q, clock, next(pace))
    drain = DrainModel(app.redis, clock).queue(ReadModels(app.redis, clock).queue_info("default"))
    assert drain.backlog == 1000 - 200
    started = clock()
    while _step(app, q, clock, next(pace)):
        pass
    measured_s = (clock() - started - STEP_MS) / 1000  # (the last step found nothing)
    assert drain.seconds is not None
    assert abs(drain.seconds - measured_s) <= 0.25 * measured_s, (drain, measured_s)
    assert drain.low_s is not None and drain.high_s is not None
    assert drain.low_s < drain.seconds < drain.high_s
    assert drain.low_s <= measured_s <= drain.high_s
    assert drain.workers == 1
    assert dict(drain.more)[1] == drain.seconds / 2  # twice the workers, half the time


def test_no_completion_lately_gives_no_estimate_and_an_empty_backlog_zero(app, q, clock):
    q.enqueue("import", {}, idempotency_key="import:x")
    for _ in range(3):
        clock.advance(STEP_MS)
        sampling.take(app.redis, clock)
    drain = DrainModel(app.redis, clock).queue(ReadModels(app.redis, clock).queue_info("default"))
    assert (drain.backlog, drain.seconds, drain.high_s) == (1, None, None)
    assert estimate(0, 0.0, []).seconds == 0.0


def test_a_window_that_completed_nothing_leaves_the_range_open():
    samples = [{"t": t * 1000, "acked": a} for t, a in ((0, 0), (10, 10), (20, 10), (30, 30))]
    whole, spread = rates(samples, windows=3)
    assert whole == 1.0 and spread == [1.0, 0.0, 2.0]
    drain = estimate(60, whole, spread)
    assert (drain.seconds, drain.low_s, drain.high_s) == (60.0, 30.0, None)


def test_the_drain_metric_is_the_estimate(app, q, clock):
    from prometheus_client.parser import text_string_to_metric_families

    from antre.observe import metrics

    q.enqueue_many([app.spec("import", {"n": i}, idempotency_key=f"m:{i}") for i in range(100)])
    sampling.take(app.redis, clock)
    for n in PACE:
        _step(app, q, clock, n)
    drain = DrainModel(app.redis, clock).queue(ReadModels(app.redis, clock).queue_info("default"))
    body, _ = metrics.render(app.redis, clock)
    found = {(f.name, tuple(sorted(s.labels.items()))): s.value
             for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert found[("antre_queue_drain_seconds", (("queue", "default"),))] == drain.seconds
    assert drain.seconds == (100 - sum(PACE)) / (sum(PACE) / (len(PACE) * STEP_MS / 1000))
    low = found[("antre_queue_drain_range_seconds", (("bound", "low"), ("queue", "default")))]
    assert low == drain.low_s < drain.seconds


def test_a_backlog_slower_to_drain_than_the_threshold_is_an_incident(app, q, clock):
    from antre.observe.alerts import AlertConfig, AlertEngine
    from antre.observe.incidents import incident_view

    q.enqueue_many([app.spec("import", {"n": i}, idempotency_key=f"a:{i}") for i in range(400)])
    sampling.take(app.redis, clock)
    for n in PACE:
        _step(app, q, clock, n)  # 50 in 2.5 min: 350 to go, about 17 min
    rules = AlertConfig(drain_s=3600).rules()
    AlertEngine(app.redis, clock, rules=rules).check()
    assert "drain_too_long|default" not in {i.id for i in incident_view(app.redis, clock).open}
    AlertEngine(app.redis, clock, rules=AlertConfig(drain_s=600).rules()).check()
    (inc,) = [i for i in incident_view(app.redis, clock).open if i.id == "drain_too_long|default"]
    assert inc.title == "Slow to drain" and inc.threshold == 600
    assert "350 jobs to drain" in inc.message and inc.value == 1050.0
    assert "+1 worker: " in inc.message  # what one more worker would make of it
