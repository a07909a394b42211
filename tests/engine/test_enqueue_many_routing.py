"""``app.enqueue_many`` sends each spec where ``enqueue`` sends it: to its handler's queue
(``app.spec``, ``task.spec``), the default queue for a type without a handler, every spec to
``queue=`` when it is given; the ids come back in the order of the specs, and each queue's
share is one batched call."""

from __future__ import annotations

from antre import Antre
from antre.clock import ManualClock


def _app(redis_url: str) -> Antre:
    app = Antre(redis_url=redis_url, clock=ManualClock(1_700_000_000_000))

    @app.handler("email", queue="emails")
    def email(ctx, payload):
        return None

    @app.handler("report")
    def report(ctx, payload):
        return None

    @app.task(queue="bills", key=lambda order_id: f"bill:{order_id}")
    def bill(ctx, order_id: int) -> None:
        return None

    app.bill = bill  # type: ignore[attr-defined]
    return app


def test_each_spec_goes_to_its_handlers_queue_as_enqueue_sends_it(redis_url):
    app = _app(redis_url)
    specs = [app.spec("email", {"n": 1}, idempotency_key="e1"),
             app.spec("report", {"n": 2}, idempotency_key="r1"),
             app.bill.spec(order_id=7),
             app.spec("email", {"n": 3}, idempotency_key="e2"),
             app.spec("unknown", {"n": 4}, idempotency_key="u1")]
    ids = app.enqueue_many(specs)
    assert len(set(ids)) == 5
    where = {job_id: app.finder.locate(job_id).queue for job_id in ids}
    assert [where[i] for i in ids] == ["emails", "default", "bills", "emails", "default"]
    one = app.enqueue("email", {"n": 5}, idempotency_key="e3")
    assert app.finder.locate(one).queue == "emails"  # where enqueue sends it too
    emails = app.queue("emails")
    assert [emails.get(i).payload["n"] for i in (ids[0], ids[3])] == [1, 3]


def test_queue_given_sends_every_spec_there(redis_url):
    app = _app(redis_url)
    ids = app.enqueue_many([app.spec("email", {}, idempotency_key="a"),
                            app.spec("report", {}, idempotency_key="b")], queue="side")
    assert {app.finder.locate(i).queue for i in ids} == {"side"}


def test_over_several_queues_one_bad_spec_stores_none(redis_url):
    import pytest

    from antre import InvalidJob
    app = _app(redis_url)
    good = app.spec("report", {"n": 1}, idempotency_key="r1")
    bad = app.spec("email", {"n": float("nan")}, idempotency_key="e1")
    with pytest.raises(InvalidJob):
        app.enqueue_many([good, bad])
    assert app.redis.llen(app.queue("default").keys.ready) == 0


def test_aenqueue_many_routes_each_spec_to_its_handlers_queue(redis_url):
    from helpers import run_async
    app = _app(redis_url)
    specs = [app.spec("email", {}, idempotency_key="ae"), app.spec("report", {},
                                                                   idempotency_key="ar")]
    ids = run_async(app.aenqueue_many(specs))
    assert [app.finder.locate(i).queue for i in ids] == ["emails", "default"]
