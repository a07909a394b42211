"""The invoice webhook as a chord. An "order paid" event fans out into three jobs of
one flow on the ``webhooks`` queue: the ledger (``webhook_invoice``: the order's invoice, the
seed scenario's handler), the receipt email (``order_receipt``: the email scenario's provider,
with its accept-then-time-out faults: retries) and a stock hold (``stock_hold``: now and then
the SKU is out of stock, a permanent failure: the flow fails, and an operator replays its dead
job from the flow page); ``close_order``, the chord's callback, closes the order once all three
are done, with their results in order. Every effect goes through ``ctx.db``, committed with
its idempotency record, so a duplicate delivery writes nothing twice.
"""

from __future__ import annotations

from typing import Any

from antre import Antre, Permanent
from antre.engine.envelope import new_job_id
from antre.flows import Flow

from . import tables as t
from .handlers import _need_db, _now_ms, email_key, email_payload, faults, rng_for, send_email


def order_flow(app: Antre, event: dict[str, Any]) -> tuple[Flow, list[str]]:
    """Enqueue the chord of one paid order (``event``: order_id, customer, amount_cents,
    user_id, sku, units); returns the flow and its job ids (ledger, email, stock, close)."""
    order_id, user = str(event["order_id"]), int(event["user_id"])
    campaign = f"order-{order_id}"
    hold = {"order_id": order_id, "sku": event["sku"], "units": int(event["units"])}
    kids = [app.spec("webhook_invoice", event, idempotency_key=f"invoice:{order_id}",
                     job_id=new_job_id()),
            app.spec("order_receipt", email_payload("receipt", user, campaign),
                     idempotency_key=email_key("receipt", user, campaign), job_id=new_job_id()),
            app.spec("stock_hold", hold, idempotency_key=f"hold:{order_id}",
                     lock_key=f"sku:{event['sku']}", job_id=new_job_id())]
    close = app.spec("close_order", {"order_id": order_id}, idempotency_key=f"close:{order_id}",
                     job_id=new_job_id())
    flow = app.chord(kids, close).enqueue(
        description=f"order {order_id} paid by {event['customer']}: invoice, receipt, "
                    f"{hold['units']} x {hold['sku']} held, then close")
    return flow, [s.job_id or "" for s in (*kids, close)]


def stock_hold(ctx: Any, payload: Any) -> dict[str, Any]:
    """Hold the order's units of its SKU (one hold per order)."""
    db = _need_db(ctx)
    try:
        order_id, sku, units = str(payload["order_id"]), str(payload["sku"]), int(payload["units"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Permanent(f"stock hold malformed: {exc!r}") from None
    if rng_for(ctx, "stock-out").random() < faults.stock_out_rate:
        raise Permanent(f"{sku} is out of stock: the warehouse has fewer than {units} left "
                        f"for order {order_id}")
    db.execute(t.insert_for(db, t.stock_holds).values(
        order_id=order_id, sku=sku, units=units, job_id=ctx.job.id, held_at_ms=_now_ms(ctx)
    ).on_conflict_do_nothing(index_elements=["order_id"]))
    return {"order_id": order_id, "sku": sku, "units": units}


def close_order(ctx: Any, payload: Any) -> dict[str, Any]:
    """The chord's callback: every child's result in order (invoice, receipt, hold)."""
    db = _need_db(ctx)
    results = list(ctx.flow_results)
    if len(results) != 3 or not all(isinstance(r, dict) for r in results):
        raise Permanent(f"close_order needs the invoice, receipt and hold results, got "
                        f"{results!r}")
    invoice, receipt, hold = results
    order_id = str((payload or {}).get("order_id") or invoice.get("order_id"))
    db.execute(t.insert_for(db, t.orders_closed).values(
        order_id=order_id, invoice_ref=str(invoice.get("invoice_ref")),
        message_id=str(receipt.get("message_id")), units_held=int(hold.get("units", 0)),
        job_id=ctx.job.id, closed_at_ms=_now_ms(ctx)
    ).on_conflict_do_nothing(index_elements=["order_id"]))
    return {"order_id": order_id, "closed": True, "invoice_ref": invoice.get("invoice_ref")}


def register_orders(app: Antre) -> Antre:
    """The chord's handlers, all on ``webhooks`` (a flow's jobs share one queue)."""
    app.handler("order_receipt", queue="webhooks", max_attempts=5, timeout_s=30)(send_email)
    app.handler("stock_hold", queue="webhooks", max_attempts=5, lock_ttl_s=30)(stock_hold)
    app.handler("close_order", queue="webhooks", max_attempts=5)(close_order)
    return app
