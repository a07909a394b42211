"""Flows through a real worker: handlers get ``ctx.previous_result`` and
``ctx.flow_results``, a result over ``ANTRE_FLOW_RESULT_MAX`` fails its job with the reason,
and bad input is refused at enqueue with ``InvalidJob`` and nothing of the flow stored."""

from __future__ import annotations

import pytest

from antre import Antre, InvalidJob
from antre.flows import Chain, FlowReader
from helpers import burst, make_worker


@pytest.fixture
def flow_app(app: Antre) -> tuple[Antre, list]:
    seen: list = []

    @app.handler("add")
    def add(ctx, payload):
        seen.append(("add", ctx.previous_result, ctx.flow_id != ""))
        return (ctx.previous_result or 0) + payload["n"]

    @app.handler("total")
    def total(ctx, payload):
        seen.append(("total", list(ctx.flow_results)))
        return sum(ctx.flow_results)

    @app.handler("big")
    def big(ctx, payload):
        return "x" * 70_000

    return app, seen


def add(app: Antre, n: int) -> object:
    return app.spec("add", {"n": n}, idempotency_key=f"add:{n}")


def test_handlers_get_the_previous_result_and_a_callback_every_result(flow_app, clock):
    app, seen = flow_app
    chain = app.chain(add(app, 1), add(app, 2), add(app, 3)).enqueue()
    chord = app.chord([add(app, 10), add(app, 20)],
                      app.spec("total", {}, idempotency_key="total")).enqueue()
    burst(app, clock)
    assert chain.status().state == "succeeded" and chain.results() == [6]
    assert chord.results() == [30]
    assert ("add", 3, True) in seen and ("total", [10, 20]) in seen


def test_a_burst_worker_runs_a_chord_of_1000_and_its_callback_gets_them_in_order(flow_app,
                                                                                 clock):
    app, seen = flow_app
    flow = app.chord([add(app, n) for n in range(1000)],
                     app.spec("total", {}, idempotency_key="total:1000")).enqueue()
    burst(app, clock, threads=2)
    totals = [s for s in seen if s[0] == "total"]
    assert len(totals) == 1 and totals[0][1] == list(range(1000))  # once, in group order
    assert flow.status().state == "succeeded" and flow.results() == [sum(range(1000))]


def test_an_async_callback_gets_every_result(app, clock):
    @app.handler("part")
    async def part(ctx, payload):
        return payload["n"]

    @app.handler("gather")
    async def gather(ctx, payload):
        return [r * 2 for r in ctx.flow_results]

    flow = app.chord([app.spec("part", {"n": n}, idempotency_key=f"p{n}") for n in range(3)],
                     app.spec("gather", {}, idempotency_key="g")).enqueue()
    make_worker(app, clock, concurrency=10).run_burst()
    assert flow.status().state == "succeeded" and flow.results() == [[0, 2, 4]]


def test_a_result_over_the_flow_limit_fails_its_job_with_the_reason(flow_app, clock):
    app, _ = flow_app
    flow = app.chain(app.spec("big", {}, idempotency_key="big"), add(app, 1)).enqueue()
    burst(app, clock)
    status = flow.status()
    assert status.state == "failed"
    assert "ANTRE_FLOW_RESULT_MAX" in status.failed_reason
    assert "65536" in status.failed_reason


def _nothing_stored(app: Antre) -> None:
    k = app.queue().keys
    assert app.redis.llen(k.ready) == 0 and app.redis.zcard(k.held) == 0
    assert app.redis.zcard(k.flows_by_state("running")) == 0
    assert app.redis.keys("antre:{default}:job:*") == []


def test_bad_input_is_refused_and_nothing_of_the_flow_is_stored(flow_app):
    app, _ = flow_app
    loop = Chain(add(app, 1))
    loop.steps.append(loop)  # a composition inside itself
    with pytest.raises(InvalidJob, match="cycle"):
        app.chain(add(app, 0), loop).enqueue()
    with pytest.raises(InvalidJob, match="no handler"):
        app.chain(add(app, 1), app.spec("ad", {}, idempotency_key="typo")).enqueue()
    with pytest.raises(InvalidJob, match="JSON"):
        app.parallel([add(app, 1), app.spec("add", {"n": object()}, idempotency_key="o")]).enqueue()
    with pytest.raises(InvalidJob, match="at least one job"):
        app.chord([], add(app, 1)).enqueue()
    with pytest.raises(InvalidJob, match="on_failure"):
        app.chain(add(app, 1)).enqueue(on_failure="retry")
    with pytest.raises(InvalidJob, match="unique"):
        app.chain(app.spec("add", {"n": 1}, idempotency_key="u", unique=True)).enqueue()
    _nothing_stored(app)


def test_a_job_whose_handler_runs_on_another_queue_is_refused(flow_app):
    app, _ = flow_app

    @app.handler("elsewhere", queue="other")
    def elsewhere(ctx, payload):
        return None
    with pytest.raises(InvalidJob, match="queue"):
        app.chain(add(app, 1), app.spec("elsewhere", {}, idempotency_key="e")).enqueue()
    _nothing_stored(app)
    flow = app.chain(add(app, 1), app.spec("elsewhere", {}, idempotency_key="e")).enqueue(
        queue="other")
    assert FlowReader(app.redis).get("other", flow.id).total == 2
    assert app.flow(flow.id).queue == "other"


def test_an_id_that_exists_already_stores_nothing(flow_app):
    app, _ = flow_app
    app.chain(add(app, 1)).enqueue(flow_id="f1")
    with pytest.raises(InvalidJob, match="exists"):
        app.chain(add(app, 2), add(app, 3)).enqueue(flow_id="f1")
    assert FlowReader(app.redis).get("default", "f1").total == 1
