"""I/O-bound jobs side by side: each job waits 50 ms (``asyncio.sleep`` in async handlers,
``time.sleep`` in sync ones), N jobs (default 20,000) on ONE worker process, for Antre and its
peers in their documented configuration for such work (concurrency raised).

    PYTHONPATH=. python3 bench/io_bound.py [--jobs 20000] [--rows antre-async,arq,...]

For each row: a private Redis is flushed, the N jobs are enqueued with the system's own client,
one worker process is started, and the time from the first job finished to the last one is
taken through ``bench.lib.progress`` (no round trip per job). CPU per job is the worker process
tree's user+system CPU time between the first and the last job finished, divided by the jobs
finished in between (start-up is not counted). Peers run in their own virtualenvs under
``bench/.venvs`` (created when missing, as ``bench/lib/peer_bench.py`` does). Results go to
``bench/results/io-bound.json`` and ``bench/results/io-bound.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import psutil
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from antre.engine.queue import JobSpec, Queue  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib import peer_bench as pb  # noqa: E402
from bench.lib import progress  # noqa: E402

CONCURRENCY = 500
THREADS_SYNC = 128
ROWS: dict[str, dict[str, Any]] = {
    "antre-async": {
        "job_type": "io_async",
        "args": ["--threads", "2", "--concurrency", str(CONCURRENCY)],
        "note": f"async def handler, --concurrency {CONCURRENCY} on the worker's event loop, "
                "--threads 2",
    },
    "antre-sync": {
        "job_type": "io_sync",
        "args": ["--threads", str(THREADS_SYNC)],
        "note": f"sync handler, --threads {THREADS_SYNC}",
    },
    "arq": {
        "venv": "arq", "pip": ["arq"], "module": "arq_io",
        "cmd": ["arq", "arq_io.WorkerSettings"],
        "note": f"max_jobs={CONCURRENCY} (default 10), poll_delay=0.01 s",
    },
    "saq": {
        "venv": "saq", "pip": ["saq", "typing_extensions"], "module": "saq_io",
        "cmd": ["saq", "saq_io.settings", "--workers", "1"],
        "note": f"concurrency={CONCURRENCY} (default 10)",
    },
    "taskiq": {
        "venv": "taskiq", "pip": ["taskiq", "taskiq-redis"], "module": "taskiq_io",
        "cmd": ["taskiq", "worker", "taskiq_io:broker", "--workers", "1",
                "--max-async-tasks", str(CONCURRENCY)],
        "note": f"taskiq-redis ListQueueBroker, --workers 1 --max-async-tasks {CONCURRENCY}",
    },
    "dramatiq": {
        "venv": "dramatiq", "pip": ["dramatiq[redis]"], "module": "dramatiq_io",
        "cmd": ["dramatiq", "dramatiq_io", "--processes", "1", "--threads", str(THREADS_SYNC)],
        "note": f"Redis broker, --processes 1 --threads {THREADS_SYNC} (sync sleep)",
    },
}


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _measure(client: redis.Redis, proc: subprocess.Popen, n: int, timeout_s: float
             ) -> dict[str, Any]:
    """Wait for the first job done (CPU baseline), then for all (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    first = (0, 0.0, 0.0)
    while time.monotonic() < deadline and proc.poll() is None:
        first = progress.read(client)
        if first[0] >= 1:
            break
        time.sleep(0.01)
    cpu0 = _tree_cpu_s(proc.pid)
    got = first
    while time.monotonic() < deadline and proc.poll() is None:
        got = progress.read(client)
        if got[0] >= n:
            break
        time.sleep(0.02)
    cpu1 = _tree_cpu_s(proc.pid)
    done = got[0] - first[0]
    out = ab._result(n, got, 1)
    out["cpu_ms_per_job"] = round((cpu1 - cpu0) * 1000 / done, 3) if done > 0 else None
    out["cpu_cores_busy"] = round((cpu1 - cpu0) / max(got[2] - got[1], 1e-9), 2)
    if got[0] < n:
        out["error"] = f"only {got[0]}/{n} done within {timeout_s:.0f} s"
    return out


def _log(name: str) -> Any:
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    return open(os.path.join(HERE, "out", f"io-{name}.log"), "ab")  # noqa: SIM115


def run_antre(url: str, name: str, n: int, timeout_s: float) -> dict[str, Any]:
    row = ROWS[name]
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    q, run = Queue(client, "default"), uuid.uuid4().hex[:6]
    for start in range(0, n, 2_000):
        q.enqueue_many([JobSpec(row["job_type"], {"i": i}, f"io:{run}:{i}")
                        for i in range(start, min(n, start + 2_000))])
    cmd = [sys.executable, "-m", "antre_worker", "worker", "bench.apps.io:app", "--processes", "1",
           "--no-scheduler", *row["args"]]
    with _log(name) as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=ab._env(url), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=log)
        out = _measure(client, proc, n, timeout_s)
        ab.stop([proc])
    client.close()
    return out


def run_peer(url: str, name: str, n: int, timeout_s: float) -> dict[str, Any]:
    row = ROWS[name]
    pb.ensure_venv(row["venv"], row["pip"])
    bindir = os.path.join(pb.VENVS, row["venv"], "bin")
    env = ab._env(url, BENCH_CONCURRENCY=str(CONCURRENCY))
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(HERE, "peers")])
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    mod = row["module"]
    subprocess.run([pb.venv_python(row["venv"]), "-c", f"import {mod}; {mod}.enqueue({n})"],
                   cwd=os.path.join(HERE, "peers"), env=env, check=True)
    cmd = [os.path.join(bindir, row["cmd"][0]), *row["cmd"][1:]]
    with _log(name) as log:
        proc = subprocess.Popen(cmd, cwd=os.path.join(HERE, "peers"), env=env,
                                start_new_session=True, stdout=log, stderr=log)
        out = _measure(client, proc, n, timeout_s)
        ab.stop([proc])
    client.close()
    out["version"] = pb.version(row["venv"], row["venv"])
    return out


def render(results: dict[str, Any], command: str) -> str:
    lines = [
        "# I/O-bound jobs: 50 ms of waiting per job, one worker process",
        "",
        f"Command: `{command}` ({results['when']}, {results['machine']}). Each job waits "
        "50 ms (`asyncio.sleep` in async handlers, `time.sleep` in sync ones); "
        f"{results['jobs']:,} jobs enqueued first, then one worker process; jobs/s from the "
        "first job finished to the last; CPU per job is the worker process tree's user+system "
        "CPU over the same span divided by the jobs finished in it.",
        "",
        "| system | configuration | jobs/s | CPU ms per job | cores busy | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, r in results["rows"].items():
        jobs = r.get("jobs_per_s", 0)
        lines.append(f"| {name}{' ' + r['version'] if r.get('version') else ''} | "
                     f"{ROWS[name]['note']} | {jobs:,} | {r.get('cpu_ms_per_job')} | "
                     f"{r.get('cpu_cores_busy')} | {r.get('error', '')} |")
    lines += ["", "The ceiling of 50 ms jobs with C in flight is 20 x C jobs/s (10,000 jobs/s "
              f"at C = {CONCURRENCY}); past it the per-job CPU of the worker decides.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/io_bound.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per row at most")
    p.add_argument("--out", default=os.path.join(HERE, "results", "io-bound.json"))
    p.add_argument("--md", default=os.path.join(HERE, "results", "io-bound.md"))
    args = p.parse_args(argv)
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    rows: dict[str, Any] = {}
    try:
        for name in [r for r in args.rows.split(",") if r]:
            ab.log(f"io-bound: {name}")
            fn = run_peer if "venv" in ROWS[name] else run_antre
            rows[name] = fn(server.url, name, args.jobs, args.timeout)
            ab.log(f"  {rows[name]}")
    finally:
        server.stop()
    results = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "machine": f"{os.cpu_count()} cores", "jobs": args.jobs, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    command = "PYTHONPATH=. python3 bench/io_bound.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    with open(args.md, "w") as f:
        f.write(render(results, command))
    print(render(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
