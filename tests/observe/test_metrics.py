"""``/metrics`` is read from Redis: it parses, and its figures move with queue operations."""

from __future__ import annotations

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from antre.observe import metrics
from antre.limits.admission import CircuitBreaker, Limits
from antre.engine.queue import Queue
from antre.observe.registry import WorkerInfo, WorkerRegistry


def scrape(r, clock) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, ctype = metrics.render(r, clock)
    assert ctype.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(samples, metric, /, **labels) -> float:
    return samples.get((metric, tuple(sorted(labels.items()))), 0.0)


def test_empty_redis_renders_and_says_up(r, clock):
    s = scrape(r, clock)
    assert val(s, "antre_redis_up") == 1
    assert val(s, "antre_workers_live") == 0


def test_counters_and_gauges_move_after_queue_operations(r, clock):
    q = Queue(r, "mail", clock=clock)
    for i in range(5):
        q.enqueue("send_email", {"n": i}, idempotency_key=f"k{i}")
    q.enqueue("send_email", {"n": 9}, idempotency_key="later", delay_s=60)
    before = scrape(r, clock)
    assert val(before, "antre_queue_depth", queue="mail", state="ready") == 5
    assert val(before, "antre_queue_depth", queue="mail", state="scheduled") == 1
    assert val(before, "antre_jobs_total", queue="mail", event="enqueued") == 6

    clock.advance(2_000)
    a, b, c, _expiring = q.reserve("w1", count=4)
    assert val(scrape(r, clock), "antre_in_flight_jobs", queue="mail") == 4
    q.ack(a, {"ok": True})
    q.retry(b, delay_ms=1000, error="timeout talking to smtp", kind="retryable")
    q.bury(c, reason="bad address", error="bad address")
    clock.advance(60_000)  # d's lease expires
    q.sweep()

    s = scrape(r, clock)
    assert val(s, "antre_in_flight_jobs", queue="mail") == 0
    assert val(s, "antre_retry_count_total", queue="mail") == 1
    assert val(s, "antre_dlq_count", queue="mail") == 1
    assert val(s, "antre_dlq_by_type", queue="mail", job_type="send_email") == 1
    assert val(s, "antre_lease_expirations_total", queue="mail") == 1
    assert val(s, "antre_jobs_total", queue="mail", event="acked") == 1
    assert val(s, "antre_ack_latency_seconds_count", queue="mail") == 1
    assert val(s, "antre_ack_latency_seconds_sum", queue="mail") == pytest.approx(2.0)
    # the oldest ready job was enqueued 62 s ago
    assert val(s, "antre_oldest_ready_age_seconds", queue="mail") == pytest.approx(62.0)


def test_idempotency_hits_and_lock_conflicts_are_counted(r, clock):
    q = Queue(r, "q", clock=clock)
    q.enqueue("t", {}, idempotency_key="a")
    q.enqueue("t", {}, idempotency_key="b")
    first, second = q.reserve("w", count=2)
    q.ack(first, None, counter="deduplicated")
    q.snooze(second, 500, "lock_busy", counter="lock_busy")
    s = scrape(r, clock)
    assert val(s, "antre_idempotency_hit_count_total", queue="q") == 1
    assert val(s, "antre_lock_conflict_count_total", queue="q") == 1


def test_recorded_durations_are_histograms_per_job_type(r, clock):
    Queue(r, "q", clock=clock).enqueue("resize", {}, idempotency_key="x")
    for ms in (3, 40, 40, 700, 9_999_999):
        metrics.record_duration(r, "q", "resize", "processing", ms)
    pipe = r.pipeline(transaction=False)
    metrics.record_duration(pipe, "q", "resize", "latency", 1_500)
    assert not r.exists("antre:{q}:durations") or r.hget("antre:{q}:durations",
                                                          "latency|resize|count") is None
    pipe.execute()
    s = scrape(r, clock)
    name = "antre_processing_duration_seconds"
    assert val(s, f"{name}_bucket", queue="q", job_type="resize", le="0.005") == 1
    assert val(s, f"{name}_bucket", queue="q", job_type="resize", le="0.05") == 3
    assert val(s, f"{name}_bucket", queue="q", job_type="resize", le="1.0") == 4
    assert val(s, f"{name}_bucket", queue="q", job_type="resize", le="+Inf") == 5
    assert val(s, f"{name}_count", queue="q", job_type="resize") == 5
    assert val(s, "antre_job_latency_seconds_sum", queue="q", job_type="resize") == 1.5
    with pytest.raises(ValueError):
        metrics.record_duration(r, "q", "resize", "nope", 1)


def test_workers_breakers_and_limits(r, clock):
    reg = WorkerRegistry(r, clock)
    reg.beat(WorkerInfo(id="sup1", host="h1", kind="supervisor", restarts=3))
    reg.beat(WorkerInfo(id="p1", host="h1"))
    reg.record_restart("p0", "h1", "hard_timeout", job_type="report", timeout_s=90)
    reg.record_restart("p2", "h1", "hard_timeout", job_type="report", timeout_s=90)
    reg.record_restart("sup1/0", "h1", "killed")
    cb = CircuitBreaker(r, "downstream:smtp", 1, 60, 30, clock)
    cb.record_failure()
    flow = Limits(r, clock)
    flow.semaphore("type:send", 2).acquire("j:1", clock() + 1000)
    flow.rate_limiter("downstream:smtp", 5, 5).take()
    s = scrape(r, clock)
    assert val(s, "antre_workers_live") == 1  # worker processes: a supervisor runs no jobs
    assert val(s, "antre_worker_restarts_total", supervisor="sup1", host="h1") == 3
    assert val(s, "antre_worker_restarts_by_cause_total", cause="hard_timeout", type="report") == 2
    assert val(s, "antre_worker_restarts_by_cause_total", cause="killed", type="") == 1
    assert val(s, "antre_circuit_breaker_state", name="downstream:smtp") == 2
    assert val(s, "antre_circuit_breaker_opens_total", name="downstream:smtp") == 1
    assert val(s, "antre_semaphore_in_use", name="type:send") == 1
    assert val(s, "antre_semaphore_limit", name="type:send") == 2
    assert val(s, "antre_rate_limiter_tokens", name="downstream:smtp") == 4


def test_every_documented_name_is_exposed(r, clock):
    q = Queue(r, "q", clock=clock)
    q.enqueue("t", {}, idempotency_key="a")
    metrics.record_duration(r, "q", "t", "processing", 5)
    metrics.record_duration(r, "q", "t", "latency", 5)
    WorkerRegistry(r, clock).beat(WorkerInfo(id="s", kind="supervisor"))
    CircuitBreaker(r, "b", clock=clock).record_failure()
    flow = Limits(r, clock)
    flow.semaphore("s", 1).acquire("h", clock() + 10)
    flow.rate_limiter("r", 1, 1).take()
    body, _ = metrics.render(r, clock)
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    # the parser drops the _total suffix of counters from the family name
    exposed = {n.removesuffix("_total") for n in metrics.METRIC_NAMES}
    assert exposed <= names


def test_redis_down_reports_up_zero_instead_of_failing(clock):
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                       decode_responses=True, retry=Retry(NoBackoff(), 0))
    body, _ = metrics.render(dead, clock)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["antre_redis_up"].samples[0].value == 0
