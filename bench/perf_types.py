"""The performance index (``/types/``) with many job types: Redis commands and time of one
read of the index, the way it read before (every type x every slot of the window's cover:
``Perf._read`` over every known type) and now (``Perf.page``: the types ranked by one ZUNION
per queue of the slots' run counts, the figures read for the 50 shown), paired and
interleaved within one run, on a private Redis; then the page itself through the Flask app.

    PYTHONPATH=$PWD python3 bench/perf_types.py [--types 10000] [--runs 2]

Each type ran in three hours of the last 7 days (the last hour, 5 hours ago, 3 days ago).
Writes bench/results/perf-types.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.clock import ManualClock
from antre.embedded import EmbeddedRedis
from antre.engine import keys
from antre.observe import perf
from antre.observe.metrics import DurationBuffer

H = 3_600_000
QUEUE = "bench"


def populate(client: redis.Redis, clock: ManualClock, types: int) -> None:
    now = clock()
    names = [f"type_{i:05d}" for i in range(types)]
    for start in range(0, types, 500):
        buf = DurationBuffer()
        for i, name in enumerate(names[start:start + 500], start):
            for ago in (10 * 60_000, 5 * H, 72 * H):
                for _ in range(1 + i % 5):
                    perf.record_run(buf, QUEUE, name, now - ago, 20 + i % 300, 3, i % 11 == 0)
        buf.flush(client)
    client.sadd(keys.queues_index(), QUEUE)
    for start in range(0, types, 5000):
        client.sadd(keys.QueueKeys(QUEUE).types, *names[start:start + 5000])


def calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))


def measured(client: redis.Redis, fn: Callable[[], Any]) -> tuple[float, int, Any]:
    before = calls(client)
    t0 = time.perf_counter()
    out = fn()
    ms = (time.perf_counter() - t0) * 1000
    return ms, calls(client) - before, out


def every_type(p: perf.Perf, window: str) -> list[Any]:
    """The index as it read before: each known type's fields in every slot of the cover, and
    every hour of each coarse slot that does not exist (the read model's code before)."""
    cov = p._cover(window, p.clock())
    plan = [(t, q) for t, qs in sorted(p.queue_types().items()) for q in qs]
    rows = [(t, perf._column_sums(r)) for (t, _), r in zip(plan, old_read(p, plan, cov))]
    return sorted(rows, key=lambda x: -(x[1][0] if x[1] else 0))


def old_read(p: perf.Perf, plan: list[tuple[str, str]], slots: list[tuple[str, int]]
             ) -> list[list[Any]]:
    """``Perf._read`` as it was: the hours of a missing coarse slot read for every type."""
    coarse = [s for s in slots if s[0] in perf.COARSE]
    queues = sorted({name for _, name in plan})
    probes = [(name, s) for name in queues for s in coarse]
    pipe = p.redis.pipeline(transaction=False)
    for name, (res, slot) in probes:
        pipe.exists(keys.QueueKeys(name).perf(res, slot))
    for job_type, name in plan:
        fields, qk = perf.type_fields(job_type), keys.QueueKeys(name)
        for res, slot in slots:
            pipe.hmget(qk.perf(res, slot), fields)
    replies = pipe.execute()
    missing = {pr for pr, there in zip(probes, replies) if not there}
    n, width = len(probes), len(slots)
    out = [replies[n + i * width:n + (i + 1) * width] for i in range(len(plan))]
    if missing:
        pipe = p.redis.pipeline(transaction=False)
        todo: list[tuple[int, int, int]] = []
        for i, (job_type, name) in enumerate(plan):
            fields, qk = perf.type_fields(job_type), keys.QueueKeys(name)
            for j, s in enumerate(slots):
                if (name, s) in missing:
                    hours = perf.hours_of(*s)
                    for h in hours:
                        pipe.hmget(qk.perf("h", h), fields)
                    todo.append((i, j, len(hours)))
        more = iter(pipe.execute())
        for i, j, count in todo:
            out[i][j] = perf._column_sums([next(more) for _ in range(count)])
    return out


def viewer_client(redis_url: str, tmp: str, clock: ManualClock) -> Any:
    """A test client of the dashboard on ``redis_url`` and ``clock``, logged in as a viewer."""
    from antre_web import create_app

    from bench.dashboard_render import login
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_CLOCK": clock,
                      "ANTRE_DATABASE_URL": f"sqlite:///{tmp}/antre.db",
                      "SECRET_KEY": "bench-only-session-key-8e1d4c7a2f9b6e3d0c5a"})
    app.extensions["antre"].users.add("op", "viewer", "bench-password")
    web = app.test_client()
    login(web)
    return web


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "perf-types.md"))
    args = ap.parse_args()
    with open("/proc/cpuinfo") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info
                    if line.startswith("model name")), platform.processor())
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedRedis(data_dir=os.path.join(tmp, "redis")) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        clock = ManualClock(1_800_000_000_000 // H * H + 30 * 60_000)
        t0 = time.perf_counter()
        populate(client, clock, args.types)
        fill_s = time.perf_counter() - t0
        p = perf.Perf(client, clock)
        results: dict[tuple[str, str], list[tuple[float, int]]] = {}
        load_before = os.getloadavg()
        for window in ("7d", "1h"):
            for _ in range(args.runs):  # paired, interleaved: before, now, before, now
                ms, n, old = measured(client, lambda w=window: every_type(p, w))
                results.setdefault((window, "before: every type"), []).append((ms, n))
                ms, n, new = measured(client, lambda w=window: p.page(w, limit=perf.PAGE))
                results.setdefault((window, "now: 50 shown"), []).append((ms, n))
                top_old = [t for t, s in old[:5]]
                assert new.total == args.types, new.total
                assert {r.job_type for r in new.rows[:5]} <= {t for t, s in old[:50]}, top_old
        web = viewer_client(server.url, tmp, clock)
        page_ms = []
        for _ in range(args.runs):
            ms, n, resp = measured(client, lambda: web.get("/types/?window=7d"))
            assert resp.status_code == 200, (resp.status_code, resp.get_data(as_text=True)[:300])
            page_ms.append((ms, n))
        load_after = os.getloadavg()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    uptime = subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()
    lines = [
        "# The performance index with many job types", "",
        (f"{args.types:,} job types in one queue, each run in three hours of the last 7 days "
        f"(filled in {fill_s:.0f} s). Machine: {os.cpu_count()} cores, {cpu}; load "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after (`uptime` at the end: "
        f"{uptime}); {when}; Python {platform.python_version()}. Private Redis on a unix "
        "socket; shared machine (other engineers' jobs ran meanwhile), so compare the rows of "
        "one run only: they were measured paired and interleaved."), "",
        (f"Command: `PYTHONPATH=$PWD python3 bench/perf_types.py --types {args.types} "
        f"--runs {args.runs}`"), "",
        "| window | read | Redis commands | time ms (each run) |", "|---|---|---:|---|"]
    for (window, what), got in results.items():
        lines.append(f"| {window} | {what} | {got[0][1]:,} | "
                     f"{', '.join(f'{ms:,.0f}' for ms, _ in got)} |")
    lines += ["", (f"The page `GET /types/?window=7d` through the Flask app (viewer's request, "
                  f"now): {page_ms[0][1]:,} Redis commands, "
                  f"{', '.join(f'{ms:,.0f}' for ms, _ in page_ms)} ms."), "",
              ("Before, one request read every type's 42 fields in every slot of the window "
              "(22 slots for 7 days: 220,000 HMGETs for 10,000 types) and every hour of each "
              "coarse slot that has no key (nothing ran in it, or an older worker wrote its "
              "hours): 147 commands a type here; now the ranking is one ZUNION "
              "per queue over the window's run-count ZSETs (the server sums every type's runs) "
              "and the figures are read for the types shown only, so the commands no longer "
              "grow with the types (`tests/observe/test_perf.py` checks the count is the same "
              "for 40 and 400 types).")]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
