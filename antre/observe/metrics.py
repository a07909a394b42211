"""Prometheus metrics, read from Redis at scrape time.

Why derived from Redis and not counted in process memory: jobs are run by many worker
processes on many hosts, restarted at will; in-process counters would be per process, lost on
every restart, and need ``prometheus_client``'s multiprocess mode (a shared directory, one host
only). The queue's own state already is the truth and already counts: the Lua transitions bump
the per-queue ``stats`` hash (acked, retried, buried, expired, deduplicated, lock_busy,
latency_ms_total, ...), depths are LLEN/ZCARD, worker restarts are in the worker registry and
breakers in their hashes. So ``AntreCollector`` reads those at scrape time (a few pipelined,
indexed reads per queue; no keyspace scans), and any web process on any host serves the same
figures. Duration histograms are the one thing the scripts do not count: the executor adds
them with ``record_duration`` (HINCRBY of per-queue bucket counters), which keeps them
cluster-wide too.

Every metric is prefixed ``antre_``; see ``METRIC_NAMES``. Counters end in ``_total``.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from redis.client import Pipeline
from redis.cluster import ClusterPipeline

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.limits.admission import Limits
from antre.groups.read import Groups
from antre.observe.readmodels import ReadModels
from antre.observe.registry import WorkerRegistry

log = logging.getLogger("antre.observe.metrics")

# bucket upper bounds in ms (seconds in the exposition); the last bucket is +Inf
BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000,
              120_000, 300_000, 600_000, 1_800_000, 3_600_000)
KINDS = {"processing": "antre_processing_duration_seconds",
         "latency": "antre_job_latency_seconds"}
KIND_HELP = {"processing": "Handler run time per job type (recorded by the executor)",
             "latency": "Enqueue to finish per job type (recorded by the executor)"}
NOT_EVENTS = ("latency_ms_total",)

METRIC_NAMES = (
    "antre_redis_up", "antre_queue_depth", "antre_in_flight_jobs", "antre_oldest_ready_age_seconds",
    "antre_dlq_count", "antre_dlq_by_type", "antre_jobs_total", "antre_retry_count_total",
    "antre_lease_expirations_total", "antre_idempotency_hit_count_total",
    "antre_lock_conflict_count_total", "antre_lock_conflicts_last_hour",
    "antre_ack_latency_seconds", "antre_job_latency_seconds",
    "antre_processing_duration_seconds", "antre_workers_live", "antre_worker_restarts_total",
    "antre_worker_restarts_by_cause_total",
    "antre_circuit_breaker_state", "antre_circuit_breaker_opens_total",
    "antre_semaphore_in_use", "antre_semaphore_limit", "antre_rate_limiter_tokens",
    "antre_paused", "antre_paused_seconds", "antre_parked_jobs",
    "antre_fence_refusals_total", "antre_lost_locks_total", "antre_outbox_oldest_age_seconds",
    "antre_enqueue_deduplicated_total", "antre_dlq_dropped_total",
    "antre_worker_loop_lag_seconds",
    # each worker process's completed-key cache: hit rate = hits / (hits + misses)
    "antre_completed_cache_hits_total", "antre_completed_cache_misses_total",
    # per-key turns and fair-share groups: bounded (top TOP_GROUPS groups)
    "antre_waiting_jobs", "antre_lock_keys_held", "antre_groups_waiting", "antre_groups_paused",
    "antre_group_waiting_jobs",
)
TOP_GROUPS = 10  # the groups with most waiting jobs get a series of their own


_BUCKET_TEXT = tuple(str(b) for b in BUCKETS_MS) + ("inf",)


def bucket_of(ms: int) -> str:
    """The histogram bucket holding ``ms``: its upper bound, or 'inf' past the last."""
    return _BUCKET_TEXT[bisect.bisect_left(BUCKETS_MS, ms)]


def record_duration(client: Any, queue: str, job_type: str, kind: str, ms: int) -> None:
    """Count one duration into the histogram ``kind`` (``processing``: handler start to end;
    ``latency``: enqueue (``created_at``) to finish) of ``job_type`` in ``queue``.

    ``client`` may be a pipeline (then nothing is sent until the caller executes it)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, not {kind!r}")
    ms = max(0, int(ms))
    key = keys.QueueKeys(queue).durations
    own = not isinstance(client, (Pipeline, ClusterPipeline))
    pipe = client.pipeline(transaction=False) if own else client
    prefix = f"{kind}|{job_type}|"
    pipe.hincrby(key, prefix + bucket_of(ms), 1)
    pipe.hincrby(key, prefix + "sum", ms)
    pipe.hincrby(key, prefix + "count", 1)
    if own:
        pipe.execute()


class DurationBuffer:
    """Durations counted in memory and written in one pipeline per ``flush`` (a worker flushes
    on its heartbeat), instead of a round trip per job. ``count`` adds other counters (the
    performance slots of ``antre.observe.perf``) to the same flush, with their key's expiry."""

    def __init__(self, also: Callable[[str, str, str, int], None] | None = None) -> None:
        self.also = also  # each duration also goes there (the worker's OpenTelemetry histograms)
        self._counts: dict[tuple[str, str], int] = {}  # (key, field) -> by
        self._ttls: dict[str, int] = {}  # key -> its expiry (ms from the count's clock)
        self._lock = threading.Lock()
        # (queue, kind, job_type, bucket) -> its three (key, field) pairs, built once (a
        # worker adds two durations per job)
        self._fields: dict[tuple[str, str, str, str], tuple[tuple[str, str], ...]] = {}
        # other tallies kept in memory by their owners (perf.record_run), each drained into
        # the flush: ``drain()`` -> ([((key, field), by)], {key: ttl ms},
        # [((zset key, member), by)])
        self.sources: dict[str, Any] = {}
        self._ranks: dict[tuple[str, str], int] = {}  # (ZSET key, member) -> by (ZINCRBY)

    def add(self, queue: str, job_type: str, kind: str, ms: int) -> None:
        ms = max(0, int(ms))
        if self.also is not None:
            self.also(queue, job_type, kind, ms)
        bucket = bucket_of(ms)
        fields = self._fields.get((queue, kind, job_type, bucket))
        if fields is None:
            if kind not in KINDS:
                raise ValueError(f"kind must be one of {sorted(KINDS)}, not {kind!r}")
            prefix, key = f"{kind}|{job_type}|", keys.QueueKeys(queue).durations
            fields = self._fields[(queue, kind, job_type, bucket)] = (
                (key, prefix + bucket), (key, prefix + "sum"), (key, prefix + "count"))
            if len(self._fields) > 10_000:  # many job types: start over rather than grow
                self._fields = {}
        in_bucket, total, count = fields
        with self._lock:
            counts = self._counts  # (flush swaps it under the lock)
            counts[in_bucket] = counts.get(in_bucket, 0) + 1
            counts[total] = counts.get(total, 0) + ms
            counts[count] = counts.get(count, 0) + 1

    def count(self, incs: list[tuple[tuple[str, str], int]], ttls: dict[str, int]) -> None:
        """Add each ((key, field), by) of ``incs`` to its HASH; the flush gives each key of
        ``ttls`` that many ms to live (the newest count's)."""
        with self._lock:
            counts = self._counts
            for pair, by in incs:
                counts[pair] = counts.get(pair, 0) + by
            self._ttls.update(ttls)

    def flush(self, client: Any) -> int:
        """Write what was counted; on a Redis error the counts are kept for the next flush."""
        with self._lock:
            counts, self._counts = self._counts, {}
            ttls, self._ttls = self._ttls, {}
            ranks, self._ranks = self._ranks, {}
        for source in list(self.sources.values()):
            incs, more, ranked = source.drain()
            for pair, by in incs:
                counts[pair] = counts.get(pair, 0) + by
            for pair, by in ranked:
                ranks[pair] = ranks.get(pair, 0) + by
            ttls.update(more)
        if not counts and not ranks:
            return 0
        try:
            pipe = client.pipeline(transaction=False)
            for (key, name), by in counts.items():
                pipe.hincrby(key, name, by)
            for (key, member), by in ranks.items():
                pipe.zincrby(key, by, member)
            for key, ttl in ttls.items():
                pipe.pexpire(key, ttl)
            pipe.execute()
        except Exception:
            with self._lock:
                for k, by in counts.items():
                    self._counts[k] = self._counts.get(k, 0) + by
                for k, by in ranks.items():
                    self._ranks[k] = self._ranks.get(k, 0) + by
                for key, ttl in ttls.items():
                    self._ttls.setdefault(key, ttl)
            raise
        return len(counts)


def _histograms(queue: str, raw: dict[str, str]) -> dict[tuple[str, str], dict[str, int]]:
    """{(kind, job_type): {bucket|'sum'|'count': n}} from the durations hash."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for name, value in raw.items():
        kind, _, rest = name.partition("|")
        job_type, _, slot = rest.rpartition("|")
        if kind in KINDS and job_type:
            out.setdefault((kind, job_type), {})[slot] = int(value or 0)
    return out


def _buckets(counts: dict[str, int]) -> list[tuple[str, float]]:
    running, out = 0, []
    for bound in BUCKETS_MS:
        running += counts.get(str(bound), 0)
        out.append((repr(bound / 1000), float(running)))
    running += counts.get("inf", 0)
    out.append(("+Inf", float(running)))
    return out


class AntreCollector:
    """A ``prometheus_client`` collector that reads every figure from Redis per scrape."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis = client
        self.clock = clock

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: families depend on what is in Redis

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("antre_redis_up", "1 when Redis answered this scrape, else 0")
        try:
            families = list(self._collect())
        except redis.RedisError as exc:
            log.warning("metrics: Redis unavailable: %s", exc, extra={"event": "metrics_down"})
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _collect(self) -> Iterator[Metric]:
        yield from self._queues()
        yield from self._pauses()
        yield from self._turns()
        yield from self._workers()
        yield from self._flow()

    def _queues(self) -> Iterator[Metric]:
        reads = ReadModels(self.redis, self.clock)
        q, qt = ["queue"], ["queue", "job_type"]
        depth = GaugeMetricFamily("antre_queue_depth", "Jobs waiting, by state (ready: can be "
                                  "reserved now; scheduled: delayed or backing off; held: "
                                  "a flow's, until its parents completed)",
                                  labels=["queue", "state"])
        inflight = GaugeMetricFamily("antre_in_flight_jobs", "Jobs under a lease now", labels=q)
        oldest = GaugeMetricFamily("antre_oldest_ready_age_seconds",
                                   "Age of the oldest ready job (0 when none)", labels=q)
        dlq = GaugeMetricFamily("antre_dlq_count", "Jobs in the dead-letter queue", labels=q)
        dlq_t = GaugeMetricFamily("antre_dlq_by_type", "Dead-letter jobs per job type", labels=qt)
        events = CounterMetricFamily("antre_jobs", "Job transitions counted by the Lua scripts "
                                     "(enqueued, reserved, acked, retried, buried, ...)",
                                     labels=["queue", "event"])
        singles = {
            "retried": CounterMetricFamily("antre_retry_count", "Retries (attempt spent)",
                                           labels=q),
            "expired": CounterMetricFamily("antre_lease_expirations",
                                           "Leases that expired (worker died or hung)", labels=q),
            "deduplicated": CounterMetricFamily("antre_idempotency_hit_count", "Deliveries "
                                                "answered from the idempotency store", labels=q),
            "lock_busy": CounterMetricFamily("antre_lock_conflict_count", "Jobs snoozed because "
                                             "their business lock was held", labels=q),
            "fence_rejected": CounterMetricFamily("antre_fence_refusals", "Runs refused by the "
                                                  "SQL fence (a newer lock holder committed)",
                                                  labels=q),
            "lock_lost": CounterMetricFamily("antre_lost_locks", "Business locks lost while "
                                             "their job ran (not committed, snoozed)", labels=q),
            "enqueue_deduplicated": CounterMetricFamily(
                "antre_enqueue_deduplicated", "Unique enqueues answered with the pending job "
                "holding the same idempotency key (no second job added)", labels=q),
            "version_conflict": CounterMetricFamily(
                "antre_version_conflicts", "Jobs re-queued behind their key because a versioned "
                "row moved on (VersionConflict; no attempt spent)", labels=q),
            "limit_held": CounterMetricFamily(
                "antre_limit_held", "Jobs a type's or downstream's limit held at reserve (its "
                "line, or scheduled for its rate's start; never delivered)", labels=q),
            "dead_dropped": CounterMetricFamily(
                "antre_dlq_dropped", "Dead jobs dropped by retention (over the queue's "
                "maximum count or age), oldest first", labels=q),
        }
        ack_latency = SummaryMetricFamily("antre_ack_latency_seconds", "Enqueue to ack, all job "
                                          "types (from the ack script's counters)", labels=q)
        hists = {kind: HistogramMetricFamily(name, KIND_HELP[kind], labels=qt)
                 for kind, name in KINDS.items()}
        for name in reads.queue_names():
            info = reads.queue_info(name)
            k = keys.QueueKeys(name)
            depth.add_metric([name, "ready"], info.ready)
            depth.add_metric([name, "scheduled"], info.scheduled)
            depth.add_metric([name, "held"], info.held)  # a flow's, for its parents
            inflight.add_metric([name], info.inflight)
            oldest.add_metric([name], info.oldest_ready_age_ms / 1000)
            dlq.add_metric([name], info.dead)
            for event, value in sorted(info.stats.items()):
                if event not in NOT_EVENTS:
                    events.add_metric([name, event], value)
            for stat, fam in singles.items():
                fam.add_metric([name], info.stats.get(stat, 0))
            ack_latency.add_metric([name], count_value=info.stats.get("acked", 0),
                                   sum_value=info.stats.get("latency_ms_total", 0) / 1000)
            types = reads.dead_types(name)  # every partition's
            every = partitions.all_keys(self.redis, name)
            pipe = self.redis.pipeline(transaction=False)
            for t in types:
                for pk in every:
                    pipe.zcard(pk.dead_by_type(t))
            pipe.hgetall(k.durations)  # written by the workers, in partition 0
            *per_partition, durations = pipe.execute()
            n = len(every)
            dead_counts = [sum(per_partition[i * n:(i + 1) * n]) for i in range(len(types))]
            for t, n in zip(types, dead_counts):
                dlq_t.add_metric([name, t], n)
            for (kind, job_type), counts in sorted(_histograms(name, durations).items()):
                hists[kind].add_metric([name, job_type], _buckets(counts),
                                       counts.get("sum", 0) / 1000)
        conflicts = GaugeMetricFamily("antre_lock_conflicts_last_hour",
                                      "Lock conflicts in the last hour, all keys")
        conflicts.add_metric([], int(self.redis.zcard(keys.lock_conflict_times())))
        yield from (depth, inflight, oldest, dlq, dlq_t, events, *singles.values(), ack_latency,
                    *hists.values(), conflicts)

    def _pauses(self) -> Iterator[Metric]:
        """Incident controls: 1 per paused queue (job_type '*') or job type, for how long, and
        the jobs parked because their type is paused."""
        reads = ReadModels(self.redis, self.clock)
        now = self.clock()
        labels = ["queue", "job_type"]
        paused = GaugeMetricFamily("antre_paused", "1 while a queue (job_type '*') or a job type "
                                   "is paused by an operator", labels=labels)
        since = GaugeMetricFamily("antre_paused_seconds", "How long it has been paused",
                                  labels=labels)
        parked = GaugeMetricFamily("antre_parked_jobs", "Ready jobs held back because their "
                                   "job type is paused", labels=["queue"])
        for name in reads.queue_names():
            info = reads.queue_info(name)
            for p in info.paused:
                paused.add_metric([name, p.job_type or "*"], 1)
                since.add_metric([name, p.job_type or "*"], max(0, now - p.at_ms) / 1000)
            parked.add_metric([name], info.parked)
        outbox = GaugeMetricFamily("antre_outbox_oldest_age_seconds", "Age of the oldest "
                                   "outbox row not relayed yet (measured by the alert check; "
                                   "0 when none)")
        raw = self.redis.hget(keys.alert_signals(), "outbox_oldest_age_s")
        outbox.add_metric([], float(raw) if raw else 0.0)
        yield from (paused, since, parked, outbox)

    def _turns(self) -> Iterator[Metric]:
        """Jobs waiting behind a lock_key's head or for a group's slot, the keys with a head,
        the groups with waiting jobs and the paused ones per queue; the waiting jobs of the
        ``TOP_GROUPS`` busiest groups (bounded cardinality, whatever the number of groups)."""
        q = ["queue"]
        waiting = GaugeMetricFamily("antre_waiting_jobs", "Jobs waiting their turn (behind "
                                    "their lock_key's head or for their group's slot)", labels=q)
        held = GaugeMetricFamily("antre_lock_keys_held", "lock_keys with a head (a job whose "
                                 "turn it is)", labels=q)
        n_wait = GaugeMetricFamily("antre_groups_waiting", "Groups with jobs waiting for a "
                                   "slot", labels=q)
        n_paused = GaugeMetricFamily("antre_groups_paused", "Groups paused by an operator",
                                     labels=q)
        top = GaugeMetricFamily("antre_group_waiting_jobs", f"Waiting jobs of the {TOP_GROUPS} "
                                "groups with the most", labels=["queue", "group"])
        groups = Groups(self.redis, self.clock)
        for name in ReadModels(self.redis, self.clock).queue_names():
            view = groups.view(name, TOP_GROUPS)
            waiting.add_metric([name], view.jobs_waiting)
            held.add_metric([name], view.keys_held)
            n_wait.add_metric([name], view.groups_waiting)
            n_paused.add_metric([name], len(view.paused))
            for row in view.by_waiting:
                top.add_metric([name, row.name], row.waiting)
        yield from (waiting, held, n_wait, n_paused, top)

    def _workers(self) -> Iterator[Metric]:
        registry = WorkerRegistry(self.redis, self.clock)
        live = GaugeMetricFamily("antre_workers_live", "Worker processes with a recent heartbeat")
        live.add_metric([], registry.live_count())
        restarts = CounterMetricFamily("antre_worker_restarts", "Worker processes restarted by "
                                       "their supervisor", labels=["supervisor", "host"])
        lag = GaugeMetricFamily("antre_worker_loop_lag_seconds", "Worst lag of a worker "
                                "process's event loop (async handlers) over its last heartbeat; "
                                "high when a handler blocks the loop", labels=["worker", "host"])
        hits = CounterMetricFamily("antre_completed_cache_hits", "Duplicate deliveries a live "
                                   "worker process answered from its completed-key cache",
                                   labels=["worker", "host"])
        misses = CounterMetricFamily("antre_completed_cache_misses", "Lookups of a live worker "
                                     "process's completed-key cache that found nothing fresh",
                                     labels=["worker", "host"])
        causes = CounterMetricFamily("antre_worker_restarts_by_cause", "Worker processes "
                                     "restarted, by cause (hard_timeout, cancel_ignored: a "
                                     "handler it could not stop, of job type; killed, "
                                     "redis_unreachable, crashed)", labels=["cause", "type"])
        for (cause, job_type), n in sorted(registry.restart_counts().items()):
            causes.add_metric([cause, job_type], n)
        for info in registry.list():
            if info.kind == "supervisor":
                restarts.add_metric([info.id, info.host], info.restarts)
                continue
            alive = info.alive(self.clock())
            if info.concurrency and alive:
                lag.add_metric([info.id, info.host], info.loop_lag_ms / 1000)
            if alive and info.cache_hits + info.cache_misses:
                hits.add_metric([info.id, info.host], info.cache_hits)
                misses.add_metric([info.id, info.host], info.cache_misses)
        yield from (live, restarts, causes, lag, hits, misses)

    def _flow(self) -> Iterator[Metric]:
        flow = Limits(self.redis, self.clock)
        state = GaugeMetricFamily("antre_circuit_breaker_state", "0 closed, 1 half_open, 2 open",
                                  labels=["name"])
        opens = CounterMetricFamily("antre_circuit_breaker_opens", "Times the breaker opened",
                                    labels=["name"])
        for b in flow.breakers():
            state.add_metric([b.name], b.code)
            opens.add_metric([b.name], b.opens)
        in_use = GaugeMetricFamily("antre_semaphore_in_use", "Concurrency slots held",
                                   labels=["name"])
        limit = GaugeMetricFamily("antre_semaphore_limit", "Concurrency limit", labels=["name"])
        for s in flow.semaphores():
            in_use.add_metric([s.name], s.in_use)
            limit.add_metric([s.name], s.limit)
        tokens = GaugeMetricFamily("antre_rate_limiter_tokens", "Tokens in the bucket now",
                                   labels=["name"])
        for rl in flow.rate_limiters():
            tokens.add_metric([rl.name], rl.tokens)
        yield from (state, opens, in_use, limit, tokens)


def registry(client: "redis.Redis", clock: Clock = system_ms) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AntreCollector(client, clock))
    return reg


def render(client: "redis.Redis", clock: Clock = system_ms) -> tuple[bytes, str]:
    """The body and content type of ``GET /metrics``."""
    return generate_latest(registry(client, clock)), CONTENT_TYPE_LATEST
