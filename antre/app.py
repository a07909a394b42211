"""``Antre``: the application object producers and workers share (handlers, connections)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, cast

import redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

import antre.settings as settings
from antre.stores import sql
from antre.observe.alerts import AlertConfig
from antre.stores.audit import AuditLog
from antre.clock import Clock, system_ms
from antre.engine.cipher import (KEYS_SETTING, PayloadCipher, encrypted_queues, parse_ring,
                                 ring_from_env)
from antre.engine.envelope import JobSpec, check_group, checked_payload, new_job_id
from antre.flows import Batch, Chain, Chord, Flow, FlowProducer, FlowRow, Parallel, Step
from antre.stores.fencing import LockFences
from antre.observe.finder import Finder, JobStatus, ResultStatus
from antre.observe.waiting import PerLoop, ResultWaiter
from antre.stores.idempotency import CompletedCache, IdempotencyStore
from antre.stores.outbox import Outbox
from antre.stores.users import UserStore
from antre.errors import InvalidJob
from antre.limits.admission import LimitPolicy
from antre.engine.keys import valid_name
from antre.engine.locks import Lock, Locks, held_lock
from antre.maintenance.periodic import Schedule, Scheduler, TickResult, make_schedule
from antre.engine.queue import Queue
from antre.maintenance.retention import RetentionPolicy, policy_from_env
from antre.engine.retry import RetryPolicy
from antre.engine import aio
from antre.engine import partitions as partitions_mod
from antre.engine.scripts import Scripts
from antre.hooks import H, Enqueued, Hooks, Tick
from antre.observe.tracing import enqueue_span, inject_traceparent, recording
from antre.tasks import P, R, Task, TaskFn

Handler = Callable[[Any, Any], Any]
# a worker's idle runner threads each hold a connection while they wait on the wake list:
# redis-py's default pool of 100 refused "Too many connections" at --threads 128
MAX_REDIS_CONNECTIONS = 1_000


CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def cluster_url(url: str) -> str | None:
    """The plain URL of a ``redis+cluster://`` (``rediss+cluster://``) URL: a Redis Cluster
    reached through that node; None for any other URL."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower()) if sep else None
    return f"{plain}://{rest}" if plain else None


def redis_from_url(url: str, **options: Any) -> "redis.Redis":
    """A client for ``url``: a ``RedisCluster`` for a ``redis+cluster://`` URL (options it
    does not take are dropped), else ``redis.Redis.from_url``."""
    plain = cluster_url(url)
    if plain is None:
        return redis.Redis.from_url(url, **options)
    options.pop("max_connections", None)
    options.pop("health_check_interval", None)
    options.pop("retry", None)
    return cast("redis.Redis", RedisCluster.from_url(plain, **options))


def _async_from_url(url: str, **options: Any) -> AsyncRedis:
    """``redis_from_url`` for ``redis.asyncio``."""
    plain = cluster_url(url)
    if plain is None:
        return AsyncRedis.from_url(url, **options)
    options.pop("health_check_interval", None)
    return cast(AsyncRedis, AsyncRedisCluster.from_url(plain, **options))


def _group_of(handler: "HandlerSpec", payload: Any) -> str:
    """A handler's default group for ``payload``; ``InvalidJob`` when its function fails."""
    rule = handler.group
    if not callable(rule):
        return str(rule)
    try:
        return str(rule(payload))
    except Exception as exc:
        raise InvalidJob(f"the group function of handler {handler.name!r} failed on this "
                         f"payload ({type(exc).__name__}: {exc}); pass group= to enqueue, or "
                         "fix the function") from exc


def _check_group_defaults(options: dict[str, Any]) -> None:
    """A handler's group defaults, refused when it is declared rather than at each enqueue:
    ``InvalidJob`` saying what to pass."""
    group = options.get("group")
    if group is None and options.get("group_concurrency") is None \
            and options.get("group_rate") is None:
        return
    # a function's group is only known per payload: its name is checked at enqueue
    check_group("tenant:1" if group is None or callable(group) else group,
                options.get("group_concurrency"), options.get("group_rate"))


@dataclass
class HandlerSpec:
    name: str
    fn: Handler
    queue: str = "default"
    max_attempts: int = 5
    timeout_s: float = 30.0
    visibility_timeout_s: float = 30.0
    max_deliveries: int = 10
    max_runtime_s: float = 3600.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    idempotent: bool = True
    lock_ttl_s: float = 30.0
    downstream: str | None = None
    flow: LimitPolicy | None = None  # concurrency / rate limits for this job type, all workers
    # incident controls: how long a cancelled handler may take to stop before it is abandoned
    # (its process recycled); how old a job may be when reserved (None: the app's default);
    # how often it may be held back without running (None: the app's default)
    cancel_grace_s: float = 10.0
    max_age_s: float | None = None
    max_snoozes: int | None = None
    unique: bool = False  # enqueue returns the pending job holding the same idempotency key
    unique_for_s: float = 0.0  # and refuses a key whose job completed this recently
    is_async: bool = False  # an ``async def`` handler: run on the worker's event loop
    # a retried job with a lock_key keeps its key's turn (the jobs behind it wait for its
    # retry); False: the next job of the key runs first and the retried one rejoins the line
    ordered: bool = True
    # fair shares: the jobs' default group, a name or a function of the payload
    # (``group=lambda payload: payload["tenant"]``), and its slots (ready or running at once)
    group: str | Callable[[Any], str] | None = None
    group_concurrency: int | None = None
    group_rate: str | None = None  # at most this many of a group's jobs start: '10/s', '600/m'
    encrypt: bool = False  # payloads and results stored sealed (antre/engine/cipher.py)

    def defaults(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "timeout_s": self.timeout_s,
                "visibility_timeout_s": self.visibility_timeout_s,
                "max_deliveries": self.max_deliveries, "unique": self.unique,
                "unique_for_s": self.unique_for_s}


DEFAULT_MAX_SNOOZES = settings.MAX_SNOOZES.default


@dataclass(frozen=True)
class SqlParts:
    """What an ``Antre`` with a database builds on first use, all on one engine."""

    engine: Engine
    session_factory: sessionmaker[Session]
    idempotency: IdempotencyStore
    outbox: Outbox
    users: UserStore
    audit: AuditLog
    fences: LockFences


class Antre:
    """Configured from keyword arguments, else ``ANTRE_REDIS_URL`` / ``ANTRE_DATABASE_URL``.

    Connections are made lazily, so importing a module that builds an ``Antre`` connects to
    nothing.
    """

    def __init__(self, redis_url: str | None = None, database_url: str | None = None, *,
                 default_queue: str = "default", clock: Clock = system_ms,
                 max_payload_bytes: int | None = None,
                 redis_client: "redis.Redis | None" = None,
                 alerts: AlertConfig | None = None, max_age_s: float | None = None,
                 max_snoozes: int | None = None, partitions: int | None = None,
                 encrypt: Any = False, payload_keys: str | None = None) -> None:
        self._redis_url = redis_url
        # encrypted payloads: the queues sealed whole (None: every queue), the job types
        # sealed in any queue (handler(encrypt=True)), and the key ring's text (else
        # ANTRE_PAYLOAD_KEYS, read when first needed)
        self.encrypted_queues = encrypted_queues(encrypt)
        self.sealed_types: set[str] = set()
        self._payload_keys = payload_keys
        self._cipher: tuple[PayloadCipher | None] | None = None
        # each queue's partitions (antre/engine/partitions.py): this default, else
        # ANTRE_PARTITIONS, else 1; queue_options(name, partitions=) for one queue
        self.default_partitions = (settings.PARTITIONS.get() if partitions is None
                                   else partitions_mod.checked_count(partitions))
        self.queue_partitions: dict[str, int] = {}
        self._partitions: dict[str, partitions_mod.Partitions] = {}
        self._parts_lock = threading.Lock()
        self._database_url = database_url
        self.default_queue = default_queue
        self.clock = clock
        self.max_payload_bytes = max_payload_bytes or settings.MAX_PAYLOAD_BYTES.get()
        self.handlers: dict[str, HandlerSpec] = {}
        self.tasks: dict[str, Task[Any, Any]] = {}  # the typed ones (@app.task): their schema
        self.downstreams: dict[str, LimitPolicy] = {}
        self.schedules: dict[str, Schedule] = {}
        self.retention_policies: dict[str, RetentionPolicy] = {}  # per queue; else from env
        self.hooks = Hooks()  # lifecycle hooks (antre.hooks): add_hook(...)
        if redis_client is not None and not redis_client.get_encoder().decode_responses:
            raise ValueError("Antre needs a Redis client that decodes replies to str: build it "
                             "with decode_responses=True (e.g. redis.Redis.from_url(url, "
                             "decode_responses=True)), or pass redis_url= instead")
        self._redis = redis_client
        self._aredis: "AsyncRedis | None" = None
        self._waiter: ResultWaiter | None = None
        self._scripts: Scripts | None = None
        self._queues: dict[str, Queue] = {}
        self._sql: SqlParts | None = None
        self._database_checked: bool | None = None  # True: no database (see _no_database)
        self._init_lock = threading.Lock()  # lazy connections are built once across threads
        self.migrate_on_start = True
        self._alerts = alerts
        self._max_age_s = max_age_s
        self._max_snoozes = max_snoozes
        self._env_max_age: tuple[float | None] | None = None  # ANTRE_MAX_AGE_S, read once

    def max_age_s_for(self, spec: HandlerSpec) -> float | None:
        """A job older than this when reserved goes to the DLQ as expired, without running:
        the handler's ``max_age_s``, else ``Antre(max_age_s=)``, else ``ANTRE_MAX_AGE_S``
        (none by default: no limit)."""
        if spec.max_age_s is not None:
            return spec.max_age_s
        if self._max_age_s is not None:
            return self._max_age_s
        if self._env_max_age is None:  # a worker asks for every job: read on first use
            self._env_max_age = (settings.MAX_AGE_S.get(),)
        return self._env_max_age[0]

    def max_snoozes_for(self, spec: HandlerSpec) -> int:
        """How many times a job may be held back (lock busy, flow control, idempotency busy)
        before it goes to the DLQ with the reason: the handler's ``max_snoozes``, else
        ``Antre(max_snoozes=)``, else ``ANTRE_MAX_SNOOZES`` (default 1000)."""
        if spec.max_snoozes is not None:
            return spec.max_snoozes
        if self._max_snoozes is not None:
            return self._max_snoozes
        return settings.MAX_SNOOZES.get()

    @property
    def alert_config(self) -> AlertConfig:
        """Alert thresholds: ``alerts=`` given to the app, else ``ANTRE_ALERT_*`` from the
        environment (read when needed, like the URLs)."""
        return self._alerts or AlertConfig.from_env()

    # -- hooks (antre/hooks.py) ---------------------------------------------------------------
    def add_hook(self, hook: H) -> H:
        """Tell ``hook`` (an ``antre.hooks.Hook``) what happens to this app's jobs: enqueues,
        a handler's start and end, retries, dead jobs and periodic ticks. Its errors are logged,
        never passed on to a job. Returns ``hook``."""
        return self.hooks.add(hook)

    def _enqueued_event(self, q: Queue, spec: JobSpec, job_id: str, flow_id: str = "") -> Enqueued:
        return Enqueued(job_id, spec.job_type, q.name, spec.idempotency_key, spec.payload,
                        spec.lock_key, spec.delay_s, spec.group, flow_id)

    def _enqueued(self, q: Queue, specs: list[JobSpec], ids: list[str]) -> None:
        for spec, job_id in zip(specs, ids):
            self.hooks.emit(self.hooks.on_enqueue, self._enqueued_event(q, spec, job_id))

    def _flow_stored(self, q: Queue, flow_id: str, specs: list[JobSpec]) -> None:
        """A flow's jobs, stored whole: one ``on_enqueue`` each."""
        for spec in specs:
            self.hooks.emit(self.hooks.on_enqueue,
                            self._enqueued_event(q, spec, spec.job_id or "", flow_id))

    def _ticked(self, schedule: Schedule, tick: TickResult) -> None:
        queue = schedule.queue or self.default_queue
        self.hooks.emit(self.hooks.on_tick, Tick(schedule, tick.tick_ms, tick.job_id, queue,
                                                 tick.idempotency_key))

    # -- connections -------------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        """Read when first needed, so a module-level ``Antre()`` sees the environment of the
        process that uses it, not of the moment it was imported."""
        return self._redis_url or settings.REDIS_URL.get()

    @property
    def database_url(self) -> str | None:
        return self._database_url or settings.DATABASE_URL.get()

    @property
    def redis(self) -> "redis.Redis":
        if self._redis is not None:
            return self._redis
        with self._init_lock:
            if self._redis is None:
                self._redis = redis_from_url(
                    self.redis_url, decode_responses=True, socket_timeout=10,
                    socket_connect_timeout=5, health_check_interval=30,
                    max_connections=MAX_REDIS_CONNECTIONS)
        return self._redis

    @property
    def scripts(self) -> Scripts:
        if self._scripts is None:
            self._scripts = Scripts(self.redis)
        return self._scripts

    # -- partitions: one queue over several hash tags / Cluster nodes -------------------------
    def queue_options(self, name: str, *, partitions: int | None = None) -> None:
        """Per-queue settings: ``partitions=N`` spreads the queue over N partitions (each its
        own hash tag, so a Redis Cluster puts them on different nodes); more than the
        published count grows it for every host on first use; fewer is ignored (a queue's
        partitions are never taken away)."""
        if not valid_name(name):
            raise InvalidJob(f"bad queue name {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        if partitions is not None:
            self.queue_partitions[name] = partitions_mod.checked_count(partitions)
            self._partitions.pop(name, None)

    def partitions_of(self, name: str | None = None) -> partitions_mod.Partitions:
        """The queue's partitions as this process sees them (the published count)."""
        name = name or self.default_queue
        parts = self._partitions.get(name)
        if parts is None:
            client = self.redis  # (connects under _init_lock: not while holding it)
            with self._parts_lock:
                parts = self._partitions.get(name)
                if parts is None:
                    parts = self._partitions[name] = partitions_mod.Partitions(
                        client, name, lambda p: self.queue(name, p),
                        configured=self.queue_partitions.get(name, self.default_partitions),
                        clock=self.clock)
        return parts

    def queue(self, name: str | None = None, partition: int = 0) -> Queue:
        """Partition ``partition`` (0: the queue's first, with its historic keys)."""
        name = name or self.default_queue
        if partition:
            return self._made_queue(name, partition)
        if name not in self._queues:
            self._queues[name] = self._made_queue(name, 0)
        return self._queues[name]

    def _made_queue(self, name: str, partition: int) -> Queue:
        whole = self.encrypted_queues is None or name in self.encrypted_queues
        return Queue(self.redis, name, clock=self.clock, max_payload_bytes=self.max_payload_bytes,
                     scripts=self.scripts, done_retention_ms=self.done_retention_ms(name),
                     partition=partition, cipher=self.sealing_cipher(whole),
                     sealed_types=None if whole else self.sealed_types)

    @property
    def cipher(self) -> PayloadCipher | None:
        """The payload cipher from ``payload_keys=``, else ``ANTRE_PAYLOAD_KEYS`` (None when
        neither gives a key; a bad key raises ``ValueError`` saying what to pass)."""
        if self._cipher is None:
            ring = parse_ring(self._payload_keys) if self._payload_keys else ring_from_env()
            self._cipher = (PayloadCipher(ring) if ring else None,)
        return self._cipher[0]

    def sealing_cipher(self, whole_queue: bool) -> PayloadCipher | None:
        """The cipher a queue seals with: the app's, when anything is to be sealed (a
        ``ValueError`` saying what to set when something is and no key is given)."""
        if not (whole_queue or self.sealed_types) and self.cipher is None:
            return None
        if self.cipher is None:
            raise ValueError(f"encrypted payloads need a key: set {KEYS_SETTING}="
                             "'v1:<base64 of 32 random bytes>' or pass Antre(payload_keys=...)")
        return self.cipher

    def job_queue(self, queue: str, job_id: str) -> Queue:
        """The partition of ``queue`` holding the job (or flow) ``job_id`` (named by its id)."""
        return self.partitions_of(queue).for_id(job_id)

    def done_retention_ms(self, queue: str) -> int:
        """How long ``queue``'s done jobs are kept (its retention policy), for the acks' trim."""
        return self.retention_for(queue).done_max_age_s * 1000

    # -- SQL (idempotency records, outbox, users, audit): None without a database ------------
    def _sql_parts(self) -> SqlParts | None:
        if self._sql is None and self._no_database():
            return None
        if self._sql is None:
            with self._init_lock:
                if self._sql is None:
                    self._sql = self._connect_sql()
        return self._sql

    def _no_database(self) -> bool:
        """No database URL: read when first needed, then kept (a worker asks per job)."""
        if self._database_checked is None:
            self._database_checked = self.database_url is None
        return self._database_checked

    def _connect_sql(self) -> SqlParts:
        database_url = self.database_url
        assert database_url is not None
        engine = sql.make_engine(database_url)
        if self.migrate_on_start:
            sql.migrate(engine)
        factory = sql.session_factory(engine)
        return SqlParts(
            engine=engine, session_factory=factory,
            idempotency=IdempotencyStore(factory, self.clock,
                                         cache=CompletedCache(clock=self.clock)),
            outbox=Outbox(factory, self.clock),
            users=UserStore(factory, self.clock),
            audit=AuditLog(factory, self.clock),
            fences=LockFences(engine.dialect.name, self.clock),
        )

    @property
    def engine(self) -> Engine | None:
        parts = self._sql_parts()
        return parts.engine if parts else None

    @property
    def session_factory(self) -> sessionmaker[Session] | None:
        parts = self._sql_parts()
        return parts.session_factory if parts else None

    @property
    def idempotency(self) -> IdempotencyStore | None:
        parts = self._sql_parts()
        return parts.idempotency if parts else None

    @property
    def fences(self) -> LockFences | None:
        """Fencing tokens checked in SQL (``antre.stores.fencing``); None without a database."""
        parts = self._sql_parts()
        return parts.fences if parts else None

    @property
    def outbox(self) -> Outbox | None:
        parts = self._sql_parts()
        return parts.outbox if parts else None

    @property
    def users(self) -> UserStore | None:
        parts = self._sql_parts()
        return parts.users if parts else None

    @property
    def audit(self) -> AuditLog | None:
        parts = self._sql_parts()
        return parts.audit if parts else None

    def relay_outbox(self, batch: int = 500) -> int:
        """Push committed outbox rows to Redis (the enqueue script skips ids already there, so
        a crash between push and marking sent duplicates nothing)."""
        if self.outbox is None:
            return 0

        def push(rows: list[Any]) -> None:
            by_queue: dict[str, list[JobSpec]] = {}
            for row in rows:
                by_queue.setdefault(row.queue, []).append(JobSpec(**row.envelope))
            for name, specs in by_queue.items():  # each to the partition its id names
                for q, idx in self.partitions_of(name).split(specs, by_id=True):
                    q.enqueue_many([specs[i] for i in idx])
        return self.outbox.relay(push, batch)

    @property
    def locks(self) -> Locks:
        return Locks(self.redis, clock=self.clock, scripts=self.scripts)

    # -- handlers ----------------------------------------------------------------------------
    def handler(self, name: str, **options: Any) -> Callable[[Handler], Handler]:
        """Register ``fn(ctx, payload)`` for job type ``name``; an ``async def`` handler runs on
        the worker's event loop (``antre worker --concurrency N``). Options: queue, max_attempts,
        timeout_s, visibility_timeout_s, max_deliveries, max_runtime_s, retry (RetryPolicy),
        idempotent (False warns on replay), lock_ttl_s, downstream (see ``downstream()``),
        flow (a ``LimitPolicy`` for this job type), cancel_grace_s, max_age_s, max_snoozes,
        unique and unique_for_s (the defaults of ``enqueue``'s own: see there), ordered (False:
        a retried job with a lock_key lets the jobs waiting behind its key go first), group (a
        name, or a function of the payload), group_concurrency and group_rate (fair shares:
        see ``enqueue``)."""
        if not valid_name(name):
            raise InvalidJob(f"bad job type {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        _check_group_defaults(options)
        if options.get("encrypt"):
            self.sealed_types.add(name)
            for made in self._queues.values():  # a queue made before this handler
                made.cipher = made.cipher or self.sealing_cipher(False)

        def register(fn: Handler) -> Handler:
            self.handlers[name] = HandlerSpec(name=name, fn=fn,
                                              is_async=inspect.iscoroutinefunction(fn), **options)
            return fn
        return register

    def task(self, name: str | None = None, *, key: Callable[..., str] | None = None,
             model: type | None = None,
             **options: Any) -> Callable[[TaskFn[P, R]], Task[P, R]]:
        """A typed handler: ``@app.task(key=lambda order_id: f"charge:{order_id}")`` above
        ``def charge(ctx, order_id: int) -> ...``; then ``charge.enqueue(order_id=7)`` is
        checked by mypy against the handler's parameters (``antre.tasks``). ``name``: the job
        type (default: the function's name); ``key``: the idempotency key from the arguments
        (else ``charge.using(idempotency_key=...)``); ``model``: a dataclass or pydantic
        model the payload must fit; ``options``: as ``handler()``'s."""
        def register(fn: TaskFn[P, R]) -> Task[P, R]:
            job_type = name or fn.__name__
            made = Task(self, job_type, fn, key=key, model=model)
            self.handler(job_type, **options)(made.handler())
            self.tasks[job_type] = made
            return made
        return register

    # -- periodic jobs (antre/maintenance/periodic.py) ---------------------------------------------------
    def periodic(self, cron: str | None = None, job_type: str = "", *, every_s: int | None = None,
                 payload: Any = None, timezone: str = "UTC", name: str | None = None,
                 queue: str | None = None, catch_up: str = "once", max_catch_up: int = 10,
                 grace_s: float = 60.0, **options: Any) -> Callable[[Handler], Handler]:
        """Enqueue ``job_type`` on a schedule: ``periodic("*/5 * * * *", "reconcile_stock")``
        (cron, in ``timezone``) or ``periodic(job_type="flush", every_s=30)``. Each tick is
        enqueued once cluster-wide by the workers' scheduler duty. ``catch_up`` after a
        scheduler outage: 'skip', 'once' (default) or 'all' (the latest ``max_catch_up``).
        ``name`` (default: the job type) tells several schedules of one type apart;
        ``options`` are job options (max_attempts, timeout_s, ...). Raises ``InvalidJob`` at
        once on a bad expression, timezone or option. Usable as a decorator of the handler."""
        schedule = make_schedule(name or job_type, job_type, cron=cron, every_s=every_s,
                                 payload=payload, timezone=timezone, queue=queue,
                                 catch_up=catch_up, max_catch_up=max_catch_up, grace_s=grace_s,
                                 options=options)
        if schedule.name in self.schedules:
            raise InvalidJob(f"a schedule named {schedule.name!r} exists already: pass name= "
                             "to tell two schedules of one job type apart")
        self.schedules[schedule.name] = schedule

        def register(fn: Handler) -> Handler:
            if job_type not in self.handlers:
                self.handler(job_type)(fn)
            return fn
        return register

    def resolved_schedules(self) -> list[Schedule]:
        """The schedules with their queue and job options filled in from their handlers."""
        out = []
        for s in self.schedules.values():
            handler = self.handlers.get(s.job_type)
            queue = s.queue or (handler.queue if handler else self.default_queue)
            options = {**(handler.defaults() if handler else {}), **s.options}
            out.append(dataclasses.replace(s, queue=queue, options=options))
        return out

    def scheduler(self) -> Scheduler:
        return Scheduler(self.redis, self.resolved_schedules(), clock=self.clock,
                         scripts=self.scripts, default_queue=self.default_queue,
                         on_tick=self._ticked if self.hooks.on_tick else None)

    # -- retention (antre/maintenance/retention.py) -----------------------------------------------------
    def retention(self, queue: str, **limits: int) -> RetentionPolicy:
        """Set ``queue``'s retention: dead_max_jobs, dead_max_age_s, done_max_age_s (the rest
        from the environment's defaults). Applied by the workers' retention duty."""
        policy = dataclasses.replace(policy_from_env(), **limits)
        self.retention_policies[queue] = policy
        return policy

    def retention_for(self, queue: str) -> RetentionPolicy:
        return self.retention_policies.get(queue) or policy_from_env()

    def downstream(self, name: str, policy: LimitPolicy) -> None:
        """Limits shared by every handler with ``downstream=name``: concurrency, a token-bucket
        rate and a circuit breaker (``LimitPolicy``), enforced across all workers."""
        if not valid_name(name):
            raise InvalidJob(f"bad downstream name {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        self.downstreams[name] = policy

    def queues(self) -> list[str]:
        """Queues that handlers are registered for, and the default queue, where jobs of a type
        this app has no handler for land (a worker buries those with the reason)."""
        return sorted({spec.queue for spec in self.handlers.values()} | {self.default_queue})

    # -- producing ---------------------------------------------------------------------------
    def spec(self, job_type: str, payload: Any, *, idempotency_key: str,
             lock_key: str | None = None, delay_s: float = 0.0, **options: Any) -> JobSpec:
        handler = self.handlers.get(job_type)
        merged = {**(handler.defaults() if handler else {}), **options}
        merged.pop("queue", None)
        if handler is not None and handler.group is not None and "group" not in options:
            merged["group"] = _group_of(handler, payload)
            if handler.group_concurrency is not None:
                merged.setdefault("group_concurrency", handler.group_concurrency)
            if handler.group_rate is not None:
                merged.setdefault("group_rate", handler.group_rate)
        return JobSpec(job_type, payload, idempotency_key, lock_key, delay_s, **merged)

    def queue_for(self, job_type: str, queue: str | None) -> Queue:
        handler = self.handlers.get(job_type)
        return self.queue(queue or (handler.queue if handler else None))

    def enqueue(self, job_type: str, payload: Any, *, idempotency_key: str,
                lock_key: str | None = None, delay_s: float = 0.0, queue: str | None = None,
                session: Any = None, **options: Any) -> str:
        """Enqueue one job; returns its id. With ``session=`` (a SQLAlchemy session) the job is
        written to the outbox in the caller's transaction and pushed to Redis by the relay.

        ``lock_key``: the jobs of a queue sharing it run one at a time, in enqueue order; the
        others wait (state 'waiting') without being delivered. ``group="tenant:7"``: fair
        shares; at most ``group_concurrency`` (default 128) of a group's jobs are ready or
        running at once, the rest wait in the group's line, so one group's backlog never
        starves another's jobs. ``group_rate="10/s"`` (or '600/m', '1/h', '5/10s'): at most
        that many of the group's jobs start in any such window; the next one waits in
        'scheduled' until the window allows it, so it never holds back other groups.

        ``unique=True``: while a job with the same idempotency key is pending (ready,
        scheduled or in flight) in this queue, no second job is added and that job's id is
        returned; ``unique_for_s=N`` also refuses the key for N seconds after its job
        completed (the completed job's id is returned). Decided in the enqueue script."""
        q = self.queue_for(job_type, queue)
        spec = self.spec(job_type, payload, idempotency_key=idempotency_key, lock_key=lock_key,
                         delay_s=delay_s, **options)
        q = self._partition(q, spec)
        if recording():  # a PRODUCER span, whose traceparent the job carries
            with enqueue_span(job_type, q.name) as traceparent:
                spec.trace_id = spec.trace_id or traceparent
                return self._store(q, spec, session)
        # no span would be recorded: a trace in progress (if any) is carried on as it is
        spec.trace_id = spec.trace_id or inject_traceparent()
        return self._store(q, spec, session)

    def _partition(self, q: Queue, spec: JobSpec) -> Queue:
        """The partition of ``q``'s queue that ``spec`` goes to (``Partitions.route``)."""
        parts = self._partitions.get(q.name) or self.partitions_of(q.name)
        p = parts.route(spec)
        return q if p == 0 else parts.queue(p)

    def _store(self, q: Queue, spec: JobSpec, session: Any) -> str:
        job_id = self.outbox_add(session, q, spec) if session is not None \
            else q.enqueue_one(spec)
        if self.hooks.on_enqueue:
            self._enqueued(q, [spec], [job_id])
        return job_id

    def enqueue_many(self, jobs: list[JobSpec], queue: str | None = None) -> list[str]:
        """Enqueue prepared ``JobSpec``s (see ``spec``) in a few round trips; returns their
        ids in order. Each goes to its handler's queue, as ``enqueue`` routes it (the default
        queue for a type without a handler), or all to ``queue`` when it is given: the batch
        is grouped by queue, then a partitioned queue's share split per partition, one script
        call per chunk."""
        by_queue = self._by_queue(jobs, queue)
        if len(by_queue) == 1:
            return self._enqueue_batch(next(iter(by_queue)), jobs)
        ids = [""] * len(jobs)
        for name, idx in by_queue.items():
            for i, job_id in zip(idx, self._enqueue_batch(name, [jobs[i] for i in idx])):
                ids[i] = job_id
        return ids

    def _by_queue(self, jobs: list[JobSpec], queue: str | None) -> dict[str, list[int]]:
        """The specs' positions per queue they go to: ``queue``, else each one's handler's
        (``enqueue``'s routing). Over several queues every spec is checked first, so one bad
        spec stores none (each queue's batch checks its own before it sends)."""
        if queue is not None:
            return {queue: list(range(len(jobs)))}
        by_queue: dict[str, list[int]] = {}
        for i, spec in enumerate(jobs):
            handler = self.handlers.get(spec.job_type)
            by_queue.setdefault((handler.queue if handler else None) or self.default_queue,
                                []).append(i)
        if len(by_queue) > 1:
            for name, idx in by_queue.items():
                q = self.queue(name)
                for i in idx:
                    checked_payload(jobs[i], q.name, q.max_payload_bytes)
        return by_queue

    def _enqueue_batch(self, queue: str, jobs: list[JobSpec]) -> list[str]:
        """``jobs`` into ``queue``, split per partition."""
        parts = self.partitions_of(queue).split(jobs)
        if len(parts) == 1:
            ids = parts[0][0].enqueue_many(jobs)
            if self.hooks.on_enqueue:
                self._enqueued(parts[0][0], jobs, ids)
            return ids
        ids = [""] * len(jobs)
        for q, idx in parts:
            for i, job_id in zip(idx, q.enqueue_many([jobs[i] for i in idx])):
                ids[i] = job_id
            if self.hooks.on_enqueue:
                self._enqueued(q, [jobs[i] for i in idx], [ids[i] for i in idx])
        return ids

    # -- flows (antre/flows/): chains, groups, chords, batches --------------------------------
    @property
    def flows(self) -> FlowProducer:
        return FlowProducer(self, on_stored=self._flow_stored if self.hooks.on_enqueue else None)

    def chain(self, *steps: Step) -> Chain:
        """Each step after the previous one, given its result (``ctx.previous_result``);
        ``.enqueue(...)`` stores the whole flow (see ``antre.flows.compose``)."""
        return self.flows.chain(*steps)

    def parallel(self, steps: Iterable[Step]) -> Parallel:
        """Steps run in parallel (a fan-out); ``.enqueue(...)`` stores them as one flow."""
        return self.flows.parallel(steps)

    def group(self, steps: Iterable[Step]) -> Parallel:
        """Deprecated spelling of :meth:`parallel` ("group" names a fair-share group)."""
        warnings.warn("app.group([...]) is deprecated: use app.parallel([...]) (a fan-out; "
                      "'group' names a fair-share group, enqueue(group=...))",
                      DeprecationWarning, stacklevel=2)
        return self.flows.parallel(steps)

    def chord(self, header: Parallel | Iterable[Step], callback: Step) -> Chord:
        """``callback`` once every step of ``header`` completed, with their results in order
        (``ctx.flow_results``)."""
        return self.flows.chord(header, callback)

    def batch(self, *, on_success: JobSpec | None = None, on_complete: JobSpec | None = None,
              description: str = "", queue: str | None = None) -> Batch:
        """An open batch: ``add`` jobs over time, ``close()`` (or leave its ``with`` block);
        then ``on_complete`` runs once every job settled, ``on_success`` when none is dead."""
        return self.flows.batch(on_success=on_success, on_complete=on_complete,
                                description=description, queue=queue)

    def flow(self, flow_id: str, queue: str | None = None) -> Flow:
        """The handle of a stored flow (status, results, wait, cancel)."""
        return self.flows.flow(flow_id, queue)

    async def aflow_wait(self, flow_id: str, timeout: float | None = None,
                         queue: str | None = None) -> FlowRow:
        """``flow(flow_id, queue).wait(timeout)`` from a coroutine, holding no thread while it
        waits (its BLMOVE on ``redis.asyncio``, the app's client for the running loop, as
        ``aresult``): the flow's status once it is final; ``FlowTimeout`` at the timeout."""
        flow = await asyncio.to_thread(self.flow, flow_id, queue)
        return await flow.await_(timeout, aredis=self.waiter.aredis)

    # -- producing from asyncio (redis.asyncio; one round trip per call) ----------------------
    @property
    def aredis(self) -> AsyncRedis:
        """The producer's ``redis.asyncio`` client, made on first use (the same URL). Use it
        from one event loop; an app used from several loops makes one per loop itself."""
        if self._aredis is None:
            self._aredis = _async_from_url(self.redis_url, decode_responses=True,
                                           socket_timeout=10, socket_connect_timeout=5,
                                           health_check_interval=30)
        return self._aredis

    async def aenqueue(self, job_type: str, payload: Any, *, idempotency_key: str,
                       lock_key: str | None = None, delay_s: float = 0.0,
                       queue: str | None = None, **options: Any) -> str:
        """``enqueue`` from a coroutine: the same validation (``InvalidJob`` before anything
        is sent), scripts and tracing, one pipelined round trip on ``redis.asyncio``. (The
        transactional ``session=`` form is synchronous: use ``enqueue`` for it.)"""
        q = self.queue_for(job_type, queue)
        spec = self.spec(job_type, payload, idempotency_key=idempotency_key, lock_key=lock_key,
                         delay_s=delay_s, **options)
        await self._afresh_partitions(q.name)
        q = self._partition(q, spec)
        if recording():
            with enqueue_span(job_type, q.name) as traceparent:
                spec.trace_id = spec.trace_id or traceparent
                return (await self._asend(q, [spec]))[0]
        spec.trace_id = spec.trace_id or inject_traceparent()
        return (await self._asend(q, [spec]))[0]

    async def aenqueue_many(self, jobs: list[JobSpec], queue: str | None = None) -> list[str]:
        """``enqueue_many`` from a coroutine (each spec to its handler's queue, or all to
        ``queue``): every spec checked first, then one round trip per queue."""
        if not jobs:
            return []
        by_queue = self._by_queue(jobs, queue)
        if len(by_queue) == 1:
            return await self._aenqueue_batch(next(iter(by_queue)), jobs)
        ids: list[str] = [""] * len(jobs)
        for name, idx in by_queue.items():
            got = await self._aenqueue_batch(name, [jobs[i] for i in idx])
            for i, job_id in zip(idx, got):
                ids[i] = job_id
        return ids

    async def _aenqueue_batch(self, name: str, jobs: list[JobSpec]) -> list[str]:
        await self._afresh_partitions(name)
        parts = self.partitions_of(name).split(jobs)
        if len(parts) == 1:
            return await self._asend(parts[0][0], jobs)
        ids: list[str] = [""] * len(jobs)
        for q, idx in parts:
            for i, job_id in zip(idx, await self._asend(q, [jobs[i] for i in idx])):
                ids[i] = job_id
        return ids

    async def _afresh_partitions(self, name: str) -> None:
        """The queue's partition count read off the event loop when due (its first use, then
        every ``REFRESH_MS``), so routing a job on the loop sends nothing itself."""
        parts = self._partitions.get(name)
        if parts is None or parts.due():
            await asyncio.to_thread(lambda: self.partitions_of(name).refresh())

    async def _asend(self, q: Queue, specs: list[JobSpec]) -> list[str]:
        ids, calls = q.enqueue_calls(specs)
        stored = q.stored_ids(ids, await aio.send(self.aredis, calls))
        if self.hooks.on_enqueue:
            for spec, job_id in zip(specs, stored):
                await self.hooks.aemit(self.hooks.on_enqueue,
                                       self._enqueued_event(q, spec, job_id))
        return stored

    async def aresult(self, idempotency_key: str, timeout: float | None = None) -> ResultStatus:
        """``result`` from a coroutine, off the event loop (it reads SQL and Redis). With
        ``timeout`` (seconds): ``result(key).wait(timeout)`` without holding a thread while it
        waits (its blocking pop on ``redis.asyncio``, a client per event loop): the final
        status, or the status at the timeout with ``timed_out`` True; ``ResultUnavailable``
        if Redis stayed unreachable."""
        if timeout is None:
            return self.waiter.bind(await asyncio.to_thread(self.finder.result, idempotency_key))
        return await self.waiter.await_result(idempotency_key, timeout)

    def outbox_add(self, session: Any, q: Queue, spec: JobSpec) -> str:
        if self.outbox is None:
            raise InvalidJob("enqueue(session=...) needs a database: set ANTRE_DATABASE_URL")
        spec.job_id = q.partition_id(spec.job_id or new_job_id())  # q: the spec's partition
        q.build(spec, self.clock())  # validate now, in the caller's transaction
        self.outbox.add(session, q.name, spec.job_id, dataclasses.asdict(spec))
        return spec.job_id

    # -- the producer's view --------------------------------------------------------------------
    @property
    def finder(self) -> Finder:
        """Find jobs by id, idempotency key or payload field; read their timelines."""
        return Finder(self.redis, self.clock, self.idempotency)

    def job(self, job_id: str) -> JobStatus:
        """The job's state (ready, scheduled, inflight, done, dead; 'unknown' once it is gone),
        attempts and, when done, its result."""
        return self.finder.job_status(job_id)

    def result(self, idempotency_key: str) -> ResultStatus:
        """``status`` 'completed' with the stored ``result``, 'pending', 'failed' (with
        ``error``), 'cancelled', 'abandoned' or 'unknown' for the operation named by
        ``idempotency_key``, with the handler's last ``progress``. ``.wait(timeout)`` on it
        waits for the job's end (woken by it, not by polling)."""
        return self.waiter.bind(self.finder.result(idempotency_key))

    @property
    def waiter(self) -> ResultWaiter:
        """Waits for keys' results (``result(key).wait``, ``aresult(key, timeout=)``)."""
        if self._waiter is None:
            self._waiter = ResultWaiter(lambda: self.finder, self.queue, PerLoop(
                lambda: _async_from_url(self.redis_url, decode_responses=True,
                                        socket_timeout=10, socket_connect_timeout=5)))
        return self._waiter

    @contextlib.contextmanager
    def lock(self, key: str, ttl_ms: int = 30_000, owner: str = "") -> Iterator[Lock]:
        """Hold the business lock ``key`` (renewed while the block runs); raises ``LockBusy``."""
        yield from held_lock(self.locks, key, ttl_ms, owner)
