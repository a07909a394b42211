"""Demo traffic: a realistic mix of the seed scenarios and injected faults, with duplicates.

Only the public API is used (``app.enqueue`` / ``app.enqueue_many``). Duplicate deliveries are
what at-least-once producers really do: the same business operation (same idempotency key,
same payload) enqueued again under a new job id - a producer retrying after a timeout, a webhook
sender redelivering, an event bus replaying.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from typing import Any

from antre import Antre

from .handlers import email_key, email_payload
from .imports import import_batch
from .orders import order_flow

log = logging.getLogger("antre.demo.traffic")

# event kind -> weight (per 100 events)
MIX: dict[str, float] = {
    "email": 32, "stock": 24, "webhook": 15, "flaky_call": 8, "rate_limited_call": 7,
    "slow_report": 5, "bad_input": 4, "timeout_job": 2, "legacy_sync": 1.5, "import": 1,
}
EMAIL_TYPES = ("welcome", "receipt", "password_reset", "newsletter")
CUSTOMERS = ("acme", "globex", "initech", "umbrella", "hooli", "stark")
# the tenants whose emails share the provider fairly (a fair-share group each, so the Groups
# page has rows): one busy, a few quiet; TENANT_SLOTS of one tenant's emails at once
TENANTS: dict[str, float] = {"acme": 6, "globex": 2, "initech": 1, "umbrella": 1}
TENANT_SLOTS = 3


class Traffic:
    """Produces the demo workload.

    ``step(n)`` enqueues ``n`` events (each one or a few jobs) right away and returns the job
    ids; ``run(stop_event)`` produces ``rate_per_s`` events per second until the event is set,
    plus one ``poison_crash`` job every ``poison_every_s`` seconds (``None``: never).
    ``counts`` tallies what was produced, by kind and by ``duplicate``.
    """

    def __init__(self, app: Antre, rate_per_s: float = 5.0, seed: Any = None, *,
                 skus: int = 5, users: int = 300, email_dup_rate: float = 0.2,
                 webhook_dup_rate: float = 0.4, poison_every_s: float | None = 60.0,
                 mix: dict[str, float] | None = None) -> None:
        self.app = app
        self.rate_per_s = float(rate_per_s)
        self.rng = random.Random(seed)
        self.tag = f"{self.rng.getrandbits(32):08x}"
        self.skus = [f"SKU-{i:03d}" for i in range(1, skus + 1)]
        self.users = users
        self.email_dup_rate = email_dup_rate
        self.webhook_dup_rate = webhook_dup_rate
        self.poison_every_s = poison_every_s
        self.mix = dict(mix or MIX)
        self.counts: Counter[str] = Counter()
        self._n = 0

    # -- one event ---------------------------------------------------------------------------
    def _next(self) -> int:
        self._n += 1
        return self._n

    def _enqueue(self, kind: str, job_type: str, payload: Any, key: str, *,
                 duplicate: bool = False, **kw: Any) -> str:
        job_id = self.app.enqueue(job_type, payload, idempotency_key=key, **kw)
        self.counts[kind] += 1
        self.counts["jobs"] += 1
        if duplicate:
            self.counts["duplicates"] += 1
        return job_id

    def email(self) -> list[str]:
        r = self.rng
        email_type = r.choice(EMAIL_TYPES)
        user = r.randint(1, self.users)
        campaign = {"welcome": "signup", "receipt": f"order-{r.randint(1000, 9999)}",
                    "password_reset": f"req-{self.tag}-{self._next()}",
                    "newsletter": f"2024-w{r.randint(1, 52):02d}"}[email_type]
        key, payload = email_key(email_type, user, campaign), email_payload(email_type, user,
                                                                             campaign)
        tenant = r.choices(list(TENANTS), list(TENANTS.values()))[0]
        group: dict[str, Any] = {"group": f"tenant:{tenant}", "group_concurrency": TENANT_SLOTS}
        ids = [self._enqueue("email", "send_email", payload, key, **group)]
        if r.random() < self.email_dup_rate:  # the producer timed out and sent it again
            ids.append(self._enqueue("email", "send_email", payload, key, duplicate=True,
                                     delay_s=r.choice((0, 0, 0.5, 2.0)), **group))
        return ids

    def stock(self) -> list[str]:
        """A burst of 1-3 events; each event is delivered twice (the bus is at-least-once);
        events of one SKU arrive together, so workers contend for the SKU lock."""
        r = self.rng
        sku = r.choice(self.skus)
        ids: list[str] = []
        for _ in range(r.choice((1, 1, 2, 3))):
            event_id = f"evt-{self.tag}-{self._next()}"
            delta = r.choice((-3, -2, -1, 1, 2, 3, 5, 10))
            payload = {"event_id": event_id, "sku": sku, "delta": delta, "source": "warehouse"}
            for copy in range(2):
                ids.append(self._enqueue("stock", "stock_sync", payload, f"stock:{event_id}",
                                         duplicate=copy == 1, lock_key=f"sku:{sku}",
                                         delay_s=0 if copy == 0 else r.choice((0, 0, 1.0))))
        return ids

    def webhook(self) -> list[str]:
        """An "order paid" webhook: a chord of ledger, receipt email and stock hold closed by
        ``close_order`` (``orders.order_flow``); the sender sometimes retries the webhook
        (plain ``webhook_invoice`` jobs with the order's key: the ledger's idempotency)."""
        r = self.rng
        order_id = f"ORD-{self.tag}-{self._next()}"
        payload = {"order_id": order_id, "customer": r.choice(CUSTOMERS),
                   "amount_cents": r.randint(500, 250_000), "event": "order.paid",
                   "user_id": r.randint(1, self.users), "sku": r.choice(self.skus),
                   "units": r.choice((1, 1, 2, 3))}
        key = f"invoice:{order_id}"
        _flow, ids = order_flow(self.app, payload)
        self.counts["webhook"] += 1
        self.counts["flows"] += 1
        self.counts["jobs"] += len(ids)
        if r.random() < self.webhook_dup_rate:  # the sender did not see our 200 and retries
            for _ in range(r.randint(1, 4)):
                ids.append(self._enqueue("webhook", "webhook_invoice", payload, key,
                                         duplicate=True, delay_s=r.choice((0, 0.5, 3.0))))
        return ids

    def nightly_import(self) -> list[str]:
        """A batch of 5-20 rows with a report once they have all settled
        (``imports.import_batch``)."""
        _batch, ids = import_batch(self.app, f"{self.tag}-{self._next()}",
                                   self.rng.randint(5, 20))
        self.counts["import"] += 1
        self.counts["jobs"] += len(ids)
        return ids

    def fault(self, kind: str) -> list[str]:
        r, n = self.rng, self._next()
        key = f"{kind}:{self.tag}:{n}"
        if kind == "slow_report":
            payload: Any = {"report": r.choice(("daily-sales", "stock-aging", "churn")),
                            "seconds": r.choice((3, 4, 6))}
        elif kind == "timeout_job":
            payload = {"sleep_s": 5}
        elif kind == "bad_input":
            payload = {"customer_id": f"C-{r.randint(10000, 99999)}", "country": None}
        elif kind == "legacy_sync":  # a job type no worker has a handler for
            return [self._enqueue(kind, "legacy_sync", {"table": "customers", "batch": n}, key,
                                  queue="integrations")]
        else:
            payload = {"request": n}
        return [self._enqueue(kind, kind, payload, key)]

    def poison(self) -> list[str]:
        n = self._next()
        return [self._enqueue("poison_crash", "poison_crash", {"n": n},
                              f"poison_crash:{self.tag}:{n}")]

    def event(self) -> list[str]:
        kinds, weights = zip(*self.mix.items())
        kind = self.rng.choices(kinds, weights)[0]
        if kind == "email":
            return self.email()
        if kind == "stock":
            return self.stock()
        if kind == "webhook":
            return self.webhook()
        if kind == "import":
            return self.nightly_import()
        return self.fault(kind)

    # -- driving -----------------------------------------------------------------------------
    def step(self, n: int = 1) -> list[str]:
        """Enqueue ``n`` events now; returns the job ids (never a poison job)."""
        ids: list[str] = []
        for _ in range(n):
            ids.extend(self.event())
        return ids

    def run(self, stop_event: threading.Event) -> None:
        """Produce until ``stop_event`` is set; survives Redis outages (logs, waits, goes on)."""
        next_poison = time.monotonic() + 20.0 if self.poison_every_s else None
        while not stop_event.is_set():
            try:
                self.step(1)
                if next_poison is not None and time.monotonic() >= next_poison:
                    self.poison()
                    next_poison = time.monotonic() + float(self.poison_every_s or 60.0)
            except Exception as exc:  # noqa: BLE001 - Redis down, etc.: the demo keeps going
                log.warning("demo traffic: enqueue failed (%s); retrying in 2s", exc)
                stop_event.wait(2.0)
                continue
            stop_event.wait(self.rng.expovariate(self.rate_per_s) if self.rate_per_s > 0 else 1)
