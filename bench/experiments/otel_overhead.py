"""What the OpenTelemetry hooks of issue 27 cost while no SDK is configured (the state of
every install with ``antre[otel]`` that does not set up a tracer provider): single enqueues
with the engine's script-span hook unset (``SPANS = None``: OpenTelemetry not installed) and
set (installed, no SDK: one question per round trip), in interleaved rounds on one private
Redis so shared-CPU noise hits both alike.

    python -m bench.experiments.otel_overhead [--jobs 5000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit

from antre import Antre
from antre.embedded import EmbeddedRedis
from antre.engine import scripts
from antre.observe import tracing


def rate(app: Antre, n: int, tag: str) -> float:
    start = time.perf_counter()
    for i in range(n):
        app.enqueue("noop", {"i": i}, idempotency_key=f"{tag}:{i}")
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    assert tracing.AVAILABLE and not tracing.recording(), "needs antre[otel], no SDK set"
    hook = scripts.SPANS
    server = EmbeddedRedis(tcp=True).start()
    try:
        app = Antre(redis_url=server.url)
        rate(app, 500, "warm")
        out: dict[str, list[float]] = {"hook unset": [], "hook set, no SDK": []}
        for r in range(args.rounds):
            for label, value in (("hook unset", None), ("hook set, no SDK", hook)):
                scripts.SPANS = value
                out[label].append(rate(app, args.jobs, f"{r}:{label}"))
                app.redis.flushall()
        for label, rates in out.items():
            print(f"{label:<18} median {statistics.median(rates):8.0f} enqueues/s  "
                  f"(rounds: {', '.join(f'{x:.0f}' for x in rates)})")
        scripts.SPANS = hook
        n = 200_000
        ask = min(timeit.repeat(scripts._spans, number=n, repeat=5)) / n * 1e9
        step = min(timeit.repeat(tracing.recording, number=n, repeat=5)) / n * 1e9
        print(f"the question per round trip (scripts._spans): {ask:.0f} ns; per traced worker "
              f"step (tracing.recording): {step:.0f} ns (best of 5 x {n})")
    finally:
        scripts.SPANS = hook
        server.stop()


if __name__ == "__main__":
    main()
