"""One trace links the producer, the time in the queue and the handler (and what it calls)."""

from __future__ import annotations

import pytest

from antre.observe import tracing
from antre.clock import ManualClock
from antre.engine.envelope import Job, new_traceparent
from antre.engine.queue import Queue

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode  # noqa: E402


@pytest.fixture
def provider():
    exporter = InMemorySpanExporter()
    tp = sdk_trace.TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tp.exporter = exporter  # type: ignore[attr-defined]
    yield tp
    tp.shutdown()


def test_one_trace_links_producer_queue_wait_and_handler(r, provider):
    clock = ManualClock()
    q = Queue(r, "mail", clock=clock)
    with tracing.enqueue_span("send_email", "mail", tracer_provider=provider) as tp:
        assert tp is not None and tp.startswith("00-")
        job_id = q.enqueue("send_email", {"to": "a"}, idempotency_key="k", trace_id=tp)
    assert tracing.inject_traceparent() is None  # outside any span
    clock.advance(1_500)
    [job] = q.reserve("w1")
    assert job.id == job_id and job.trace_id == tp
    with tracing.execution_span(job, tracer_provider=provider), \
            tracing.downstream_span("email-provider", "send", tracer_provider=provider):
        pass

    spans = {s.name: s for s in provider.exporter.get_finished_spans()}
    producer, wait = spans["enqueue send_email"], spans["queue wait mail"]
    handler, downstream = spans["process send_email"], spans["send email-provider"]
    assert producer.kind == SpanKind.PRODUCER and handler.kind == SpanKind.CONSUMER
    trace_id = producer.context.trace_id
    assert {s.context.trace_id for s in spans.values()} == {trace_id}
    assert handler.parent.span_id == producer.context.span_id
    assert wait.parent.span_id == producer.context.span_id
    assert downstream.parent.span_id == handler.context.span_id
    assert (wait.end_time - wait.start_time) == 1_500 * 1_000_000
    attrs = handler.attributes
    assert (attrs["antre.job.id"], attrs["antre.job.type"], attrs["antre.engine.queue"],
            attrs["antre.attempt"], attrs["antre.idempotency_key"]) == (
        job_id, "send_email", "mail", 1, "k")


def test_execution_span_records_the_error_and_reraises(provider):
    job = Job(id="j1", type="t", queue="q", idempotency_key="k", payload=None,
              trace_id=new_traceparent())
    with pytest.raises(ValueError), tracing.execution_span(job, tracer_provider=provider):
        raise ValueError("boom")
    [span] = provider.exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.events[0].name == "exception"
    assert f"{span.parent.trace_id:032x}" == job.trace_id.split("-")[1]


def test_no_recording_provider_means_no_traceparent():
    with tracing.enqueue_span("t", "q", tracer_provider=NoOpTracerProvider()) as tp:
        assert tp is None


def test_without_opentelemetry_everything_is_a_no_op(monkeypatch):
    monkeypatch.setattr(tracing, "AVAILABLE", False)
    job = Job(id="j", type="t", queue="q", idempotency_key="k", payload=None)
    with tracing.enqueue_span("t", "q") as tp, tracing.execution_span(job) as span, \
            tracing.downstream_span("d") as d:
        assert (tp, span, d) == (None, None, None)
    assert tracing.inject_traceparent() is None and tracing.extract("x") is None


def test_without_an_sdk_the_handler_still_carries_the_producers_traceparent():
    from opentelemetry import trace

    from antre.engine.envelope import Job
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no SDK here
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = Job(id="j1", type="t", queue="q", idempotency_key="k", payload={}, trace_id=tp)
    assert tracing.inject_traceparent() is None
    with tracing.execution_span(job) as span:
        assert span is None  # nothing is built when nothing would record it
        assert tracing.inject_traceparent() == tp  # but what the handler calls carries it on
    assert tracing.inject_traceparent() is None


def test_the_workers_call_carries_the_producers_traceparent_without_an_sdk():
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = Job(id="j1", type="t", queue="q", idempotency_key="k", payload={}, trace_id=tp)
    seen = tracing.run_in_execution_span(job, lambda a, b: (a, b, tracing.inject_traceparent()),
                                         1, 2)
    assert seen == (1, 2, tp) and tracing.inject_traceparent() is None
    with pytest.raises(KeyError):  # an exception leaves the context as it was
        tracing.run_in_execution_span(job, {}.__getitem__, "x")
    assert tracing.inject_traceparent() is None


_SDK_CHECK = """
import sys
from opentelemetry import trace
from antre.observe import tracing
before = (tracing._no_sdk(), isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider))
if sys.argv[1] == "set":
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
after = (tracing._no_sdk(), isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider))
print(before, after, tracing.recording())
"""


@pytest.mark.parametrize("how, env, want", [
    ("none", {}, "(True, True) (True, True) False"),
    ("set", {}, "(True, True) (False, False) True"),  # a provider set later is seen at once
    ("none", {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"},
     "(False, False) (False, False) True"),  # one named by the environment too
])
def test_whether_an_sdk_is_configured_is_what_opentelemetry_says(how, env, want):
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _SDK_CHECK, how], capture_output=True,
                         text=True, env={**os.environ, **env}, timeout=60)
    assert out.stdout.strip() == want, out.stderr
