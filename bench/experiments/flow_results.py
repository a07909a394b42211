"""What reading a big batch's results costs Redis (issue 26 leftovers): ``Flow.results()`` as
it was (one LRANGE of the whole jobs' list, one HMGET of every result) beside the paged read
(``FlowReader.iter_results``: 1,000 ids per LRANGE and per HMGET), taking turns in one run.
Figures: the longest single command the server ran for the read (``SLOWLOG`` with a 0 µs
threshold: the server's own time per command, so a long one is time every other client of
that Redis waits) and the wall time of the whole read.

    python3 bench/experiments/flow_results.py [--members 100000] [--rounds 3]

Prints a Markdown table (quoted in bench/experiments/flow-results.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, cast

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from antre import Antre  # noqa: E402
from antre.embedded import EmbeddedRedis  # noqa: E402
from antre.engine import keys  # noqa: E402
from antre.flows.read import FlowReader, decode_result  # noqa: E402


def whole_read(r: redis.Redis, flow_id: str) -> list[Any]:
    """The read before paging: every id, then every result, each in one command."""
    k = keys.QueueKeys("default")
    hooks = cast(list[str | None], r.hmget(k.flow(flow_id), ("on_success", "on_complete")))
    ids = [i for i in cast(list[str], r.lrange(k.flow_jobs(flow_id), 0, -1)) if i not in hooks]
    return [decode_result(x) for x in cast(list[str | None], r.hmget(k.flow_results(flow_id), ids))]


def measure(r: redis.Redis, read: Any) -> tuple[float, float, int]:
    """(longest command µs, wall ms, results read)."""
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 100_000)
    r.slowlog_reset()
    started = time.perf_counter()
    n = len(read())
    wall_ms = (time.perf_counter() - started) * 1000
    r.config_set("slowlog-log-slower-than", 10_000)
    longest = max(int(e["duration"]) for e in r.slowlog_get(100_000)
                  if not str(e.get("command", b"")).lower().startswith(("b'slowlog", "slowlog")))
    return longest, wall_ms, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    with EmbeddedRedis() as server:
        app = Antre(redis_url=server.url)
        r = app.redis
        batch = app.batch()
        for start in range(0, a.members, 10_000):
            batch.add(*[app.spec("t", {"i": i}, idempotency_key=f"m{i}")
                        for i in range(start, min(a.members, start + 10_000))])
        batch.close()
        q = app.queue()
        while jobs := q.reserve("w", count=1000):
            q.ack_many([(j, {"i": j.payload["i"], "ok": True}) for j in jobs])
        reader = FlowReader(r)
        rows: dict[str, list[tuple[float, float]]] = {"whole": [], "paged": []}
        for i in range(a.rounds * 2):
            name = ("whole", "paged")[(i + i // 2) % 2]  # whole, paged, paged, whole, ...
            read = (lambda: whole_read(r, batch.id)) if name == "whole" else \
                (lambda: list(reader.iter_results("default", batch.id)))
            longest, wall, n = measure(r, read)
            assert n == a.members, n
            rows[name].append((longest, wall))
    print(f"{a.members:,} members, {a.rounds} rounds each, load {os.getloadavg()[0]:.1f}\n")
    print("| read | longest Redis command (µs), median | whole read (ms), median |")
    print("|---|---|---|")
    for name, got in rows.items():
        print(f"| {name} | {statistics.median(x for x, _ in got):,.0f} | "
              f"{statistics.median(y for _, y in got):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
