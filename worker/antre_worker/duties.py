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
from sqlalchemy.exc import SQLAlchemyError

from antre import settings
from antre import Antre
from antre.engine import keys, partitions
from antre.observe import sampling
from antre.observe.alerts import AlertEngine
from antre.control.bulk import BulkReplays, BulkTask
from antre.control.cancel import Cancels
from antre.control.pause import Pauses
from antre.clock import Clock
from antre.observe.memory import MemoryPolicy, memory_policy
from antre.observe.readmodels import ReadModels
from antre.maintenance.retention import Retention, SqlRetention
from antre.groups.control import GroupControl
from antre.limits.gates import Gates

from .health import REDIS_DOWN

log = logging.getLogger("antre.worker.duties")


@dataclass(frozen=True)
class Duty:
    name: str
    interval_s: float
    fn: Callable[[Duties], Any]


def sweep_once(app: Antre, clock: Clock | None = None, limit: int = 1000) -> dict[str, int]:
    """One sweeper pass over every queue: expired leases back to ready (or to the DLQ when
    poison), then parked jobs of resumed job types back to ready, and cancel requests of jobs
    that finished anyway forgotten, and operators' limit overrides whose time is up ended (a
    type's, a downstream's or a group's: what they held back starts). Returns totals."""
    out = {"queues": 0, "requeued": 0, "buried": 0, "unparked": 0, "cancels_pruned": 0,
           "overrides_reverted": 0}
    for name in ReadModels(app.redis).queue_names():
        out["queues"] += 1
        for q in partitions.all_queues(app.redis, name, clock=clock or app.clock,
                                       scripts=app.scripts):  # each partition
            while True:
                res = q.sweep(limit)
                out["requeued"] += res.requeued
                out["buried"] += res.buried
                if res.requeued + res.buried < limit:
                    break
        # parked jobs of a job type whose resume stopped half-way go back to ready
        now_clock = clock or app.clock
        pauses = Pauses(app.redis, now_clock, app.scripts)
        pauses.sync(name)  # a partition grown since a pause gets it
        out["unparked"] += pauses.unpark_stale(name)
        out["cancels_pruned"] += Cancels(app.redis, now_clock, app.scripts).prune(name)
        out["overrides_reverted"] += (
            Gates(app.redis, now_clock, app.scripts).revert_due(name)
            + GroupControl(app.redis, now_clock, app.scripts).revert_due(name))
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
    bulk = BulkReplays(d.app.redis, d.clock or d.app.clock)
    running = {t.id for t in bulk.list() if t.state == "running" and t.kind == "purge"}
    moved = bulk.step_all()
    for task in bulk.list(kind="purge"):
        if task.id in running and task.state == "done":
            _audit_purge_done(d, task)
    return moved


def _audit_purge_done(d: Duties, task: BulkTask) -> None:
    """A finished purge gets an audit entry of its own with what it removed (its start has the
    operator's entry with the dry-run count)."""
    log.info("purge %s done: %d jobs removed (%s)", task.id, task.replayed, task.description,
             extra={"event": "purge_done", "queue": task.queue})
    if d.app.audit is None:
        return
    try:
        d.app.audit.record(user=task.user, role="system", action="purge.done",
                           target=f"{task.queue}/{task.id}", reason=task.reason, outcome="ok",
                           detail={"removed": task.replayed, "dry_run": task.total,
                                   "filter": task.filter}, remote_addr="")
    except SQLAlchemyError as exc:
        log.warning("could not audit the end of purge %s: %s", task.id, exc,
                    extra={"event": "duty_failed"})


def _prune(d: Duties) -> Any:
    store = d.app.idempotency
    return store.prune() if store is not None else None


def _relay(d: Duties) -> Any:
    return d.app.relay_outbox()


def _periodic(d: Duties) -> Any:
    """Enqueue the app's due periodic ticks (``antre.maintenance.periodic``; each once cluster-wide)."""
    if not d.app.schedules:
        return []
    scheduler = d.app.scheduler()
    scheduler.clock = d.clock or d.app.clock
    return scheduler.run_once()


def _retention(d: Duties) -> Any:
    """Retention so Redis never fills: per queue, dead jobs past the count or age cap (oldest
    first), done records past their retention, empty error groups; then sent outbox rows and
    old audit entries (``antre.maintenance.retention``)."""
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
    engine = AlertEngine(d.app.redis, d.clock or d.app.clock, rules=d.app.alert_config.rules(),
                         webhook_url=settings.ALERT_WEBHOOK.get(),
                         dashboard_url=settings.DASHBOARD_URL.get(),
                         webhook_secret=settings.ALERT_WEBHOOK_SECRET.get(),
                         outbox_age_s=_outbox_age(d))
    events = engine.check()
    for event in events:
        log.warning("alert %s: %s", event.status, event.alert.message,
                    extra={"event": "alert", "queue": event.queue})
    return events


def _outbox_age(d: Duties) -> Callable[[], float | None] | None:
    """The age of the oldest unsent outbox row, for the outbox alert (None without SQL, or
    while the database is unreachable: the outage has its own banner)."""
    outbox = d.app.outbox if d.app.database_url else None
    if outbox is None:
        return None
    clock = d.clock or d.app.clock

    def age_s() -> float | None:
        try:
            oldest = outbox.oldest_pending_ms()
        except SQLAlchemyError as exc:
            log.warning("outbox age unknown: %s", exc, extra={"event": "duty_failed"})
            return None
        return None if oldest is None else max(0, clock() - oldest) / 1000
    return age_s


class EvictionWatch:
    """Redis's ``maxmemory-policy``, checked at the pool's start and every minute: one WARNING
    line (naming the policy and what to set) when Redis may evict keys, then again only when
    the policy changes."""

    def __init__(self, client: "redis.Redis") -> None:
        self.client = client
        self.seen: str | None = None

    def check(self) -> MemoryPolicy:
        found = memory_policy(self.client)
        if found.policy != self.seen and found.warning:
            log.warning("%s", found.warning, extra={"event": "redis_evicts",
                                                    "policy": found.policy})
        self.seen = found.policy
        return found


def _eviction(d: Duties) -> Any:
    return d.eviction.check()


DUTIES = (
    Duty("sweeper", 1.0, _sweep),
    Duty("sampler", 10.0, _sample),
    Duty("bulk_replays", 1.0, _bulk),
    Duty("idempotency_pruner", 3600.0, _prune),
    Duty("outbox_relay", 1.0, _relay),
    Duty("alerts", 15.0, _alerts),
    Duty("periodic", 1.0, _periodic),
    Duty("retention", 60.0, _retention),
    Duty("eviction_check", 60.0, _eviction),
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
        self.redis_down = False  # the last duty found Redis unreachable
        self.eviction = EvictionWatch(app.redis)

    def start(self) -> None:
        self.scheduler = BackgroundScheduler(
            timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1,
                                          "misfire_grace_time": 30})
        for d in self.duties.values():
            self.scheduler.add_job(self.run, "interval", seconds=d.interval_s, args=[d.name],
                                   id=d.name, name=d.name)
        self.scheduler.start()  # its loggers: antre.observe.logs.configure (WARNING+, JSON)

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None

    def run(self, name: str) -> Any:
        """One tick of duty ``name``: skipped (``None``) when another pool ran it this tick."""
        d = self.duties[name]
        try:
            if not self._claim_tick(d):
                self._reachable()
                return None
            result = d.fn(self)
        except REDIS_DOWN as exc:  # refused, reset or timed out: an outage, said once
            self.failures += 1
            self._unreachable(name, exc)
            return None
        except Exception as exc:  # an outage must not kill the scheduler
            self.failures += 1
            log.error("duty %s failed: %s", name, exc, exc_info=True,
                      extra={"event": "duty_failed"})
            return None
        self._reachable()
        return result

    def _unreachable(self, name: str, exc: BaseException) -> None:
        """One WARNING per Redis outage (every duty fails each tick until it is back): the
        rest at DEBUG."""
        level = logging.DEBUG if self.redis_down else logging.WARNING
        self.redis_down = True
        log.log(level, "duty %s failed: %s; the duties go on trying every tick (said again "
                "when Redis is back)", name, exc, extra={"event": "duty_failed"})

    def _reachable(self) -> None:
        if self.redis_down:
            self.redis_down = False
            log.warning("duties: Redis reachable again", extra={"event": "duty_recovered"})

    def _claim_tick(self, d: Duty) -> bool:
        ttl_ms = max(100, int(d.interval_s * 1000 * 0.9))
        token = f"{os.getpid()}:{os.urandom(6).hex()}"
        return bool(self.app.redis.set(keys.maintenance_lock(d.name), token, nx=True, px=ttl_ms))
