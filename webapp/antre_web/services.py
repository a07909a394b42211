"""The dashboard's services (one set per Flask app, kept in ``app.extensions["antre"]``).

Nothing per request lives here: the objects are thread-safe clients and stores. The outage
tracker remembers since when Redis / the database have been unreachable, behind a lock.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import redis
from flask import Flask, current_app
from redis.backoff import NoBackoff
from redis.retry import Retry

import antre
import antre.stores.sql
from antre import settings
from antre.stores.audit import AuditLog
from antre.control.bulk import BulkReplays
from antre.control.cancel import Cancels
from antre.clock import Clock, system_ms
from antre.stores.logins import LoginThrottle
from antre.maintenance.periodic import Schedules
from antre.stores.fencing import LockFences
from antre.stores.idempotency import IdempotencyStore
from antre.engine.locks import Locks
from antre.groups.control import GroupControl
from antre.control.pause import Pauses
from antre.limits.gates import Gates
from antre.groups.read import Groups
from antre.control.purge import Purger
from antre.observe.readmodels import ReadModels
from antre.observe.redact import redact_url, scrub
from antre.observe.registry import WorkerRegistry
from antre.stores.users import UserStore
from antre.tasks import Schema

log = logging.getLogger("antre.webapp")

REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError)


class Outages:
    """Since when each backend ('redis', 'database') has been failing; None when fine."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._since: dict[str, int] = {}
        self._lock = threading.Lock()

    def failed(self, backend: str) -> int:
        with self._lock:
            return self._since.setdefault(backend, self.clock())

    def ok(self, backend: str) -> None:
        with self._lock:
            self._since.pop(backend, None)

    def since(self, backend: str) -> int | None:
        with self._lock:
            return self._since.get(backend)


@dataclass
class Services:
    antre: antre.Antre
    reads: ReadModels
    users: UserStore
    audit: AuditLog
    locks: Locks
    registry: WorkerRegistry
    bulk: BulkReplays
    idempotency: IdempotencyStore
    clock: Clock
    redis_url: str
    database_url: str
    outages: Outages
    logins: LoginThrottle
    session_factory: Any  # sessions on the dashboard's database
    fences: LockFences

    @property
    def redis(self) -> redis.Redis:
        return self.antre.redis

    @property
    def pauses(self) -> Pauses:
        return Pauses(self.redis, self.clock, self.antre.scripts)

    @property
    def groups(self) -> GroupControl:  # fair-share groups: pause, slots
        return GroupControl(self.redis, self.clock, self.antre.scripts, self.pauses)

    @property
    def gates(self) -> Gates:  # type and downstream limits held at reserve
        return Gates(self.redis, self.clock, self.antre.scripts)

    @property
    def group_reads(self) -> Groups:
        return Groups(self.redis, self.clock)

    @property
    def cancels(self) -> Cancels:
        return Cancels(self.redis, self.clock, self.antre.scripts)

    @property
    def purger(self) -> Purger:
        return Purger(self.redis, self.clock, self.antre.scripts)

    @property
    def schedules(self) -> Schedules:
        """Periodic schedules as published in Redis by the workers' scheduler duty."""
        return Schedules(self.redis, clock=self.clock, scripts=self.antre.scripts)

    def task_schema(self, job_type: str) -> tuple[Schema | None, str]:
        """The payload schema of a typed task (``@app.task``) the dashboard's app registers,
        or None and a note saying why it is not known here."""
        task = self.antre.tasks.get(job_type)
        if task is not None:
            return task.schema(), ""
        if not self.antre.handlers:
            return None, ("this dashboard does not import the handlers, so the task's schema "
                          "is unknown here: start it with the app (antre web pkg.module:app) "
                          "to see it")
        if job_type in self.antre.handlers:
            return None, (f"'{job_type}' is an untyped handler (@app.handler): its payload is "
                          "any JSON the handler accepts")
        return None, f"the dashboard's app registers no handler '{job_type}'"

    def task_json_schema(self, job_type: str) -> str:
        """The JSON schema of the typed task's ``model=`` (indented JSON text), '' when the
        dashboard's app registers no task of that type or the task has no model."""
        task = self.antre.tasks.get(job_type)
        found = task.json_schema() if task is not None else None
        return json.dumps(found, indent=2, sort_keys=False) if found else ""

    def idempotent(self, job_type: str) -> bool | None:
        """False when the app knows the handler and it is marked not idempotent."""
        spec = self.antre.handlers.get(job_type)
        return None if spec is None else bool(spec.idempotent)


def dashboard_redis(url: str) -> redis.Redis:
    """A client with short timeouts: a page waits a second or two for Redis, not ten."""
    return antre.redis_from_url(url, decode_responses=True, socket_timeout=2.0,
                                socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 1),
                                health_check_interval=30)


def redact(url: str) -> str:
    """A URL fit for a banner: no password, no secret query values (the core's one redaction)."""
    return redact_url(url)


def scrubbed(exc: object) -> str:
    """An exception's text fit for a log line, the audit log or a page: every URL in it
    redacted, and the passwords of this dashboard's Redis and database URLs blanked."""
    svc: Services | None = current_app.extensions.get("antre") if current_app else None
    urls = (svc.redis_url, svc.database_url) if svc is not None else ()
    return scrub(exc, *urls)


def build(config: dict[str, Any]) -> Services:
    clock: Clock = config.get("ANTRE_CLOCK") or system_ms
    app: antre.Antre | None = config.get("ANTRE_APP")
    redis_url = config.get("ANTRE_REDIS_URL") or (app.redis_url if app else None) or \
        settings.REDIS_URL.get()
    db_url = config.get("ANTRE_DATABASE_URL") or (app.database_url if app else None) or \
        settings.DATABASE_URL.get() or f"sqlite:///{os.path.abspath('antre.db')}"
    if app is None:
        app = antre.Antre(redis_url=redis_url, database_url=db_url, clock=clock,
                          redis_client=dashboard_redis(redis_url))
    elif config.get("ANTRE_CLOCK") is None:
        clock = app.clock
    client = app.redis
    outages = Outages(clock)
    try:
        antre.stores.sql.migrate(db_url)
    except Exception as exc:  # noqa: BLE001 - the dashboard starts and shows the outage
        log.error("database migration failed at startup: %s", scrub(exc, db_url))
        outages.failed("database")
    sf = users = audit = idem = None
    try:  # the antre app's own stores (built from its database URL), when it is ours too
        if app.database_url == db_url:
            sf, users, audit, idem = (getattr(app, n, None) for n in
                                      ("session_factory", "users", "audit", "idempotency"))
    except Exception as exc:  # noqa: BLE001 - database down at startup: build lazy stores
        log.error("the antre app's SQL stores are unavailable: %s", scrub(exc, db_url))
        sf = users = audit = idem = None
    if sf is None:
        sf = antre.stores.sql.session_factory(antre.stores.sql.make_engine(db_url))  # connects lazily
    svc = Services(antre=app, reads=ReadModels(client, clock),
                   users=users or UserStore(sf, clock=clock),
                   audit=audit or AuditLog(sf, clock=clock), locks=Locks(client, clock=clock),
                   registry=WorkerRegistry(client, clock), bulk=BulkReplays(client, clock),
                   idempotency=idem or IdempotencyStore(sf, clock=clock), clock=clock,
                   redis_url=redis_url, database_url=db_url, outages=outages,
                   logins=LoginThrottle(client, clock=clock), session_factory=sf,
                   fences=LockFences(sf.kw["bind"].dialect.name, clock))
    return svc


def get() -> Services:
    svc: Services = current_app.extensions["antre"]
    return svc


def install(flask_app: Flask, config: dict[str, Any]) -> Services:
    svc = build(config)
    flask_app.extensions["antre"] = svc
    return svc
