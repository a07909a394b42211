"""The pool's scheduled duties on APScheduler: sweeper, sampler, bulk replays, idempotency
pruner, outbox relay, alerts, periodic jobs, retention. Started in the supervisor process only.
(Due scheduled jobs are promoted by the worker processes themselves,
``WorkerProcess.promote_due``: see docs/ARCHITECTURE.md.)

Each duty runs at most once per tick cluster-wide: it first takes a per-duty maintenance key
with ``SET NX PX`` (a random token, a TTL a little shorter than its interval) and skips the tick
when another pool holds it. The key is left to expire rather than deleted, so a pool whose tick
is a few hundred milliseconds later does not run a second pass in the same tick. Each duty
catches and logs its own errors: a Redis or database outage never stops the scheduler.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from apscheduler.schedulers.background import BackgroundScheduler

from antre import Antre, Queue, keys, sampling
from antre.alerts import AlertEngine
from antre.bulk import BulkReplays
from antre.clock import Clock
from antre.readmodels import ReadModels
from antre.retention import Retention, SqlRetention

log = logging.getLogger("antre.worker.duties")


@dataclass(frozen=True)
class Duty:
    name: str
    interval_s: float
    fn: Callable[[Duties], Any]


def sweep_once(app: Antre, clock: Clock | None = None, limit: int = 1000) -> dict[str, int]:
    """One sweeper pass over every queue: expired leases back to ready (or to the DLQ when
    poison). Returns totals."""
    out = {"queues": 0, "requeued": 0, "buried": 0}
    for name in ReadModels(app.redis).queue_names():
        q = Queue(app.redis, name, clock=clock or app.clock, scripts=app.scripts)
        out["queues"] += 1
        while True:
            res = q.sweep(limit)
            out["requeued"] += res.requeued
            out["buried"] += res.buried
            if res.requeued + res.buried < limit:
                break
    return out


def _sweep(d: Duties) -> Any:
    res = sweep_once(d.app, d.clock)
    if res["requeued"] or res["buried"]:
        log.info("sweeper: %d expired leases requeued, %d poison jobs buried", res["requeued"],
                 res["buried"], extra={"event": "expired"})
    return res


def _sample(d: Duties) -> Any:
    return sampling.take(d.app.redis, d.clock or d.app.clock)


def _bulk(d: Duties) -> Any:
    return BulkReplays(d.app.redis, d.clock or d.app.clock).step_all()


def _prune(d: Duties) -> Any:
    store = d.app.idempotency
    return store.prune() if store is not None else None


def _relay(d: Duties) -> Any:
    return d.app.relay_outbox()


def _periodic(d: Duties) -> Any:
    """Enqueue the app's due periodic ticks (``antre.periodic``; each once cluster-wide)."""
    if not d.app.schedules:
        return []
    scheduler = d.app.scheduler()
    scheduler.clock = d.clock or d.app.clock
    return scheduler.run_once()


def _retention(d: Duties) -> Any:
    """Retention so Redis never fills: per queue, dead jobs past the count or age cap (oldest
    first), done records past their retention, empty error groups; then sent outbox rows and
    old audit entries (``antre.retention``)."""
    clock = d.clock or d.app.clock
    keeper = Retention(d.app.redis, clock=clock, scripts=d.app.scripts)
    out = {name: keeper.run(name, d.app.retention_for(name))
           for name in ReadModels(d.app.redis).queue_names()}
    dropped = sum(r.dead_dropped for r in out.values())
    if dropped:
        log.info("retention: %d dead jobs dropped past their queue's cap", dropped,
                 extra={"event": "retention"})
    return {"queues": out, **_prune_sql(d.app, clock())}


def _prune_sql(app: Antre, now_ms: int) -> dict[str, int]:
    keep = SqlRetention.from_env()
    out = {"outbox_pruned": 0, "audit_pruned": 0}
    if app.outbox is not None:
        out["outbox_pruned"] = app.outbox.prune_sent(now_ms - keep.outbox_sent_s * 1000)
    if app.audit is not None:
        out["audit_pruned"] = app.audit.prune(now_ms - keep.audit_s * 1000)
    return out


def _alerts(d: Duties) -> Any:
    """Alert rules; a firing or resolved alert is POSTed to ANTRE_ALERT_WEBHOOK once, signed
    with ANTRE_ALERT_WEBHOOK_SECRET when set."""
    engine = AlertEngine(d.app.redis, d.clock or d.app.clock,
                         webhook_url=os.environ.get("ANTRE_ALERT_WEBHOOK") or None,
                         dashboard_url=os.environ.get("ANTRE_DASHBOARD_URL", ""),
                         webhook_secret=os.environ.get("ANTRE_ALERT_WEBHOOK_SECRET") or None)
    events = engine.check()
    for event in events:
        log.warning("alert %s: %s", event.status, event.alert.message,
                    extra={"event": "alert", "queue": event.queue})
    return events


DUTIES = (
    Duty("sweeper", 1.0, _sweep),
    Duty("sampler", 10.0, _sample),
    Duty("bulk_replays", 1.0, _bulk),
    Duty("idempotency_pruner", 3600.0, _prune),
    Duty("outbox_relay", 1.0, _relay),
    Duty("alerts", 15.0, _alerts),
    Duty("periodic", 1.0, _periodic),
    Duty("retention", 60.0, _retention),
)


class Duties:
    """The scheduled duties of one pool. ``run(name)`` runs one tick by hand (tests)."""

    def __init__(self, app: Antre, *, clock: Clock | None = None,
                 duties: tuple[Duty, ...] = DUTIES) -> None:
        self.app = app
        self.clock = clock
        self.duties = {d.name: d for d in duties}
        self.scheduler: BackgroundScheduler | None = None
        self.failures = 0

    def start(self) -> None:
        self.scheduler = BackgroundScheduler(
            timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1,
                                          "misfire_grace_time": 30})
        for d in self.duties.values():
            self.scheduler.add_job(self.run, "interval", seconds=d.interval_s, args=[d.name],
                                   id=d.name, name=d.name)
        self.scheduler.start()
        logging.getLogger("apscheduler").setLevel(logging.WARNING)

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None

    def run(self, name: str) -> Any:
        """One tick of duty ``name``: skipped (``None``) when another pool ran it this tick."""
        d = self.duties[name]
        try:
            if not self._claim_tick(d):
                return None
            return d.fn(self)
        except Exception as exc:  # an outage must not kill the scheduler
            self.failures += 1
            level = logging.WARNING if isinstance(exc, redis.ConnectionError) else logging.ERROR
            log.log(level, "duty %s failed: %s", name, exc, exc_info=level == logging.ERROR,
                    extra={"event": "duty_failed"})
            return None

    def _claim_tick(self, d: Duty) -> bool:
        ttl_ms = max(100, int(d.interval_s * 1000 * 0.9))
        token = f"{os.getpid()}:{os.urandom(6).hex()}"
        return bool(self.app.redis.set(keys.maintenance_lock(d.name), token, nx=True, px=ttl_ms))
