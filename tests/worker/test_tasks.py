"""Typed tasks (``@app.task``, ``antre.tasks``): the producer's arguments are the handler's,
checked at enqueue; a real in-process worker runs them, and a payload that no longer fits goes
to the DLQ with the reason."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal, Optional

import pytest
from helpers import burst

from antre import InvalidJob, Task
from antre.testing import assert_enqueued, drain, record


@dataclass
class Invoice:
    order_id: int
    amount_cents: int
    currency: str = "EUR"


def register(app):
    @app.task(key=lambda to, subject: f"email:{to}:{subject}", max_attempts=2)
    def send_email(ctx, to: str, subject: str, urgent: bool = False) -> dict:
        return {"to": to, "subject": subject, "urgent": urgent, "attempt": ctx.attempt}

    @app.task("bill", model=Invoice)
    def bill(ctx, invoice: Invoice) -> int:
        assert isinstance(invoice, Invoice)
        return invoice.amount_cents * 2

    @app.task(key=lambda n: f"slow:{n}")
    async def slow_double(ctx, n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    return send_email, bill, slow_double


def test_a_task_enqueues_its_own_arguments_and_the_worker_runs_them(app, clock, q):
    send_email, _, _ = register(app)
    record(app)  # antre.testing: what the app enqueues, for assert_enqueued
    assert isinstance(send_email, Task) and "send_email" in app.handlers
    job_id = send_email.enqueue("a@example.org", subject="welcome")
    assert q.get(job_id).payload == {"to": "a@example.org", "subject": "welcome"}
    assert_enqueued(app, type="send_email", payload={"to": "a@example.org"}, count=1,
                    idempotency_key="email:a@example.org:welcome")
    other = send_email.using(idempotency_key="email:42", delay_s=0).enqueue(
        to="b@example.org", subject="hi", urgent=True)
    done = drain(app)
    assert sorted(e.job_id for e in done.succeeded) == sorted([job_id, other])
    assert app.job(job_id).result == {"to": "a@example.org", "subject": "welcome",
                                      "urgent": False, "attempt": 1}
    assert app.job(other).result["urgent"] is True


def test_the_string_api_reaches_the_same_handler(app, clock):
    register(app)
    job_id = app.enqueue("send_email", {"to": "c@example.org", "subject": "s"},
                         idempotency_key="email:c")
    burst(app, clock)
    assert app.job(job_id).result["to"] == "c@example.org"


def test_arguments_that_do_not_fit_are_refused_at_enqueue(app, q):
    send_email, bill, _ = register(app)
    with pytest.raises(InvalidJob, match="send_email: .*'too'"):
        send_email.enqueue(to="a@example.org", subject="s", too=1)  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match="missing a required argument: 'subject'"):
        send_email.enqueue(to="a@example.org")  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match="has no key=.*using\\(idempotency_key="):
        bill.enqueue(Invoice(1, 100))
    with pytest.raises(InvalidJob, match="unknown field 'amount'"):
        bill.using(idempotency_key="bill:1").enqueue({"order_id": 1, "amount": 5})  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="must be a Invoice, not str"):
        bill.using(idempotency_key="bill:1").enqueue("nope")  # type: ignore[arg-type]
    assert q.stats().get("enqueued", 0) == 0


def test_a_model_payload_is_rebuilt_in_the_worker_and_a_misfit_goes_to_the_dlq(app, clock, q):
    _, bill, _ = register(app)
    good = bill.using(idempotency_key="bill:1").enqueue(Invoice(order_id=1, amount_cents=250))
    assert q.get(good).payload == {"order_id": 1, "amount_cents": 250, "currency": "EUR"}
    # a payload written before the model changed (or by the string API) no longer fits
    bad = app.enqueue("bill", {"order_id": 2, "cents": 9}, idempotency_key="bill:2")
    done = drain(app)
    assert app.job(good).result == 500
    dead = app.job(bad)
    assert dead.state == "dead"
    assert "payload does not fit Invoice: unknown field 'cents'" in (dead.reason + dead.last_error)
    assert dead.attempts == 1  # permanent: not retried
    assert [(e.job_id, e.error_kind, e.attempt) for e in done.dead] == [(bad, "permanent", 1)]


def test_an_async_task_runs_on_the_loop(app, clock):
    _, _, slow_double = register(app)
    job_id = slow_double.enqueue(21)
    assert app.handlers["slow_double"].is_async
    burst(app, clock)
    assert app.job(job_id).result == 42


def test_a_task_is_still_callable_as_the_function(app):
    send_email, _, _ = register(app)

    class Ctx:
        attempt = 7
    assert send_email(Ctx(), "x@example.org", "s")["attempt"] == 7


def test_a_task_with_star_args_is_refused_at_registration(app):
    with pytest.raises(InvalidJob, match="named parameters"):
        @app.task()
        def loose(ctx, *args):
            return None


@dataclass
class Line:
    sku: str
    qty: int = 1


@dataclass
class Order:
    lines: list[Line]
    kind: Literal["retail", "trade"] = "retail"
    note: Optional[str] = None
    prices: dict[str, float] | None = None


def test_a_dataclass_models_json_schema_says_what_the_worker_accepts(app, clock, q):
    @app.task("order", model=Order)
    def order(ctx, o: Order) -> int:
        return len(o.lines)

    schema = order.json_schema()
    assert schema["required"] == ["lines"] and schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["lines"]["items"]["properties"]["qty"] == {"type": "integer", "default": 1}
    assert props["kind"] == {"enum": ["retail", "trade"], "default": "retail"}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["prices"]["anyOf"][0] == {"type": "object",
                                          "additionalProperties": {"type": "number"}}
    register(app)
    assert app.tasks["send_email"].json_schema() is None  # no model=: its signature's fields
    job_id = q.enqueue("order", {"lines": [], "surprise": 1}, idempotency_key="o:1")
    burst(app, clock)  # what the schema refuses (additionalProperties), the worker buries
    assert q.get(job_id).state == "dead" and "unknown field 'surprise'" in q.get(job_id).reason
