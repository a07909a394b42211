"""``report(app)``: how many duplicate deliveries the queue saw, and how many duplicate effects
reached the demo tables (the goal is zero)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from antre import Antre
from antre.observe.readmodels import ReadModels

from . import tables as t
from .handlers import FakeEmailProvider


def report(app: Antre) -> dict[str, Any]:
    models = ReadModels(app.redis, clock=app.clock)
    queues = {name: models.queue_info(name).stats for name in models.queue_names()}

    def total(counter: str) -> int:
        return sum(int(s.get(counter, 0)) for s in queues.values())

    hits, expired = total("deduplicated"), total("expired")
    out: dict[str, Any] = {
        "duplicate_deliveries": {
            "idempotency_hits": hits,       # a duplicate job acked with the stored result
            "lease_expirations": expired,   # a job re-delivered after its worker vanished/hung
            "total": hits + expired,
        },
        "deliveries": {"enqueued": total("enqueued"), "reserved": total("reserved"),
                       "acked": total("acked"), "retried": total("retried"),
                       "snoozed": total("snoozed") + total("lock_busy"),
                       "buried": total("buried")},
        "queues": queues,
        "provider": {"calls_in_this_process": FakeEmailProvider.calls,
                     "timeouts_after_accept_in_this_process": FakeEmailProvider.timeouts},
    }
    engine, sessions = app.engine, app.session_factory
    if engine is None or sessions is None:
        out["duplicate_effects"] = None
        return out
    t.create_tables(engine)
    with sessions() as s:
        emails = s.execute(select(t.emails_sent.c.email_key, func.count())
                           .group_by(t.emails_sent.c.email_key)).all()
        invoices = s.execute(select(t.invoices.c.order_id, func.count())
                             .group_by(t.invoices.c.order_id)).all()
        ev = {row.sku: (int(row.n), int(row.total or 0)) for row in s.execute(
            select(t.stock_events.c.sku, func.count().label("n"),
                   func.sum(t.stock_events.c.delta).label("total"))
            .group_by(t.stock_events.c.sku))}
        stock_rows = s.execute(select(t.stock.c.sku, t.stock.c.quantity, t.stock.c.version)).all()
    # a stock event applied twice shows as a version ahead of the distinct events of the SKU,
    # or a quantity that is not the sum of their deltas
    applied_twice = 0
    inconsistent = []
    for row in stock_rows:
        n, deltas = ev.get(row.sku, (0, 0))
        applied_twice += max(0, row.version - n)
        if row.version != n or row.quantity != deltas:
            inconsistent.append({"sku": row.sku, "quantity": row.quantity,
                                 "version": row.version, "events": n, "sum_of_deltas": deltas})
    extra_emails = sum(n - 1 for _, n in emails if n > 1)
    extra_invoices = sum(n - 1 for _, n in invoices if n > 1)
    out["effects"] = {"emails_sent": sum(n for _, n in emails), "distinct_email_keys": len(emails),
                      "invoices": sum(n for _, n in invoices),
                      "stock_events_applied": sum(n for n, _ in ev.values()),
                      "skus": len(stock_rows)}
    out["duplicate_effects"] = {
        "emails_sent_more_than_once": extra_emails,
        "invoices_per_order_over_one": extra_invoices,
        "stock_events_applied_twice": applied_twice,
        "stock_rows_inconsistent": inconsistent,
        "total": extra_emails + extra_invoices + applied_twice + len(inconsistent),
    }
    if app.idempotency is not None:
        out["idempotency_records"] = app.idempotency.counts()
    return out
