"""Incident controls, measured on a private Redis (writes bench/experiments/incident.json; its
figures are written up in bench/experiments/incident.md).

1. What pausing costs reserve: the same no-op drain (reserve 100 + ack_many, one process, no
   threads) of N jobs with the reserve script from before the pause check, with the new one
   while nothing is paused, and with the new one while another job type is paused (the per-job
   type check runs). Runs alternate, and the median of each is reported.
2. What a purge of 100,000 ready jobs costs Redis: every command slower than 0.5 ms is logged
   by SLOWLOG during the purge (``slowlog-log-slower-than 500``; logging every command would
   itself slow them down); the longest single command is the longest time Redis was blocked. Variants: every job matches; every other job matches (the walk
   goes the whole length of the list, so the cursor lookup and the marker removal reach
   deepest); 100,000 scheduled jobs.

    PYTHONPATH=$PWD python3 -m bench.experiments.incident [--jobs 20000] [--purge 100000] [--rounds 3]
        [--realtime]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from typing import Any

import redis

from antre.embedded import EmbeddedRedis
from antre.engine.envelope import from_fields
from antre.control.pause import Pauses
from antre.control.purge import PurgeFilter, Purger
from antre.engine.queue import RESERVE_FIELDS, JobSpec, Queue
from antre.observe.readmodels import ReadModels
from antre.engine.scripts import source

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_COMMIT = "907d9b5"
SLOWLOG_US = 500  # commands slower than this are logged (logging every one would slow them)  # main before the pause check went into reserve.lua


def old_reserve_source() -> str:
    text = subprocess.run(["git", "show", f"{BASE_COMMIT}:antre/lua/reserve.lua"], cwd=HERE,
                          check=True, capture_output=True, text=True).stdout
    lib = source("reserve").split("\n-- reserve:")[0]
    return lib + "\n" + text


def fill(q: Queue, n: int, job_type: str = "noop", delay_s: float = 0.0) -> None:
    specs = [JobSpec(job_type, {"i": i, "tenant": i % 2}, f"{job_type}:{i}:{time.time_ns()}",
                     delay_s=delay_s) for i in range(n)]
    for start in range(0, n, 2000):
        q.enqueue_many(specs[start:start + 2000])


def drain(client: redis.Redis, q: Queue, n: int, old: Any | None) -> float:
    """Jobs per second of reserve(100) + ack_many until ``n`` jobs are done."""
    k = q.keys
    done = 0
    t0 = time.perf_counter()
    while done < n:
        if old is None:
            jobs = q.reserve("bench", 100)
        else:
            rows = old(keys=[k.ready, k.inflight, k.stats],
                       args=[k.job_prefix, q.clock(), 100, "bench", *RESERVE_FIELDS])
            jobs = [from_fields({f: v for f, v in zip(RESERVE_FIELDS, row) if v is not None})
                    for row in rows]  # what Queue.reserve did before
        if not jobs:
            break
        q.ack_many([(j, None) for j in jobs])
        done += len(jobs)
    return done / (time.perf_counter() - t0)


def pause_overhead(client: redis.Redis, n: int, rounds: int) -> dict[str, Any]:
    old = client.register_script(old_reserve_source())
    q = Queue(client, "bench")
    pauses = Pauses(client)
    runs: dict[str, list[float]] = {"before (no pause check)": [], "after, nothing paused": [],
                                    "after, another job type paused": []}
    for _ in range(rounds):
        for label in runs:
            client.flushall()
            fill(q, n)
            if label.endswith("type paused"):
                pauses.pause("bench", "other", "bench", "overhead run")
            rate = drain(client, q, n, old if label.startswith("before") else None)
            runs[label].append(rate)
    return {label: {"median_jobs_per_s": round(statistics.median(v)),
                    "runs": [round(x) for x in v]} for label, v in runs.items()}


def _name(entry: dict[str, Any]) -> str:
    cmd = entry["command"]
    return (cmd.decode() if isinstance(cmd, bytes) else str(cmd))[:60]


def slowest(client: redis.Redis) -> dict[str, Any]:
    """The longest commands SLOWLOG saw (its own SLOWLOG/CONFIG calls left out); ``EVALSHA``
    lines are the purge's chunks, the others the commands the scripts ran inside them."""
    entries = [e for e in client.slowlog_get(1_000_000)
               if not _name(e).upper().startswith(("SLOWLOG", "CONFIG"))]
    if not entries:
        return {"commands": 0}
    entries.sort(key=lambda e: -int(e["duration"]))
    scripts = [int(e["duration"]) for e in entries if _name(e).upper().startswith("EVALSHA")]
    scripts.sort()
    return {"commands": len(entries), "max_us": int(entries[0]["duration"]),
            "top5": [[int(e["duration"]), _name(e)] for e in entries[:5]],
            "script_calls": len(scripts),
            "script_p50_us": scripts[len(scripts) // 2] if scripts else 0,
            "script_p99_us": scripts[int(len(scripts) * 0.99) - 1] if scripts else 0}


def purge_case(client: redis.Redis, label: str, n: int, flt: PurgeFilter,
               delay_s: float = 0.0) -> dict[str, Any]:
    client.flushall()
    q = Queue(client, "bench")
    fill(q, n, delay_s=delay_s)
    purger = Purger(client)
    t0 = time.perf_counter()
    counted = purger.count("bench", flt)
    count_s = time.perf_counter() - t0
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()
    client.config_set("slowlog-log-slower-than", SLOWLOG_US)
    t0 = time.perf_counter()
    removed = purger.purge("bench", flt, n)
    purge_s = time.perf_counter() - t0
    client.config_set("slowlog-log-slower-than", 10_000)
    out = {"case": label, "jobs": n, "dry_run": counted, "removed": removed,
           "dry_run_s": round(count_s, 2), "purge_s": round(purge_s, 2), **slowest(client)}
    client.slowlog_reset()
    info = ReadModels(client).queue_info("bench")
    out["left"] = info.ready + info.scheduled
    return out


BUSY = """
local n = 0
for i = 1, tonumber(ARGV[1]) do n = n + redis.call('EXISTS', KEYS[1]) end
return n
"""


def noise_floor(client: redis.Redis, calls: int = 500, per_call_us: float = 700.0
                ) -> dict[str, Any]:
    """The same SLOWLOG measure over a script that only burns ~``per_call_us`` of CPU (about
    a purge chunk's median) and touches nothing: on a shared machine the server is sometimes
    descheduled in the middle of a command, and that time is counted as the command's."""
    busy = client.register_script(BUSY)
    t0 = time.perf_counter()
    busy(keys=["bench:none"], args=[20_000])
    loops = max(1, int(20_000 * per_call_us / 1e6 / max(time.perf_counter() - t0, 1e-6)))
    client.slowlog_reset()
    client.config_set("slowlog-log-slower-than", 0)
    for _ in range(calls):
        busy(keys=["bench:none"], args=[loops])
    client.config_set("slowlog-log-slower-than", 10_000)
    durations = sorted(int(e["duration"]) for e in client.slowlog_get(100_000)
                       if _name(e).upper().startswith("EVALSHA"))
    return {"calls": len(durations), "p50_us": durations[len(durations) // 2],
            "p99_us": durations[int(len(durations) * 0.99) - 1], "max_us": durations[-1]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--purge", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--realtime", action="store_true",
                    help="run the private redis-server under SCHED_FIFO (root), so other "
                         "processes on a shared machine cannot deschedule it mid-command")
    args = ap.parse_args()
    with EmbeddedRedis(tcp=True) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        if args.realtime and server.pid:
            os.sched_setscheduler(server.pid, os.SCHED_FIFO, os.sched_param(10))
        overhead = pause_overhead(client, args.jobs, args.rounds)
        purges = [
            purge_case(client, "ready, every job matches", args.purge, PurgeFilter("ready")),
            purge_case(client, "ready, every other job matches (payload tenant=1)", args.purge,
                       PurgeFilter("ready", field="tenant", value="1")),
            purge_case(client, "scheduled, every job matches", args.purge,
                       PurgeFilter("scheduled"), delay_s=3600),
        ]
        floor = noise_floor(client)
        version = client.info("server")["redis_version"]
    result = {"at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other "
                         "sessions' tests", "redis": version, "pause_overhead": overhead,
              "purge": purges, "noise_floor_noop_script": floor,
              "load_average": os.getloadavg(), "redis_sched_fifo": args.realtime}
    with open(os.path.join(HERE, "incident.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
