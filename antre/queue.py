"""Queue operations: each state change of a job is one Lua script (see ``antre/lua``).

A ``Queue`` is cheap; it holds a Redis client, the queue's keys and the clock. Every method that
depends on time reads ``clock()``; tests pass a ``ManualClock`` instead of sleeping.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence, cast

import redis
from redis.cluster import RedisCluster

from . import keys
from .clock import Clock, system_ms
from .envelope import (DEFAULT_MAX_PAYLOAD_BYTES, Job, check_headers, check_names,
                       encode_payload, from_fields, new_job_id, new_traceparent)
from .errors import InvalidJob, LeaseLost
from .retry import error_signature
from .scripts import Batch, Scripts

# what a worker needs of a job it reserves (errors, traceback and result stay in Redis)
RESERVE_FIELDS = ("id", "type", "queue", "idem_key", "payload", "attempt", "max_attempts",
                  "visible_at", "created_at", "trace_id", "lock_key", "headers", "timeout_s",
                  "vt_ms", "epoch", "deliveries", "max_deliveries", "state", "deadline",
                  "reserved_at", "worker_id", "checkpoint", "first_failed_at", "replayed_at")
DONE_RETENTION_MS = 3_600_000
MAX_SECONDS = 366 * 86_400  # the longest delay or timeout a job may carry
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
DONE_MAX = 10_000


@dataclass
class JobSpec:
    """One job to enqueue (see ``Queue.enqueue`` for the meaning of each field)."""

    job_type: str
    payload: Any
    idempotency_key: str
    lock_key: str | None = None
    delay_s: float = 0.0
    max_attempts: int = 5
    timeout_s: float = 30.0
    visibility_timeout_s: float = 30.0
    max_deliveries: int = 10
    headers: dict[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    job_id: str | None = None
    unique: bool = False  # while a job holds this idempotency key, enqueue returns its id
    unique_for_s: float = 0.0  # unique: after it completes, refuse the key this long


@dataclass(frozen=True)
class SweepResult:
    requeued: int
    buried: int
    outcomes: dict[str, str]


def _runs(built: list[dict[str, str]], chunk: int) -> Iterator[list[dict[str, str]]]:
    """Consecutive jobs with the same field names, at most ``chunk`` per run (one script call
    each: unique jobs and periodic ticks carry extra fields)."""
    run: list[dict[str, str]] = []
    for fields in built:
        if run and (len(run) >= chunk or fields.keys() != run[0].keys()):
            yield run
            run = []
        run.append(fields)
    if run:
        yield run


def _stored(job_id: str, reply: Any) -> tuple[str, str]:
    if reply == 1:
        return job_id, "stored"
    if reply == 0:
        return job_id, "exists"
    outcome, _, holder = str(reply).partition(":")
    return holder, outcome


def _lease_result(reply: str, job_id: str) -> str:
    if reply.startswith("LOST:"):
        raise LeaseLost(f"job {job_id}: {reply[5:]}; nothing was changed")
    return reply


class Queue:
    def __init__(self, client: "redis.Redis", name: str = "default", *, clock: Clock = system_ms,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 done_retention_ms: int = DONE_RETENTION_MS, done_max: int = DONE_MAX,
                 scripts: Scripts | None = None) -> None:
        if not keys.valid_name(name):
            raise InvalidJob(f"bad queue name {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        self.redis = client
        self.name = name
        self.keys = keys.QueueKeys(name)
        self.clock = clock
        self.max_payload_bytes = max_payload_bytes
        self.done_retention_ms = done_retention_ms
        self.done_max = done_max
        self.scripts = scripts or Scripts(client)
        # on a cluster each queue's wake list is in its own slot: one BLPOP cannot watch several
        self.cluster = isinstance(client, RedisCluster)

    # -- producing -------------------------------------------------------------------------
    def build(self, spec: JobSpec, now: int) -> dict[str, str]:
        """Validate ``spec`` and return the hash fields of the new job (raises ``InvalidJob``)."""
        check_names(self.name, spec.job_type, spec.idempotency_key, spec.lock_key)
        check_headers(spec.headers)
        if spec.trace_id is not None and not TRACEPARENT.match(str(spec.trace_id)):
            raise InvalidJob(f"trace_id {spec.trace_id!r} is not a W3C traceparent "
                             "(00-<32 hex>-<16 hex>-<2 hex>)")
        for name in ("max_attempts", "max_deliveries"):
            value = getattr(spec, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise InvalidJob(f"{name} must be a whole number from 1 to 10000, not {value!r}")
        for name, low in (("timeout_s", 0.001), ("visibility_timeout_s", 0.001), ("delay_s", 0)):
            value = getattr(spec, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or not low <= value <= MAX_SECONDS):
                raise InvalidJob(f"{name} must be a finite number of seconds from {low} to "
                                 f"{MAX_SECONDS}, not {value!r}")
        job_id = spec.job_id or new_job_id()
        if spec.job_id is not None and not keys.valid_name(job_id):
            raise InvalidJob(f"bad job id {job_id!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        return {**self._base_fields(spec, job_id, now), **self._unique_fields(spec)}

    def _unique_fields(self, spec: JobSpec) -> dict[str, str]:
        """The optional fields enqueue.lua reads to deduplicate a unique job (issue 13)."""
        window = spec.unique_for_s
        if (isinstance(window, bool) or not isinstance(window, (int, float))
                or not math.isfinite(window) or not 0 <= window <= MAX_SECONDS):
            raise InvalidJob(f"unique_for_s must be a finite number of seconds from 0 to "
                             f"{MAX_SECONDS}, not {window!r}")
        if not isinstance(spec.unique, bool):
            raise InvalidJob(f"unique must be True or False, not {spec.unique!r}")
        if not spec.unique:
            return {}
        return {"ukey": self.keys.unique(spec.idempotency_key),
                "unique_ms": str(int(window * 1000))}

    def _base_fields(self, spec: JobSpec, job_id: str, now: int) -> dict[str, str]:
        return {
            "id": job_id,
            "type": spec.job_type,
            "visible_at": str(now + int(spec.delay_s * 1000)),
            "queue": self.name,
            "idem_key": spec.idempotency_key,
            "payload": encode_payload(spec.payload, self.max_payload_bytes),
            "attempt": "0",
            "max_attempts": str(spec.max_attempts),
            "created_at": str(now),
            "trace_id": spec.trace_id or new_traceparent(),
            "lock_key": spec.lock_key or "",
            "headers": json.dumps(spec.headers, separators=(",", ":")) if spec.headers else "{}",
            "timeout_s": repr(float(spec.timeout_s)),
            "vt_ms": str(int(spec.visibility_timeout_s * 1000)),
            "epoch": "0",
            "deliveries": "0",
            "max_deliveries": str(spec.max_deliveries),
        }

    def enqueue(self, job_type: str, payload: Any, *, idempotency_key: str,
                lock_key: str | None = None, delay_s: float = 0.0, **options: Any) -> str:
        """Store a job; returns its id. A job id that already exists is left as it is."""
        spec = JobSpec(job_type, payload, idempotency_key, lock_key, delay_s, **options)
        return self.enqueue_many([spec])[0]

    def enqueue_many(self, specs: Iterable[JobSpec], chunk: int = 500) -> list[str]:
        """Store many jobs in few round trips (one script call per ``chunk`` jobs). Returns
        each job's id; for a unique job whose key is held, the id of the job holding it."""
        now = self.clock()
        return [ids for ids, _ in self.store([self.build(s, now) for s in specs], now, chunk)]

    def store(self, built: list[dict[str, str]], now: int,
              chunk: int = 500) -> list[tuple[str, str]]:
        """Send built jobs to enqueue.lua; returns (id, outcome) per job, outcome being
        'stored', 'exists' or a guard's refusal ('dup', 'recent', 'tick', 'paused'), with id
        then the job that holds the key or the tick (may be '')."""
        if not built:
            return []
        k = self.keys
        batch = Batch(self.redis)
        for part in _runs(built, chunk):
            names = list(part[0])  # enqueue.lua reads id, type, visible_at by position: first
            args: list[Any] = [k.job_prefix, now, json.dumps(names)]
            args.extend(json.dumps(list(fields.values()), separators=(",", ":"))
                        for fields in part)
            batch.script(self.scripts.enqueue, [k.ready, k.scheduled, k.stats, k.types, k.wake],
                         args)
        batch.command("sadd", keys.queues_index(), self.name)
        replies = [r for reply in batch.execute()[:-1] for r in reply]
        return [_stored(fields["id"], reply) for fields, reply in zip(built, replies)]

    # -- consuming -------------------------------------------------------------------------
    def reserve(self, worker_id: str, count: int = 1) -> list[Job]:
        k = self.keys
        rows = self.scripts.reserve(keys=[k.ready, k.inflight, k.stats],
                                    args=[k.job_prefix, self.clock(), count, worker_id,
                                          *RESERVE_FIELDS])
        return [from_fields({n: v for n, v in zip(RESERVE_FIELDS, row) if v is not None})
                for row in rows]

    def ack(self, job: Job, result: Any = None, *, counter: str = "acked") -> None:
        """in-flight → done. Raises ``LeaseLost`` if ``job.epoch`` is no longer the lease."""
        _lease_result(self._ack(job, result, counter, self.scripts.ack), job.id)

    def ack_many(self, done: Sequence[tuple[Job, Any]]) -> list[Job]:
        """Ack several jobs in one round trip; returns the jobs whose lease was lost."""
        batch = Batch(self.redis)
        for job, result in done:
            batch.script(self.scripts.ack, *self._ack_call(job, result, "acked"))
        replies = batch.execute()
        return [job for (job, _), reply in zip(done, replies) if str(reply).startswith("LOST:")]

    def _ack(self, job: Job, result: Any, counter: str, script: Any) -> Any:
        return script(*self._ack_call(job, result, counter))

    def _ack_call(self, job: Job, result: Any, counter: str) -> tuple[list[str], list[Any]]:
        k = self.keys
        text = "" if result is None else json.dumps(result, default=str, separators=(",", ":"))
        return ([k.job(job.id), k.inflight, k.done, k.stats],
                [job.id, job.epoch, self.clock(), text, self.done_retention_ms,
                 self.done_max, k.job_prefix, counter])

    def retry(self, job: Job, *, delay_ms: int, error: str = "", kind: str = "error",
              traceback: str = "", spend_attempt: bool = True, undeliver: bool = False,
              counter: str = "retried") -> None:
        """in-flight → scheduled (or ready when ``delay_ms`` <= 0)."""
        k = self.keys
        now = self.clock()
        reply = self.scripts.retry(
            keys=[k.job(job.id), k.inflight, k.scheduled, k.ready, k.stats],
            args=[job.id, job.epoch, now, now + max(0, int(delay_ms)), int(spend_attempt),
                  int(undeliver), error, kind, traceback, counter])
        _lease_result(reply, job.id)

    def hand_back(self, job: Job) -> None:
        """Graceful shutdown: back to ready, no attempt spent, the delivery not counted."""
        self.retry(job, delay_ms=0, spend_attempt=False, undeliver=True, counter="handed_back")

    def snooze(self, job: Job, delay_ms: int, why: str, counter: str = "snoozed") -> None:
        """Rate limited, lock busy, breaker open: later, no attempt spent."""
        self.retry(job, delay_ms=delay_ms, spend_attempt=False, undeliver=True, counter=counter,
                   error="", kind=why)

    def bury(self, job: Job, *, reason: str, error: str = "", kind: str = "permanent",
             traceback: str = "", signature: str | None = None, spend_attempt: bool = True) -> str:
        """in-flight → dead. Returns the error group id."""
        k = self.keys
        sig = signature or f"{kind}: {error_signature(error or reason)}"
        reply = self.scripts.bury(
            keys=[k.job(job.id), k.inflight, k.dead, k.stats, k.error_groups],
            args=[job.id, job.epoch, self.clock(), reason, error or reason, kind, traceback, sig,
                  k.dead_type_prefix, k.dead_group_prefix, int(spend_attempt)])
        return _lease_result(reply, job.id)[3:]

    def extend(self, job_id: str, epoch: int, ms: int, *, mode: str = "from_now",
               cap_ms: int = 0) -> int:
        """Move the lease deadline; returns the new deadline. ``mode='add'`` adds ``ms`` to the
        current deadline (the dashboard's button); ``'from_now'`` sets now + ms (heartbeats)."""
        k = self.keys
        reply = self.scripts.extend_lease(
            keys=[k.job(job_id), k.inflight],
            args=[job_id, epoch, self.clock(), int(ms), mode, int(cap_ms)])
        return int(_lease_result(reply, job_id))

    def checkpoint(self, job: Job, state: Any) -> None:
        """Persist a running job's progress (lease-fenced); a retry starts from it."""
        text = json.dumps(state, default=str, separators=(",", ":"))
        _lease_result(self.scripts.checkpoint(keys=[self.keys.job(job.id)],
                                              args=[job.epoch, text]), job.id)
        job.checkpoint = state

    # -- maintenance -----------------------------------------------------------------------
    def promote(self, limit: int = 1000) -> int:
        k = self.keys
        return int(self.scripts.promote_due(keys=[k.scheduled, k.ready, k.wake],
                                            args=[k.job_prefix, self.clock(), limit]))

    def sweep(self, limit: int = 1000) -> SweepResult:
        k = self.keys
        reply = self.scripts.sweep_expired(
            keys=[k.inflight, k.ready, k.dead, k.stats, k.error_groups],
            args=[k.job_prefix, self.clock(), limit, k.dead_type_prefix, k.dead_group_prefix])
        outcomes = dict(zip(reply[2::2], reply[3::2]))
        return SweepResult(int(reply[0]), int(reply[1]), outcomes)

    def replay(self, job_id: str) -> bool:
        k = self.keys
        return bool(self.scripts.replay(keys=[k.job(job_id), k.dead, k.ready, k.stats],
                                        args=[job_id, self.clock(), k.dead_type_prefix,
                                              k.dead_group_prefix]))

    def discard(self, job_id: str) -> bool:
        k = self.keys
        return bool(self.scripts.discard(keys=[k.job(job_id), k.dead, k.stats],
                                         args=[job_id, k.dead_type_prefix, k.dead_group_prefix]))

    def run_now(self, job_id: str) -> bool:
        k = self.keys
        return bool(self.scripts.run_now(keys=[k.job(job_id), k.scheduled, k.ready],
                                         args=[job_id, self.clock()]))

    def wait_for_work(self, timeout_s: float, others: Sequence["Queue"] = ()) -> bool:
        """Block until a job is enqueued or promoted in this queue (or ``others``, which must
        share a Redis server; not on a cluster) or ``timeout_s`` passes. True when woken."""
        wake_keys = [self.keys.wake] + ([] if self.cluster else [q.keys.wake for q in others])
        return self.redis.blpop(wake_keys, timeout=timeout_s) is not None

    # -- reading ---------------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        fields = cast(dict[str, str], self.redis.hgetall(self.keys.job(job_id)))
        return from_fields(fields) if fields else None

    def where(self, job_id: str) -> list[str]:
        """Every place the job id is indexed (a consistency check for tests: exactly one)."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.lpos(k.ready, job_id)
        pipe.zscore(k.scheduled, job_id)
        pipe.zscore(k.inflight, job_id)
        pipe.zscore(k.done, job_id)
        pipe.zscore(k.dead, job_id)
        found = pipe.execute()
        return [name for name, hit in zip(("ready", "scheduled", "inflight", "done", "dead"), found)
                if hit is not None]

    def stats(self) -> dict[str, int]:
        stats = cast(dict[str, str], self.redis.hgetall(self.keys.stats))
        return {name: int(v) for name, v in stats.items()}

    def incr_stat(self, name: str, by: int = 1) -> None:
        self.redis.hincrby(self.keys.stats, name, by)
