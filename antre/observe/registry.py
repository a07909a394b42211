"""Worker heartbeats in Redis: written by worker processes, read by the dashboard and CLI."""

from __future__ import annotations

import builtins
import json
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import redis
from redis.typing import EncodableT

from antre.engine import keys
from antre.clock import Clock, system_ms

STALE_AFTER_MS = 30_000
STARTS_KEEP_MS = 7 * 86_400_000
STARTS_KEPT = 1000
# why a worker process exits to be restarted: a handler it could not stop past its hard
# timeout, or past an operator's cancel; and what its supervisor alone sees
RESTART_CAUSES = ("hard_timeout", "cancel_ignored", "killed", "redis_unreachable", "crashed")


@dataclass
class WorkerInfo:
    id: str
    host: str = ""
    pid: int = 0
    supervisor: str = ""  # id of the supervisor (pool) the process belongs to
    queues: list[str] = field(default_factory=list)
    threads: int = 1
    started_at: int = 0
    heartbeat_at: int = 0
    current: list[str] = field(default_factory=list)  # job ids running now
    processed: int = 0
    failed: int = 0
    restarts: int = 0  # for a supervisor: children restarted
    kind: str = "process"  # 'process' or 'supervisor'
    state: str = "running"  # running | stopping | stopped
    concurrency: int = 0  # async jobs this process may run at once on its event loop (0: none)
    loop_lag_ms: int = 0  # the event loop's worst lag since the previous heartbeat
    # the process's completed-key cache (``CompletedCache``): lookups answered from it, and not
    cache_hits: int = 0
    cache_misses: int = 0

    @property
    def cache_hit_rate(self) -> float | None:
        """Hits per lookup of the completed-key cache since the process started (None: none)."""
        lookups = self.cache_hits + self.cache_misses
        return self.cache_hits / lookups if lookups else None

    def alive(self, now_ms: int, stale_after_ms: int = STALE_AFTER_MS) -> bool:
        return self.state != "stopped" and now_ms - self.heartbeat_at < stale_after_ms


class WorkerRegistry:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock

    def beat(self, info: WorkerInfo, ttl_s: int = 86_400) -> None:
        info.heartbeat_at = self.clock()
        # Annotated with redis-py's own types: its Mapping parameter is invariant in the key.
        data: dict[EncodableT, EncodableT] = {
            k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in asdict(info).items()
        }
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(keys.worker(info.id), mapping=data)
        pipe.expire(keys.worker(info.id), ttl_s)
        pipe.zadd(keys.workers_index(), {info.id: info.heartbeat_at})
        pipe.execute()

    def list(self, limit: int = 500) -> list[WorkerInfo]:
        ids = cast(list[str], self.redis.zrevrange(keys.workers_index(), 0, limit - 1))
        pipe = self.redis.pipeline(transaction=False)
        for wid in ids:
            pipe.hgetall(keys.worker(wid))
        out, gone = [], []
        for wid, data in zip(ids, pipe.execute()):
            if data:
                out.append(_decode(data))
            else:
                gone.append(wid)
        if gone:
            self.redis.zrem(keys.workers_index(), *gone)
        return out

    def get(self, worker_id: str) -> WorkerInfo | None:
        data = cast(dict[str, str], self.redis.hgetall(keys.worker(worker_id)))
        return _decode(data) if data else None

    def live(self, stale_after_ms: int = STALE_AFTER_MS) -> "builtins.list[WorkerInfo]":
        """The worker processes alive now: a fresh heartbeat and not stopped (a burst worker
        that exited says so in its last beat). Supervisors run no jobs and are not counted.
        The one definition the overview, ``antre status`` (text and JSON), ``/metrics`` and
        the alerts all use."""
        return live_of(self.list(), self.clock(), stale_after_ms)

    def live_count(self, stale_after_ms: int = STALE_AFTER_MS) -> int:
        return len(self.live(stale_after_ms))

    def record_start(self, worker_id: str, host: str, version: str, *, package: str = "",
                     queues: "builtins.list[str] | None" = None) -> None:
        """A worker process started running ``version`` of the code (``ANTRE_CODE_VERSION``
        or its handlers' digest) on ``package`` (Antre's version), serving ``queues`` (the
        performance page's deploy markers, the timeline of change: antre/observe/changes.py):
        kept 7 days, at most ``STARTS_KEPT``, in one pipeline."""
        now = self.clock()
        record: dict[str, Any] = {"id": worker_id, "host": host, "version": version, "t": now}
        if package:
            record["package"] = package
        if queues:
            record["queues"] = list(queues)
        member = json.dumps(record, sort_keys=True)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(keys.worker_starts(), {member: now})
        pipe.zremrangebyscore(keys.worker_starts(), "-inf", now - STARTS_KEEP_MS)
        pipe.zremrangebyrank(keys.worker_starts(), 0, -STARTS_KEPT - 1)
        pipe.execute()

    def starts(self, since_ms: int) -> "builtins.list[dict[str, Any]]":
        """The recorded starts since ``since_ms``, oldest first (each {id, host, version, t},
        and package, queues when the worker said)."""
        return self._since(keys.worker_starts(), since_ms)

    def record_restart(self, worker_id: str, host: str, cause: str, *, job_type: str = "",
                       timeout_s: float = 0.0) -> None:
        """A worker process exits to be restarted, and why (``RESTART_CAUSES``; ``job_type``:
        the handler that caused it): counted for ever by cause and type, and kept 7 days (at
        most ``STARTS_KEPT``) for the incident view, in one pipeline."""
        now = self.clock()
        member = json.dumps({"id": worker_id, "host": host, "cause": cause, "type": job_type,
                             "timeout_s": timeout_s, "t": now}, sort_keys=True)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(keys.worker_restart_counts(), f"{cause}|{job_type}", 1)
        pipe.zadd(keys.worker_restarts(), {member: now})
        pipe.zremrangebyscore(keys.worker_restarts(), "-inf", now - STARTS_KEEP_MS)
        pipe.zremrangebyrank(keys.worker_restarts(), 0, -STARTS_KEPT - 1)
        pipe.execute()

    def restart_counts(self) -> dict[tuple[str, str], int]:
        """(cause, job type) -> worker processes restarted for it (``record_restart``)."""
        raw = cast(dict[str, str], self.redis.hgetall(keys.worker_restart_counts()))
        out: dict[tuple[str, str], int] = {}
        for field_, n in raw.items():
            cause, _, job_type = field_.partition("|")
            try:
                out[(cause, job_type)] = int(n)
            except ValueError:
                continue
        return out

    def restarts(self, since_ms: int) -> "builtins.list[dict[str, Any]]":
        """The recorded restarts since ``since_ms``, oldest first (each {id, host, cause, type,
        timeout_s, t})."""
        return self._since(keys.worker_restarts(), since_ms)

    def _since(self, key: str, since_ms: int) -> "builtins.list[dict[str, Any]]":
        """The JSON objects of the sorted set ``key`` scored from ``since_ms`` on, oldest first
        (a member that is no JSON object is passed over)."""
        out = []
        for raw in cast(list[str], self.redis.zrangebyscore(key, since_ms, "+inf")):
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out

    def forget_older_than(self, ms: int) -> int:
        return int(self.redis.zremrangebyscore(keys.workers_index(), "-inf", self.clock() - ms))


def live_of(workers: list[WorkerInfo], now_ms: int,
            stale_after_ms: int = STALE_AFTER_MS) -> list[WorkerInfo]:
    """The live worker processes among ``workers`` (a ``WorkerRegistry.list()`` read)."""
    return [w for w in workers if w.kind == "process" and w.alive(now_ms, stale_after_ms)]


def _decode(data: dict[str, str]) -> WorkerInfo:
    def num(name: str) -> int:
        try:
            return int(float(data.get(name) or 0))
        except ValueError:
            return 0

    def lst(name: str) -> list[Any]:
        try:
            value = json.loads(data.get(name) or "[]")
        except ValueError:
            return []
        return value if isinstance(value, list) else []

    return WorkerInfo(id=data.get("id", ""), host=data.get("host", ""), pid=num("pid"),
                      supervisor=data.get("supervisor", ""), queues=lst("queues"),
                      threads=num("threads"), started_at=num("started_at"),
                      heartbeat_at=num("heartbeat_at"), current=lst("current"),
                      processed=num("processed"), failed=num("failed"), restarts=num("restarts"),
                      kind=data.get("kind", "process"), state=data.get("state", "running"),
                      concurrency=num("concurrency"), loop_lag_ms=num("loop_lag_ms"),
                      cache_hits=num("cache_hits"), cache_misses=num("cache_misses"))


def cache_totals(workers: "builtins.list[WorkerInfo]") -> tuple[int, int]:
    """(hits, lookups) of the completed-key caches of ``workers``, summed."""
    hits = sum(w.cache_hits for w in workers)
    return hits, hits + sum(w.cache_misses for w in workers)
