"""The demo's handlers: the three seed scenarios and a set of jobs that inject faults.

Every SQL effect goes through ``ctx.db`` so that it commits in one transaction with the
idempotency record (or rolls back with a failed attempt). Each handler writes *first* and reads
after, so that on SQLite its transaction takes the write lock up front instead of failing to
upgrade a stale read snapshot.

Randomness is deterministic: every fault draws from ``random.Random`` seeded with the job's
idempotency key and its lease epoch (bumped on every delivery), so a test run is reproducible
and a retried delivery draws a fresh value.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from antre import Antre, LimitPolicy, Permanent, RateLimited, Retryable, settings

from . import tables as t

# -- fault knobs (module level, settable; read by each call) --------------------------------


@dataclass
class Faults:
    """How often the injected faults fire. Change ``faults.<name>`` at run time, or set the
    environment variables (read at import) for worker processes."""

    email_timeout_rate: float = settings.DEMO_EMAIL_FAULT_RATE.get()
    flaky_rate: float = settings.DEMO_FLAKY_RATE.get()
    rate_limit_rate: float = settings.DEMO_RATE_LIMIT_RATE.get()
    # an order's stock hold finds the SKU out of stock (its chord fails)
    stock_out_rate: float = settings.DEMO_STOCK_OUT_RATE.get()
    # a row of the nightly import's batch has a bad SKU (it dies; the report counts it)
    bad_row_rate: float = settings.DEMO_BAD_ROW_RATE.get()
    seed: str = settings.DEMO_SEED.get()
    # the email provider's limits and outages (``antre demo`` turns them on; tests keep them off)
    email_rate_per_s: float = settings.DEMO_EMAIL_RATE.get()
    email_outage_every_s: float = settings.DEMO_EMAIL_OUTAGE_EVERY_S.get()
    email_outage_s: float = settings.DEMO_EMAIL_OUTAGE_S.get()

    def email_provider_down(self, now_ms: int) -> bool:
        """True inside the provider's scheduled outage window (wall clock, every N seconds)."""
        if self.email_outage_every_s <= 0:
            return False
        return (now_ms / 1000) % self.email_outage_every_s < self.email_outage_s


faults = Faults()


def rng_for(ctx: Any, salt: str = "") -> random.Random:
    """A deterministic RNG for this delivery of this business operation."""
    job = ctx.job
    return random.Random(f"{faults.seed}:{salt}:{job.idempotency_key}:{job.epoch}")


def _now_ms(ctx: Any) -> int:
    return int(time.time() * 1000)


def _need_db(ctx: Any) -> Any:
    if ctx.db is None:
        raise Permanent("the demo handlers need a database: set ANTRE_DATABASE_URL")
    t.ensure_for_session(ctx.db)
    return ctx.db


# -- 1. email --------------------------------------------------------------------------------


class ProviderTimeout(TimeoutError):
    """The provider took the message and then did not answer in time (retryable)."""


class FakeEmailProvider:
    """A fake email provider that sometimes accepts a message and then times out.

    ``send`` records the message in ``demo_emails_sent`` through the caller's session - the
    provider "accepted" it - and then, with probability ``faults.email_timeout_rate``, raises
    :class:`ProviderTimeout` before answering. Because the record is written through ``ctx.db``
    it is rolled back with the failed attempt, exactly as a provider that honours an
    idempotency key would forget the half-finished request; the redelivery sends it once.
    """

    calls = 0
    timeouts = 0
    _count_lock = threading.Lock()

    def __init__(self, rng: random.Random, fault_rate: float | None = None) -> None:
        self.rng = rng
        self.fault_rate = faults.email_timeout_rate if fault_rate is None else fault_rate

    def send(self, db: Any, *, email_key: str, to: str, subject: str, email_type: str,
             user_id: int, campaign: str, job_id: str, attempt: int, now_ms: int) -> str:
        message_id = "msg-" + hashlib.sha256(f"{email_key}:{job_id}:{attempt}".encode()
                                             ).hexdigest()[:16]
        with FakeEmailProvider._count_lock:
            FakeEmailProvider.calls += 1
        if faults.email_provider_down(now_ms):
            raise Retryable("email provider unavailable: 503 Service Unavailable (outage)")
        db.execute(t.emails_sent.insert().values(
            email_key=email_key, email_type=email_type, user_id=user_id, campaign=campaign,
            to_addr=to, subject=subject, message_id=message_id, job_id=job_id, attempt=attempt,
            sent_at_ms=now_ms))
        if self.rng.random() < self.fault_rate:
            with FakeEmailProvider._count_lock:
                FakeEmailProvider.timeouts += 1
            raise ProviderTimeout(f"email provider accepted {message_id} for {to} but timed out "
                                  "before answering (30s)")
        return message_id


def email_payload(email_type: str, user_id: int, campaign: str) -> dict[str, Any]:
    """The payload of an email job: a pure function of its key, so duplicates are identical."""
    subjects = {"welcome": "Welcome to Antre Shop", "receipt": "Your receipt",
                "password_reset": "Reset your password", "newsletter": "This week at Antre Shop"}
    return {"email_type": email_type, "user_id": int(user_id), "campaign": campaign,
            "to": f"user{int(user_id)}@example.org",
            "subject": subjects.get(email_type, email_type.replace("_", " ").title())}


def email_key(email_type: str, user_id: int, campaign: str) -> str:
    return f"{email_type}:{int(user_id)}:{campaign}"


def send_email(ctx: Any, payload: Any) -> dict[str, Any]:
    db = _need_db(ctx)
    try:
        email_type, user_id = str(payload["email_type"]), int(payload["user_id"])
        campaign, to = str(payload["campaign"]), str(payload["to"])
        subject = str(payload.get("subject") or "")
    except (KeyError, TypeError, ValueError) as exc:
        raise Permanent(f"email payload malformed: {exc!r}") from None
    provider = FakeEmailProvider(rng_for(ctx, "email"))
    message_id = provider.send(db, email_key=email_key(email_type, user_id, campaign), to=to,
                               subject=subject, email_type=email_type, user_id=user_id,
                               campaign=campaign, job_id=ctx.job.id, attempt=ctx.attempt,
                               now_ms=_now_ms(ctx))
    return {"message_id": message_id, "to": to}


# -- 2. stock sync ---------------------------------------------------------------------------


def stock_sync(ctx: Any, payload: Any) -> dict[str, Any]:
    """Apply one stock event: event-id dedup, then a version compare-and-set on the stock row.

    The producer sets ``lock_key="sku:<sku>"``, so the worker holds that business lock while
    this runs (pessimistic); the version compare-and-set (optimistic) and the lock's fencing
    token guard the row even if the lock expired under a paused worker.
    """
    db = _need_db(ctx)
    try:
        event_id, sku, delta = str(payload["event_id"]), str(payload["sku"]), int(payload["delta"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Permanent(f"stock event malformed: {exc!r}") from None
    now = _now_ms(ctx)
    ins = t.insert_for(db, t.stock_events).values(
        event_id=event_id, sku=sku, delta=delta, applied_version=0, job_id=ctx.job.id,
        applied_at_ms=now).on_conflict_do_nothing(index_elements=["event_id"])
    if db.execute(ins.returning(t.stock_events.c.event_id)).first() is None:
        return {"applied": False, "event_id": event_id, "reason": "event already applied"}
    db.execute(t.insert_for(db, t.stock).values(sku=sku, quantity=0, version=0, lock_fence=0)
               .on_conflict_do_nothing(index_elements=["sku"]))
    row = db.execute(select(t.stock.c.quantity, t.stock.c.version, t.stock.c.lock_fence)
                     .where(t.stock.c.sku == sku)).one()
    fenced, fence = [], row.lock_fence
    if ctx.lock is not None:  # ctx.fence is the business lock's fencing token
        fenced, fence = [t.stock.c.lock_fence <= ctx.fence], ctx.fence
    # the version compare-and-set (antre.stores.versioned): a row that moved on raises
    # VersionConflict, which rolls this back and re-queues the event behind its sku's next
    # one, no attempt spent
    version = ctx.versioned_update(t.stock, {"sku": sku}, row.version,
                                   {"quantity": t.stock.c.quantity + delta, "lock_fence": fence},
                                   where=fenced)
    db.execute(update(t.stock_events).where(t.stock_events.c.event_id == event_id)
               .values(applied_version=version))
    return {"applied": True, "event_id": event_id, "sku": sku,
            "quantity": row.quantity + delta, "version": version}


# -- 3. webhook -> invoice -------------------------------------------------------------------


def webhook_invoice(ctx: Any, payload: Any) -> dict[str, Any]:
    """An internal 'order paid' webhook: create the order's invoice (one per order)."""
    db = _need_db(ctx)
    try:
        order_id, customer = str(payload["order_id"]), str(payload["customer"])
        amount_cents = int(payload["amount_cents"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Permanent(f"order event malformed: {exc!r}") from None
    ref = f"INV-{os.urandom(5).hex().upper()}"
    ins = t.insert_for(db, t.invoices).values(
        order_id=order_id, invoice_ref=ref, customer=customer, amount_cents=amount_cents,
        job_id=ctx.job.id, created_at_ms=_now_ms(ctx)
    ).on_conflict_do_nothing(index_elements=["order_id"]).returning(t.invoices.c.invoice_ref)
    if db.execute(ins).first() is None:  # defence in depth: the business key is unique too
        existing = db.execute(select(t.invoices.c.invoice_ref)
                              .where(t.invoices.c.order_id == order_id)).scalar_one()
        return {"invoice_ref": existing, "order_id": order_id}
    return {"invoice_ref": ref, "order_id": order_id}


# -- fault jobs ------------------------------------------------------------------------------


def slow_report(ctx: Any, payload: Any) -> dict[str, Any]:
    """A few seconds of work in steps; extends its lease, checkpoints and reports its progress
    (``ctx.progress``: the job page's bar) as it goes."""
    seconds = float((payload or {}).get("seconds", 4))
    steps = max(1, int(seconds / 0.5))
    for i in range(steps):
        time.sleep(seconds / steps)
        if i % 2 == 1:
            ctx.extend_lease(30)
        ctx.checkpoint({"step": i + 1, "of": steps})
        ctx.progress((i + 1) / steps, f"rows {(i + 1) * 1000:,}/{steps * 1000:,}")
    return {"rows": steps * 1000, "report": (payload or {}).get("report", "daily")}


def flaky_call(ctx: Any, payload: Any) -> dict[str, Any]:
    """A downstream that answers 503 about half of the time."""
    if rng_for(ctx, "flaky").random() < faults.flaky_rate:
        raise Retryable("inventory-api answered 503 Service Unavailable")
    return {"ok": True, "attempt": ctx.attempt}


def timeout_job(ctx: Any, payload: Any) -> dict[str, Any]:
    """Sleeps past its 2 s timeout and ignores cancellation: the worker's hard timeout."""
    time.sleep(float((payload or {}).get("sleep_s", 5)))
    return {"finished": True}


def bad_input(ctx: Any, payload: Any) -> None:
    customer = (payload or {}).get("customer_id", "?")
    raise Permanent(f"customer record malformed: customer {customer} has no billing country")


def poison_crash(ctx: Any, payload: Any) -> None:
    """Kills its own process on every delivery; ends in the DLQ as poison after 3 deliveries.
    Never run it in a process you want to keep (e.g. an in-process test worker)."""
    os.kill(os.getpid(), signal.SIGKILL)


def rate_limited_call(ctx: Any, payload: Any) -> dict[str, Any]:
    """A partner API that sometimes says 429: snoozed 2 s, no attempt spent."""
    if rng_for(ctx, "ratelimit").random() < faults.rate_limit_rate:
        raise RateLimited(2, "partner-api answered 429 Too Many Requests")
    return {"ok": True}


# -- registration ----------------------------------------------------------------------------

QUEUES = ("emails", "stock", "webhooks", "integrations", "batch")


def register(app: Antre) -> Antre:
    """Register every demo handler on ``app``."""
    if faults.email_rate_per_s > 0:  # the provider's documented limits, enforced cluster-wide
        app.downstream("email-provider", LimitPolicy(
            concurrency=4, rate_per_s=faults.email_rate_per_s,
            burst=max(1, int(faults.email_rate_per_s * 2)),
            failure_threshold=6, window_s=30, cooldown_s=15))
    app.handler("send_email", queue="emails", max_attempts=5, downstream="email-provider",
                timeout_s=30)(send_email)
    app.handler("stock_sync", queue="stock", max_attempts=8, lock_ttl_s=30)(stock_sync)
    app.handler("webhook_invoice", queue="webhooks", max_attempts=5)(webhook_invoice)
    app.handler("slow_report", queue="batch", timeout_s=60, visibility_timeout_s=10,
                max_attempts=3)(slow_report)
    app.handler("flaky_call", queue="integrations", max_attempts=6,
                downstream="inventory-api")(flaky_call)
    app.handler("timeout_job", queue="batch", timeout_s=2, max_attempts=2)(timeout_job)
    app.handler("bad_input", queue="integrations", max_attempts=5)(bad_input)
    app.handler("poison_crash", queue="batch", max_deliveries=3, visibility_timeout_s=10,
                max_attempts=5)(poison_crash)
    app.handler("rate_limited_call", queue="integrations", max_attempts=5,
                downstream="partner-api")(rate_limited_call)
    from .imports import register_imports  # (these use this module's helpers)
    from .orders import register_orders
    return register_imports(register_orders(app))

