"""Spans for the lock acquire, the idempotency claim and the Lua script round trips, and the
workers' OpenTelemetry duration histograms, with the OpenTelemetry SDK's in-memory exporters
(the real SDK). OpenTelemetry's global providers can be set once per process, so the worker
runs in a child process of its own that sets them, runs a real burst worker and prints what
was exported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("opentelemetry.sdk.trace")

REPO = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent('''
    import json, sys
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    from antre import Antre
    from antre_worker.runner import WorkerProcess

    app = Antre(redis_url=sys.argv[1], database_url=sys.argv[2])

    @app.handler("charge")
    def charge(ctx, payload):
        return {"charged": True}

    app.enqueue("charge", {"card": "SECRET-4242"}, idempotency_key="charge:order-1",
                lock_key="customer:7")
    WorkerProcess(app, queues=["default"], worker_id="w-otel", heartbeat_s=60).run_burst()
    spans = [{"name": s.name, "id": s.context.span_id, "trace": s.context.trace_id,
              "parent": s.parent.span_id if s.parent else None, "kind": s.kind.name,
              "attrs": dict(s.attributes or {})} for s in exporter.get_finished_spans()]
    hist = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                hist[m.name] = [{"attrs": dict(p.attributes), "count": getattr(p, "count", None)}
                                for p in m.data.data_points]
    print(json.dumps({"spans": spans, "metrics": hist}))
''')


@pytest.fixture(scope="module")
def exported(redis_server: Any, tmp_path_factory: Any) -> dict[str, Any]:
    """One run of the child for the module's tests (a flushed Redis, a fresh SQLite file)."""
    redis_url = redis_server.url
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()
    sqlite_url = f"sqlite:///{tmp_path_factory.mktemp('otel') / 'antre.db'}"
    env = {**os.environ, "OTEL_SDK_DISABLED": "false"}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    out = subprocess.run([sys.executable, "-c", CHILD, redis_url, sqlite_url], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (span,) = [s for s in spans if s["name"] == name]
    return span


def test_the_lock_the_claim_and_the_scripts_are_spans_of_the_jobs_trace(exported):
    spans = exported["spans"]
    enqueue, run = _one(spans, "enqueue charge"), _one(spans, "process charge")
    lock, claim = _one(spans, "antre lock acquire"), _one(spans, "antre idempotency claim")
    trace_id = enqueue["trace"]
    assert {lock["trace"], claim["trace"], run["trace"]} == {trace_id}
    assert lock["parent"] == claim["parent"] == enqueue["id"]  # the job's trace
    assert (lock["attrs"]["antre.lock_key"], lock["attrs"]["antre.lock.fence"],
            lock["attrs"]["antre.outcome"]) == ("customer:7", 1, "continue")
    assert claim["attrs"]["antre.outcome"] == "continue"
    acquire = [s for s in spans if s["parent"] == lock["id"]]
    assert [s["name"] for s in acquire] == ["redis lock_acquire"]
    assert acquire[0]["kind"] == "CLIENT" and acquire[0]["attrs"]["antre.scripts"] == [
        "lock_acquire"]
    written = [s for s in spans if s["parent"] == enqueue["id"] and s["kind"] == "CLIENT"]
    assert written and all(s["name"].startswith("redis ") for s in written)


def test_span_attributes_are_bounded_and_carry_no_payload(exported):
    text = json.dumps(exported["spans"])
    assert "SECRET-4242" not in text and '"card"' not in text
    for span in exported["spans"]:
        for value in span["attrs"].values():
            assert len(json.dumps(value)) < 300
    idle = [s for s in exported["spans"] if s["parent"] is None and s["kind"] == "CLIENT"]
    assert idle == []  # an idle worker's polls (outside any span) make no traces


def test_the_workers_record_the_duration_histograms_through_otel(exported):
    for name in ("antre_processing_duration_seconds", "antre_job_latency_seconds"):
        (point,) = exported["metrics"][name]
        assert point["attrs"] == {"queue": "default", "job_type": "charge"}
        assert point["count"] == 1
