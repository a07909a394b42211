"""OpenTelemetry tracing through the job envelope: producer -> queue wait -> handler -> downstream.

Optional: without the ``opentelemetry`` package (``pip install antre[otel]``) every function
here is a no-op (``None`` traceparents, ``None`` spans), and so it is when no SDK tracer
provider is configured. The link between producer and handler is the W3C ``traceparent`` the
producer stores in the envelope's ``trace_id``:

- at enqueue: ``with enqueue_span(job_type, queue) as tp: ...enqueue(..., trace_id=tp)`` (a
  PRODUCER span; ``tp`` is its traceparent, or ``None``: then the queue makes a fresh one).
  ``Antre.enqueue`` opens it only when ``recording()``: without an SDK no span would be kept,
  and the trace in progress, if any, is carried on by ``inject_traceparent()`` alone;
- in the worker: ``with execution_span(job): handler(...)`` starts a CONSUMER span whose parent
  is the job's traceparent, plus a "queue wait" span from enqueue to reservation, so one trace
  shows the producer, the time in the queue and the handler; spans a handler opens (HTTP
  clients, ``downstream_span``) are children of the execution span;
- the worker's steps before the handler: ``job_span("lock acquire", job)`` (the business lock:
  its key, the fencing token it got or that it was busy) and ``job_span("idempotency claim",
  job)`` (what the store said), children of the job's trace as well;
- every round trip of Lua scripts made inside a recorded span (the enqueue, a lock acquire, a
  handler's ``ctx.extend_lease``, ...) is a CLIENT span ``redis <script>`` with the script
  names and the number of calls (``antre.engine.scripts.SPANS``); outside any span nothing is
  recorded, so an idle worker's polling makes no traces. Attributes are bounded: names, ids,
  counts, never keys' values, arguments or payloads.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from antre.engine import scripts as engine_scripts
from antre.engine.envelope import Job

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import (NonRecordingSpan, SpanContext, SpanKind, Status,
                                     StatusCode, TraceFlags)
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    trace = None  # type: ignore[assignment]

AVAILABLE = trace is not None
_PROPAGATOR: Any = TraceContextTextMapPropagator() if AVAILABLE else None
TRACER_NAME = "antre"
SYSTEM = "antre"


def _tracer(provider: Any = None) -> Any:
    return trace.get_tracer(TRACER_NAME, tracer_provider=provider)


# OpenTelemetry loads the provider named by this variable at its first get_tracer_provider();
# read once here (it is set before a process starts, as OpenTelemetry's auto-instrumentation
# requires), so that the per-job question below costs no environment lookup while no provider
# is set
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"
_PROVIDER_FROM_ENV = _ENV_PROVIDER in os.environ
_UNKNOWN = object()


def _no_sdk() -> bool:
    """No SDK tracer provider (a proxy): what ``isinstance(trace.get_tracer_provider(),
    ProxyTracerProvider)`` says. While no provider was ever set (OpenTelemetry's global is still
    None and the environment names none) that is known without calling it: its environment
    lookup was a tenth of a no-op job's tracing cost. Asked for every job and every enqueue."""
    if not _PROVIDER_FROM_ENV and getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None:
        return True
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def recording() -> bool:
    """True when an SDK tracer provider is installed, so spans started here are recorded."""
    return AVAILABLE and not _no_sdk()


def inject_traceparent() -> str | None:
    """The current span context as a W3C traceparent, or ``None`` outside a recorded span."""
    if not AVAILABLE or not trace.get_current_span().get_span_context().is_valid:
        return None  # nothing to carry on (checked first: the propagator costs ~5 µs)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


# a version-00 traceparent, the one Antre writes: parsed here (a third of the propagator's
# time per job); anything else goes through the propagator
_TRACEPARENT_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def extract(traceparent: str) -> Any:
    """An OpenTelemetry context whose parent is ``traceparent`` (``None`` without OTel)."""
    if not AVAILABLE or not traceparent:
        return None
    m = _TRACEPARENT_00.fullmatch(traceparent)
    if m is not None:
        trace_id, span_id = int(m[1], 16), int(m[2], 16)
        if trace_id and span_id:
            return trace.set_span_in_context(NonRecordingSpan(SpanContext(
                trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(m[3], 16)))))
    return _PROPAGATOR.extract({"traceparent": traceparent})


@contextlib.contextmanager
def enqueue_span(job_type: str, queue: str, *, tracer_provider: Any = None
                 ) -> Iterator[str | None]:
    """A PRODUCER span around an enqueue; yields the traceparent to store in ``trace_id``."""
    if not AVAILABLE:
        yield None
        return
    attributes = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                  "messaging.destination.name": queue, "antre.job.type": job_type}
    with _tracer(tracer_provider).start_as_current_span(
            f"enqueue {job_type}", kind=SpanKind.PRODUCER, attributes=attributes):
        yield inject_traceparent()


def _job_attributes(job: Job) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process",
        "messaging.destination.name": job.queue, "messaging.message.id": job.id,
        "antre.job.id": job.id, "antre.job.type": job.type, "antre.engine.queue": job.queue,
        "antre.attempt": job.attempt + 1, "antre.delivery": job.deliveries,
        "antre.idempotency_key": job.idempotency_key, "antre.lease.epoch": job.epoch}
    if job.lock_key:
        attrs["antre.lock_key"] = job.lock_key
    if job.worker_id:
        attrs["antre.worker_id"] = job.worker_id
    return attrs


def _queue_wait_span(tracer: Any, job: Job, parent: Any) -> None:
    """A span from enqueue (or the last time the job became visible) to its reservation."""
    start = job.visible_at or job.created_at
    if not start or not job.reserved_at or job.reserved_at < start:
        return
    span = tracer.start_span(f"queue wait {job.queue}", context=parent,
                             kind=SpanKind.INTERNAL, start_time=start * 1_000_000,
                             attributes={"antre.job.id": job.id, "antre.engine.queue": job.queue,
                                         "antre.queue_wait_ms": job.reserved_at - start})
    span.end(end_time=job.reserved_at * 1_000_000)


@contextlib.contextmanager
def execution_span(job: Job, *, tracer_provider: Any = None) -> Iterator[Any]:
    """A CONSUMER span around one execution of ``job``, child of the producer's span (the
    job's ``trace_id``). An exception escaping the block is recorded on it and re-raised."""
    if not AVAILABLE:
        yield None
        return
    parent = extract(job.trace_id)
    if tracer_provider is None and _no_sdk():
        # no SDK configured: nothing would be recorded, so no spans are built (they were a
        # tenth of a short job's cost); the producer's trace context is still current in the
        # handler, so what it calls downstream carries the same traceparent
        token = otel_context.attach(parent)
        try:
            yield None
        finally:
            otel_context.detach(token)
        return
    tracer = _tracer(tracer_provider)
    _queue_wait_span(tracer, job, parent)
    with tracer.start_as_current_span(f"process {job.type}", context=parent,
                                      kind=SpanKind.CONSUMER, attributes=_job_attributes(job),
                                      record_exception=False, set_status_on_exception=False
                                      ) as span:
        try:
            yield span
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.set_attribute("antre.error_kind", type(exc).__name__)
            raise


@contextlib.contextmanager
def job_span(name: str, job: Job, attributes: dict[str, Any] | None = None, *,
             tracer_provider: Any = None) -> Iterator[Any]:
    """An INTERNAL span ``antre <name>`` for a step of ``job``'s processing outside its
    handler, in the job's trace (its parent: the producer's span). Callers open it only while
    ``recording()``."""
    if not AVAILABLE:
        yield None
        return
    attrs = {"antre.job.id": job.id, "antre.job.type": job.type,
             "antre.engine.queue": job.queue, **(attributes or {})}
    with _tracer(tracer_provider).start_as_current_span(
            f"antre {name}", context=extract(job.trace_id), kind=SpanKind.INTERNAL,
            attributes=attrs) as span:
        yield span


class _ScriptSpans(engine_scripts.ScriptSpans):
    """The engine's script round trips as CLIENT spans, inside a recorded span only."""

    def recording(self) -> bool:
        return recording() and trace.get_current_span().is_recording()

    def span(self, names: Any, calls: int) -> Any:
        label = "+".join(names[:3])
        return _tracer().start_as_current_span(
            f"redis {label}", kind=SpanKind.CLIENT,
            attributes={"db.system.name": "redis", "db.operation.name": "EVALSHA",
                        "antre.scripts": list(names), "antre.calls": calls})


if AVAILABLE:
    engine_scripts.SPANS = _ScriptSpans()


def run_in_execution_span(job: Job, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` inside ``execution_span(job)``. The worker's call for a sync handler: with
    no SDK configured (no span would be recorded) only the producer's trace context is made
    current around the call, without building a context manager per job."""
    if not AVAILABLE:
        return fn(*args)
    if not _no_sdk():
        with execution_span(job):
            return fn(*args)
    token = otel_context.attach(extract(job.trace_id))
    try:
        return fn(*args)
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def downstream_span(downstream: str, operation: str = "call", *, tracer_provider: Any = None
                    ) -> Iterator[Any]:
    """A CLIENT span for a call a handler makes to a downstream (e.g. ``email-provider``)."""
    if not AVAILABLE:
        yield None
        return
    with _tracer(tracer_provider).start_as_current_span(
            f"{operation} {downstream}", kind=SpanKind.CLIENT,
            attributes={"antre.downstream": downstream}) as span:
        yield span


__all__ = [
    "AVAILABLE",
    "downstream_span",
    "enqueue_span",
    "execution_span",
    "extract",
    "inject_traceparent",
    "job_span",
    "recording",
    "run_in_execution_span",
]
