"""OpenTelemetry metrics beside the traces (``pip install antre[otel]``), for a stack that
collects OTLP rather than scraping ``/metrics``.

- ``install(client, clock, meter_provider=None)``: every figure of ``/metrics`` that
  ``AntreCollector`` reads from Redis (depths, DLQ, counters of the Lua scripts, workers,
  breakers, the completed-key caches, ...) as observable instruments of the same names (a
  counter without its ``_total``, which an OTLP-to-Prometheus export adds back), read from Redis
  once per collection. Cluster-wide figures, so install it in one process per deployment (the
  dashboard does, when an SDK meter provider is configured: ``install_if_configured``).
  The two duration histograms Redis keeps as bucket counters are not read back from Redis
  (OpenTelemetry has no observable histogram): the workers record them instead, below.
- ``record_duration(queue, job_type, kind, ms)``: each worker process records the handler's
  run time (``antre_processing_duration_seconds``) and enqueue-to-finish latency
  (``antre_job_latency_seconds``) into OpenTelemetry histograms, in seconds, beside the Redis
  counters ``/metrics`` serves, with the same bucket bounds (``BUCKETS_S``: ``metrics.BUCKETS_MS``
  in seconds, given as the histograms' advisory boundaries), so a dashboard built on either
  reads the same buckets. Without an SDK meter provider this costs one question per call.

Without the ``opentelemetry`` package every function here does nothing.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import redis

from antre.clock import Clock, system_ms
from antre.observe.metrics import BUCKETS_MS, KINDS, METRIC_NAMES, AntreCollector

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    otel_metrics = None  # type: ignore[assignment]

log = logging.getLogger("antre.observe.otel_metrics")

AVAILABLE = otel_metrics is not None
METER_NAME = "antre"
BRIDGED_HISTOGRAMS = frozenset(KINDS.values())  # recorded by the workers instead
SUMMARIES = frozenset({"antre_ack_latency_seconds"})
BUCKETS_S = tuple(b / 1000 for b in BUCKETS_MS)  # the duration histograms' bounds, as /metrics
_ENV_PROVIDER = "OTEL_PYTHON_METER_PROVIDER"
_PROVIDER_FROM_ENV = _ENV_PROVIDER in os.environ


def configured() -> bool:
    """True when an SDK meter provider is set (what OpenTelemetry's global says), so
    measurements made here are kept."""
    if not AVAILABLE:
        return False
    internal = otel_metrics._internal
    if not _PROVIDER_FROM_ENV and getattr(internal, "_METER_PROVIDER", None) is None:
        return False
    return not isinstance(otel_metrics.get_meter_provider(), otel_metrics.NoOpMeterProvider)


def instrument_names() -> list[tuple[str, str]]:
    """``(OpenTelemetry name, kind)`` of every bridged figure: kind ``counter`` or ``gauge``."""
    out: list[tuple[str, str]] = []
    for name in METRIC_NAMES:
        if name in BRIDGED_HISTOGRAMS:
            continue
        if name in SUMMARIES:
            out += [(f"{name}_count", "counter"), (f"{name}_sum", "counter")]
        elif name.endswith("_total"):
            out.append((name[: -len("_total")], "counter"))
        else:
            out.append((name, "gauge"))
    return out


class Bridge:
    """The observable instruments' one read: ``AntreCollector`` run once per collection (by
    the first instrument's callback, ``antre_redis_up``), its samples handed to the others."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.collector = AntreCollector(client, clock)
        self._samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        self._lock = threading.Lock()

    def refresh(self) -> None:
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in self.collector.collect():
            for s in family.samples:
                name = s.name
                if family.type == "counter" and name.endswith("_total"):
                    name = name[: -len("_total")]
                elif family.type == "counter" and name.endswith("_created"):
                    continue
                samples.setdefault(name, []).append((dict(s.labels), float(s.value)))
        with self._lock:
            self._samples = samples

    def observe(self, name: str) -> list[tuple[dict[str, str], float]]:
        if name == "antre_redis_up":
            self.refresh()
        with self._lock:
            return list(self._samples.get(name, ()))

    def callback(self, name: str) -> Any:
        def read(options: CallbackOptions) -> Iterator[Observation]:
            for labels, value in self.observe(name):
                yield Observation(value, labels)
        return read


def install(client: "redis.Redis", clock: Clock = system_ms, *,
            meter_provider: Any = None) -> Bridge | None:
    """Register the bridged instruments on ``meter_provider`` (default: the global one)."""
    if not AVAILABLE:
        return None
    bridge = Bridge(client, clock)
    meter = otel_metrics.get_meter(METER_NAME, meter_provider=meter_provider)
    for name, kind in instrument_names():
        make = meter.create_observable_counter if kind == "counter" \
            else meter.create_observable_gauge
        make(name, callbacks=[bridge.callback(name)], description=f"as {name} on /metrics")
    return bridge


def install_if_configured(client: "redis.Redis", clock: Clock = system_ms) -> Bridge | None:
    """``install`` on the global meter provider when it is an SDK one, else nothing."""
    return install(client, clock) if configured() else None


class DurationRecorder:
    """The workers' duration histograms on ``meter_provider``'s meter (default: the global
    one), each made on first use with ``/metrics``' bucket bounds (``BUCKETS_S``)."""

    def __init__(self, meter_provider: Any = None) -> None:
        self.meter_provider = meter_provider
        self.histograms: dict[str, Any] = {}

    def record(self, queue: str, job_type: str, kind: str, ms: int) -> None:
        histogram = self.histograms.get(kind)
        if histogram is None:
            histogram = self.histograms[kind] = self._make(KINDS[kind])
        histogram.record(max(0, ms) / 1000, {"queue": queue, "job_type": job_type})

    def _make(self, name: str) -> Any:
        meter = otel_metrics.get_meter(METER_NAME, meter_provider=self.meter_provider)
        return meter.create_histogram(name, unit="s", description=f"as {name} on /metrics",
                                      explicit_bucket_boundaries_advisory=BUCKETS_S)


_DURATIONS = DurationRecorder()


def record_duration(queue: str, job_type: str, kind: str, ms: int) -> None:
    """One duration (``kind``: processing or latency) into the OpenTelemetry histogram, when
    an SDK meter provider is configured (``DurationBuffer.add``'s arguments: its ``also``)."""
    if configured():
        _DURATIONS.record(queue, job_type, kind, ms)


__all__ = ["AVAILABLE", "BUCKETS_S", "Bridge", "DurationRecorder", "configured", "install", "install_if_configured",
           "instrument_names", "record_duration"]
