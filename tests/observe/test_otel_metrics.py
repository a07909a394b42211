"""OpenTelemetry metrics beside the traces (``antre/observe/otel_metrics.py``), read with the
OpenTelemetry SDK's in-memory reader (the real SDK), and the completed-key cache's hit rate
(worker heartbeat -> registry -> ``/metrics``, the OTel bridge, the Workers page, ``antre
status``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import burst

from antre import Antre
from antre.engine.queue import Queue
from antre.observe import metrics, otel_metrics
from antre.observe.metrics import METRIC_NAMES, render
from antre.observe.registry import WorkerInfo, WorkerRegistry

sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def _value(found: dict[str, list[Any]], name: str, **attrs: str) -> float:
    (point,) = [p for p in found[name] if all(p.attributes.get(k) == v for k, v in attrs.items())]
    return float(point.value)


def test_every_prometheus_figure_has_an_otel_instrument_of_the_same_name():
    names = dict(otel_metrics.instrument_names())
    assert names["antre_queue_depth"] == "gauge" and names["antre_jobs"] == "counter"
    assert names["antre_completed_cache_hits"] == "counter"
    assert "antre_ack_latency_seconds_count" in names
    for name in METRIC_NAMES:
        if name not in otel_metrics.BRIDGED_HISTOGRAMS and name not in otel_metrics.SUMMARIES:
            assert name.removesuffix("_total") in names, name


def test_the_bridge_exports_what_metrics_serves_read_from_redis(app, clock):
    @app.handler("ok")
    def ok(ctx: Any, payload: Any) -> Any:
        return payload

    for i in range(3):
        app.enqueue("ok", {"i": i}, idempotency_key=f"ok:{i}")
    app.enqueue("ok", {}, idempotency_key="later", delay_s=60)
    burst(app, clock)
    WorkerRegistry(app.redis, clock).beat(WorkerInfo(id="w-1", host="h", cache_hits=3,
                                                     cache_misses=1))
    reader = InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    try:
        assert otel_metrics.install(app.redis, clock, meter_provider=provider) is not None
        found = points(reader)
    finally:
        provider.shutdown()
    assert _value(found, "antre_redis_up") == 1
    assert _value(found, "antre_jobs", queue="default", event="acked") == 3
    assert _value(found, "antre_queue_depth", queue="default", state="scheduled") == 1
    assert _value(found, "antre_completed_cache_hits", worker="w-1") == 3
    assert _value(found, "antre_completed_cache_misses", worker="w-1") == 1
    assert _value(found, "antre_ack_latency_seconds_count", queue="default") == 3
    exposition = render(app.redis, clock)[0].decode()
    assert 'antre_jobs_total{event="acked",queue="default"} 3.0' in exposition
    assert 'antre_completed_cache_hits_total{host="h",worker="w-1"} 3.0' in exposition


def test_without_an_sdk_meter_provider_nothing_is_installed_or_recorded(app, clock):
    assert otel_metrics.configured() is False  # no test sets the global provider in-process
    assert otel_metrics.install_if_configured(app.redis, clock) is None
    otel_metrics.record_duration("default", "ok", "processing", 5)  # a no-op, no error


def test_the_completed_key_cache_hit_rate_reaches_the_registry_and_status(redis_url,
                                                                          sqlite_url, clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)

    @app.handler("charge")
    def charge(ctx: Any, payload: Any) -> Any:
        return {"charged": True}

    for n in (1, 2, 3):  # the key's first run, then duplicates: the store (cached), the cache
        app.enqueue("charge", {"n": 1}, idempotency_key="charge:1")
        burst(app, clock, worker_id=f"w-cache-{n}")
    info = WorkerRegistry(app.redis, clock).get("w-cache-3")
    assert info is not None and (info.cache_hits, info.cache_misses) == (1, 2)
    assert info.cache_hit_rate == pytest.approx(1 / 3)
    # `antre status` runs on the wall clock: a live worker beats on it too
    WorkerRegistry(app.redis).beat(WorkerInfo(id="w-live", host="h", cache_hits=9,
                                              cache_misses=3))
    out = subprocess.run([sys.executable, "-m", "antre_cli", "status"], cwd=REPO,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ANTRE_REDIS_URL": redis_url})
    assert "completed-key cache: 75% of 12 lookups hit" in out.stdout, out.stderr


def test_the_duration_histograms_reach_otel_with_the_buckets_of_metrics(redis_url):
    reader = InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    recorder = otel_metrics.DurationRecorder(provider)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    Queue(r, "default").enqueue("resize", {}, idempotency_key="x")  # /metrics knows the queue
    durations = (3, 5, 6, 700, 2_500, 45_000, 7_200_000)  # the last past the last bound
    try:
        for ms in durations:
            recorder.record("default", "resize", "processing", ms)
            metrics.record_duration(r, "default", "resize", "processing", ms)
        (point,) = points(reader)["antre_processing_duration_seconds"]
    finally:
        provider.shutdown()
    assert tuple(point.explicit_bounds) == tuple(b / 1000 for b in metrics.BUCKETS_MS)
    assert point.count == len(durations) and point.sum == pytest.approx(sum(durations) / 1000)
    assert dict(point.attributes) == {"queue": "default", "job_type": "resize"}
    # bucket for bucket what /metrics serves from Redis (cumulative there, per bucket here)
    exposition = render(r)[0].decode()
    cumulative = 0
    for bound, n in zip([*metrics.BUCKETS_MS, None], point.bucket_counts):
        cumulative += n
        le = "+Inf" if bound is None else repr(bound / 1000)
        line = (f'antre_processing_duration_seconds_bucket{{job_type="resize",le="{le}",'
                f'queue="default"}} {float(cumulative)}')
        assert line in exposition, line
