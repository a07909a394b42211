"""Flow overhead (issue 26): chords of 100 no-op children (and their no-op callback) drained by
``antre worker app:app`` as shipped (no flags, INFO JSON logs), against the same number of
plain no-op jobs in batches of 100, the two taking turns in one run (the order alternating
by round) so the VM's drift touches both alike. The figure is jobs done per second from the first job done to the last (a chord's
callback counts as one of its jobs); target: chords at >= 50% of plain.

    python bench/flows.py                 # 100 chords of 100 (10,100 jobs) vs 10,000 plain, 3 rounds
    python bench/flows.py --chords 20 --reps 1   # a smoke run

``bench/run`` runs the same row (``flows``) and writes it into bench/results/run.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib import progress  # noqa: E402

CHILDREN = 100


def fill_chords(url: str, chords: int, children: int = CHILDREN) -> int:
    """``chords`` chords of ``children`` no-op jobs and a no-op callback; returns the jobs."""
    app = ab.producer(url)
    run = uuid.uuid4().hex[:6]
    for c in range(chords):
        kids = [app.spec("noop", {"i": i}, idempotency_key=f"f:{run}:{c}:{i}")
                for i in range(children)]
        app.chord(kids, app.spec("noop", {"cb": c}, idempotency_key=f"f:{run}:{c}:cb")
                  ).enqueue()
    return chords * (children + 1)


def fill_plain(url: str, jobs: int, batch: int = CHILDREN) -> int:
    """``jobs`` plain no-op jobs, ``batch`` per ``enqueue_many`` (as a chord's children go)."""
    app = ab.producer(url)
    run = uuid.uuid4().hex[:6]
    for start in range(0, jobs, batch):
        app.enqueue_many([app.spec("noop", {"i": i}, idempotency_key=f"p:{run}:{i}")
                          for i in range(start, min(start + batch, jobs))])
    return jobs


def drain(url: str, kind: str, chords: int) -> dict[str, Any]:
    """Fill (before the worker starts), then one ``antre worker app:app`` drains it."""
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    n = fill_chords(url, chords) if kind == "chord" else fill_plain(url, chords * CHILDREN)
    before = _redis_cpu_s(client)
    log_path = os.path.join(ROOT, "bench", "out", f"flows-{kind}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "wb") as log:
        p = subprocess.Popen(ab.worker_cmd(), cwd=ROOT, env=ab._env(url),
                             start_new_session=True, stdout=log, stderr=log)
        cpu = ab.TreeCpu(p.pid)
        got = ab.wait_progress(client, n, [p], 300, cpu)
        cpu_us = cpu.us_per_job(progress.read(client)[0])
        ab.stop([p])
    redis_us = round((_redis_cpu_s(client) - before) / max(got[0], 1) * 1e6, 1)
    out = ab._result(n, got, 1, kind=kind, worker_cpu_us_per_job=cpu_us,
                     redis_cpu_us_per_job=redis_us, command="antre worker app:app")
    if got[0] < n:
        out["error"] = f"only {got[0]}/{n} done"
    client.close()
    return out


def _redis_cpu_s(client: redis.Redis) -> float:
    """The Redis server's CPU seconds so far (user + sys), the drain's share read as a
    difference (it includes the worker's reads and writes of the jobs, not the fill)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def compare(url: str, chords: int, reps: int) -> dict[str, Any]:
    """Chords and plain jobs taking turns, ``reps`` rounds; the median of each and the ratio."""
    runs: dict[str, list[dict[str, Any]]] = {"chord": [], "plain": []}
    for rep in range(reps):  # the order alternates: neither always runs first in a round
        for kind in ("chord", "plain") if rep % 2 == 0 else ("plain", "chord"):
            runs[kind].append(drain(url, kind, chords))
            ab.log(f"flows {kind}: {runs[kind][-1].get('jobs_per_s')} jobs/s")
    kept = {kind: _median(r) for kind, r in runs.items()}
    plain = kept["plain"].get("jobs_per_s", 0) or 0
    ratio = (kept["chord"].get("jobs_per_s", 0) or 0) / plain if plain else 0.0
    return {"chords": chords, "children": CHILDREN, "reps": reps, **kept,
            "ratio": round(ratio, 3), "target": 0.5, "met": ratio >= 0.5}


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r.get("jobs_per_s", 0))
    kept = dict(ordered[(len(ordered) - 1) // 2])
    kept["runs"] = [r.get("jobs_per_s", 0) for r in runs]
    return kept


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/flows.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chords", type=int, default=100)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ab.RESULTS, "flows.json"))
    args = p.parse_args(argv)
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        result = compare(server.url, args.chords, args.reps)
    finally:
        server.stop()
    result["command"] = "python bench/flows.py " + " ".join(argv if argv is not None
                                                           else sys.argv[1:])
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("ratio", "met")}), result["chord"]["runs"],
          result["plain"]["runs"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
