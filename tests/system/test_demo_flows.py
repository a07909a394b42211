"""The demo's invoice webhook as a chord, end to end on real Redis and SQL with the
real worker: ledger, receipt email and stock hold fan out, ``close_order`` closes the order
once with their results in order; a stock-out fails the flow with the member's reason and the
callback does not run; replaying the flow's dead job (the table's ``flow.replay_failed``) lets
it finish, the order closed exactly once; the traffic's duplicates write nothing twice."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from antre.actions import Actor, Ops, by_name, parse
from antre.clock import ManualClock, system_ms
from antre_demo import Traffic, faults, report
from antre_demo import tables as t
from antre_demo.orders import order_flow
from antre_worker.runner import WorkerProcess

EVENT = {"order_id": "ORD-42", "customer": "acme", "amount_cents": 12_300,
         "event": "order.paid", "user_id": 7, "sku": "SKU-001", "units": 2}


@pytest.fixture
def clock():
    return ManualClock(start_ms=system_ms())


@pytest.fixture
def app(demo_app, monkeypatch):
    for name in ("email_timeout_rate", "flaky_rate", "rate_limit_rate", "stock_out_rate"):
        monkeypatch.setattr(faults, name, 0.0)
    return demo_app


def drain(app, clock, rounds: int = 40) -> None:
    q = app.queue("webhooks")
    for _ in range(rounds):
        WorkerProcess(app, queues=["webhooks"], threads=2, clock=clock).run_burst()
        if not (app.redis.llen(q.keys.ready) or app.redis.zcard(q.keys.scheduled)
                or app.redis.zcard(q.keys.inflight)):
            return
        clock.advance(30_000)
    raise AssertionError("webhooks not drained")


def closed(app) -> list[tuple[str, str, int]]:
    with app.session_factory() as s:
        return [tuple(r) for r in s.execute(sa.select(
            t.orders_closed.c.order_id, t.orders_closed.c.invoice_ref,
            t.orders_closed.c.units_held)).all()]


def test_an_order_chord_closes_the_order_once_with_every_result(app, clock):
    flow, ids = order_flow(app, EVENT)
    drain(app, clock)
    assert flow.status().state == "succeeded" and flow.status().done == 4
    (result,) = flow.results()
    assert result["closed"] is True and result["invoice_ref"].startswith("INV-")
    assert closed(app) == [("ORD-42", result["invoice_ref"], 2)]
    assert [app.queue("webhooks").get(i).state for i in ids] == ["done"] * 4


def test_a_stock_out_fails_the_flow_and_a_replay_of_its_dead_job_closes_it(app, clock,
                                                                          monkeypatch):
    monkeypatch.setattr(faults, "stock_out_rate", 1.0)
    flow, ids = order_flow(app, EVENT)
    drain(app, clock)
    row = flow.status()
    assert row.state == "failed" and row.failed_job == ids[2]
    assert "SKU-001 is out of stock" in row.failed_reason
    assert closed(app) == []  # the callback did not run
    monkeypatch.setattr(faults, "stock_out_rate", 0.0)
    action = by_name("flow.replay_failed")
    args = parse(action, {"queue": "webhooks", "flow_id": flow.id}, {"reason": "restocked"})
    result = action.run(Ops(app), Actor("ops", "operator"), args)
    assert result.ok and result.detail["replayed"] == 1, result.message
    drain(app, clock)
    assert flow.status().state == "succeeded"
    assert [o for o, _, _ in closed(app)] == ["ORD-42"]


def test_the_traffics_webhooks_are_chords_and_no_effect_happens_twice(app, clock, monkeypatch):
    monkeypatch.setattr(faults, "email_timeout_rate", 0.3)
    traffic = Traffic(app, seed=7, mix={"webhook": 1}, poison_every_s=None,
                      webhook_dup_rate=0.6)
    traffic.step(12)
    assert traffic.counts["flows"] == 12 and traffic.counts["duplicates"] > 0
    drain(app, clock)
    rep = report(app)
    assert rep["duplicate_effects"]["total"] == 0, rep["duplicate_effects"]
    assert len(closed(app)) == 12
    assert rep["deliveries"]["retried"] > 0  # the receipt provider's timeouts


def test_the_nightly_import_is_a_batch_whose_report_counts_its_rows(app, clock, monkeypatch):
    from antre_demo.imports import import_batch
    monkeypatch.setattr(faults, "bad_row_rate", 0.0)
    batch, ids = import_batch(app, "n1", 6)
    for _ in range(10):
        WorkerProcess(app, queues=["batch"], threads=2, clock=clock).run_burst()
        if batch.status().finished:
            break
        clock.advance(30_000)
    assert batch.status().state == "succeeded" and batch.status().total == 6
    report_job = app.queue("batch").get(ids[-1])
    assert report_job.state == "done"
    assert report_job.result == {"import": "n1", "rows": 6, "imported": 6, "failed": 0}


def test_the_traffics_emails_fill_the_groups_page_with_one_busy_tenant(app, clock):
    from antre.groups.read import Groups
    from antre_demo.traffic import TENANT_SLOTS, TENANTS
    Traffic(app, seed=3, mix={"email": 1}, poison_every_s=None, email_dup_rate=0).step(60)
    view = Groups(app.redis, clock).view("emails")
    held = {row.name: row for row in view.by_slots}
    assert set(held) == {f"tenant:{t}" for t in TENANTS}
    assert all(row.slots_held <= TENANT_SLOTS for row in held.values())
    (busiest, *_rest) = view.by_waiting
    assert busiest.name == "tenant:acme" and busiest.waiting > 0
