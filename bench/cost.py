"""``bench/run --ab REV_A REV_B``: what a job costs, two git revisions side by side in one run.

    bench/run --ab 8c63eed HEAD [--jobs 10000] [--fail-jobs 4000] [--rounds 3] [--md FILE]
    python3 bench/cost.py REV ... (the same; ``.`` is this working tree, uncommitted changes too)

Each revision is extracted with ``git archive`` into ``bench/out/ab/<sha>/`` and run from a
directory whose ``antre``, ``antre_worker``, ``antre_cli`` and ``antre_web`` are that
revision's (and whose ``bench`` is this checkout's: the app and the progress counter are the
same for every revision). The worker is started the same way for every row and revision:
``antre worker bench.apps.cost:app`` (as ``python -m antre_cli worker``), no flags, the default
environment (INFO JSON logs to a file), one process. The jobs of a row are enqueued first with
that revision's ``app.enqueue_many`` (1,000 specs a call), then drained. Rows
(bench/apps/cost.py): ``small`` (the handler returns a small result: the headline as shipped),
``none`` (returns None), ``bury`` (``Permanent`` raised three calls deep: traceback, error
group, timeline) and ``retry`` (``Retryable`` with a 10-minute backoff: each job retried once).
Runs are interleaved (round 1: small A, small B, none A, none B, ...; round 2 ...) on one
private Redis, so the machine's drift touches both revisions alike; the median of the rounds is
kept.

Per run, measured from the first job finished to the last (start-up left out): jobs/s (wall:
noisy on a shared machine), the worker's CPU µs per job (psutil: the worker's process tree),
the Redis server's CPU µs per job (``INFO cpu`` used_cpu_user + used_cpu_sys) while the worker
drains, and while the jobs were enqueued (the fill), commands per job (commands inside Lua
included). The CPU figures are far less sensitive to other load than the wall rates.

Dead-job bytes: ``--dead-jobs`` jobs with a 2 KB payload each fail permanently (the ``bury``
row's handler) in the same worker; then ``MEMORY USAGE`` (SAMPLES 0) of each dead job's hash
plus its timeline, averaged, and ``used_memory`` after minus before divided by the jobs (what
the indexes, error groups and allocator add too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib import progress  # noqa: E402

APP = "bench.apps.cost:app"
ROWS = ("small", "none", "bury", "retry")
LINKS = {"antre": "antre", "antre_worker": "worker/antre_worker", "antre_cli": "antre_cli",
         "antre_web": "webapp/antre_web", "antre_demo": "antre_demo"}

FILL = r"""
import sys, uuid
from bench.apps.cost import app
kind, n, pad = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
run = uuid.uuid4().hex[:6]
note = {"note": "x" * pad} if pad else {}
specs = [app.spec(kind, {"i": i, **note}, idempotency_key=f"{kind}:{run}:{i}") for i in range(n)]
for s in range(0, n, 1000):
    app.enqueue_many(specs[s:s + 1000])
"""


def tree(rev: str) -> str:
    """The directory to run ``rev`` from (``.``: this working tree as it is)."""
    if rev == ".":
        return _shim(ROOT, os.path.join(ROOT, "bench", "out", "ab", "worktree"))
    sha = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout.strip()
    base = os.path.join(ROOT, "bench", "out", "ab", sha[:12])
    src = os.path.join(base, "src")
    if not os.path.isdir(os.path.join(src, "antre")):
        os.makedirs(src, exist_ok=True)
        archive = subprocess.Popen(["git", "archive", sha], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
        archive.wait()
    return _shim(src, os.path.join(base, "path"))


def _shim(src: str, path: str) -> str:
    os.makedirs(path, exist_ok=True)
    for name, target in {**LINKS, "bench": None}.items():
        link = os.path.join(path, name)
        dest = os.path.join(ROOT, "bench") if target is None else os.path.join(src, target)
        if not os.path.islink(link) and os.path.exists(dest):
            os.symlink(dest, link)
    return path


def _env(url: str, path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ab._NOT_DEFAULT}
    env.update({"BENCH_REDIS_URL": url, "ANTRE_REDIS_URL": url, "PYTHONPATH": path})
    return env


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _snap(client: redis.Redis, cpu: ab.TreeCpu) -> tuple[float, float, int, int]:
    return (cpu.total(), _redis_cpu(client),
            int(client.info("stats")["total_commands_processed"]), progress.read(client)[0])


def fill(url: str, path: str, kind: str, n: int, pad: int = 0) -> float:
    """``n`` jobs of ``kind`` through the revision's ``app.enqueue_many``; Redis CPU s."""
    client = redis.Redis.from_url(url, decode_responses=True)
    before = _redis_cpu(client)
    subprocess.run([sys.executable, "-c", FILL, kind, str(n), str(pad)], cwd=path,
                   env=_env(url, path), check=True)
    spent = _redis_cpu(client) - before
    client.close()
    return spent


def drain(url: str, path: str, n: int, timeout: float = 300) -> dict[str, Any]:
    """``antre worker bench.apps.cost:app`` until ``n`` handlers ran (or ``timeout``)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    log_path = os.path.join(path, "worker.log")
    with open(log_path, "wb") as log:
        p = subprocess.Popen([sys.executable, "-m", "antre_cli", "worker", APP], cwd=path,
                             env=_env(url, path), start_new_session=True, stdout=log, stderr=log)
        cpu = ab.TreeCpu(p.pid)
        deadline, start = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            done = progress.read(client)[0]
            if start is None and done >= 1:
                start = _snap(client, cpu)
            if done >= n or p.poll() is not None:
                break
            time.sleep(0.01)
        time.sleep(0.05)  # the last batch's settle script lands
        end = _snap(client, cpu)
        got = progress.read(client)
        ab.stop([p])
    client.close()
    if start is None or end[3] <= start[3]:
        with open(log_path, "rb") as f:
            raise RuntimeError(f"no job done in {path}: {f.read()[-1500:]!r}")
    jobs = end[3] - start[3]
    done, first, last = got
    return {"done": done, "jobs_per_s": round((done - 1) / max(last - first, 1e-9)),
            "worker_cpu_us": round((end[0] - start[0]) / jobs * 1e6, 1),
            "redis_cpu_us": round((end[1] - start[1]) / jobs * 1e6, 1),
            "commands": round((end[2] - start[2]) / jobs, 2),
            "log_bytes_per_job": round(os.path.getsize(log_path) / max(1, n))}


def one_run(url: str, path: str, kind: str, n: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    client.close()
    enq = fill(url, path, kind, n)
    out = drain(url, path, n)
    out["enqueue_redis_cpu_us"] = round(enq / n * 1e6, 1)
    out["redis_cpu_total_us"] = round(out["redis_cpu_us"] + out["enqueue_redis_cpu_us"], 1)
    return out


def dead_bytes(url: str, path: str, n: int, pad: int = 2000) -> dict[str, Any]:
    """Bytes per dead job (2 KB payloads), ``MEMORY USAGE`` and ``used_memory``."""
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    client.memory_purge()
    before = int(client.info("memory")["used_memory"])
    fill(url, path, "bury", n, pad)
    drain(url, path, n)
    time.sleep(0.3)
    tag = next(k for k in client.scan_iter("*:dead", count=1000)).removesuffix("dead")
    ids = client.zrange(tag + "dead", 0, -1)
    client.delete("bench:progress")
    after = int(client.info("memory")["used_memory"])
    pipe = client.pipeline(transaction=False)
    for i in ids:
        pipe.memory_usage(tag + "job:" + i, samples=0)
        pipe.memory_usage(tag + "tl:" + i, samples=0)
    sizes = pipe.execute()
    client.close()
    hashes, tls = sizes[0::2], sizes[1::2]
    return {"dead": len(ids), "payload_bytes": pad,
            "job_hash_bytes": round(statistics.fmean(x or 0 for x in hashes)),
            "timeline_bytes": round(statistics.fmean(x or 0 for x in tls)),
            "hash_plus_timeline_bytes": round(statistics.fmean(
                (a or 0) + (b or 0) for a, b in zip(hashes, tls))),
            "used_memory_per_dead_job": round((after - before) / max(1, n))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/run --ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revs", nargs="+", help="git revisions ('.': this working tree)")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs per success run")
    p.add_argument("--fail-jobs", type=int, default=4_000, help="jobs per bury / retry run")
    p.add_argument("--dead-jobs", type=int, default=2_000, help="jobs of the dead-bytes run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "cost-ab.json"))
    p.add_argument("--md", default=None, help="also write the tables here")
    args = p.parse_args(argv)
    paths = {rev: tree(rev) for rev in args.revs}
    rows = [r for r in args.rows.split(",") if r]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        rev: {row: [] for row in rows} for rev in args.revs}
    dead: dict[str, dict[str, Any]] = {}
    started = time.time()
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        for rnd in range(args.rounds):
            for row in rows:
                n = args.jobs if row in ("small", "none") else args.fail_jobs
                for rev, path in paths.items():
                    r = one_run(server.url, path, row, n)
                    runs[rev][row].append(r)
                    ab.log(f"round {rnd + 1} {row} {rev}: {json.dumps(r)}")
        for rev, path in paths.items():
            dead[rev] = dead_bytes(server.url, path, args.dead_jobs)
            ab.log(f"dead bytes {rev}: {json.dumps(dead[rev])}")
    result = {"command": "bench/run --ab " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "elapsed_s": round(time.time() - started),
              "loadavg": [round(x, 2) for x in os.getloadavg()],
              "revs": {rev: _describe(rev) for rev in args.revs},
              "medians": {rev: {row: _median(rs) for row, rs in by.items()}
                          for rev, by in runs.items()},
              "dead": dead, "runs": runs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    text = render(result)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0


def _describe(rev: str) -> str:
    if rev == ".":
        return "this working tree"
    return subprocess.run(["git", "log", "-1", "--format=%h %s", rev], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()[:100]


def _median(rs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in rs[0] if isinstance(rs[0][k], (int, float))]
    out: dict[str, Any] = {k: statistics.median(r[k] for r in rs) for k in keys}
    out["jobs_per_s_runs"] = [r["jobs_per_s"] for r in rs]
    return out


def render(res: dict[str, Any]) -> str:
    med, dead = res["medians"], res["dead"]
    out = [f"Generated by `{res['command']}` on {res['date']} ({res['elapsed_s']} s, load "
           f"average at the end {res['loadavg']}); medians of the rounds, revisions "
           "interleaved.", ""]
    out += [f"- `{rev}`: {d}" for rev, d in res["revs"].items()] + [""]
    out += ["| row | rev | jobs/s (runs) | worker CPU µs/job | Redis CPU µs/job, worker side "
            "| Redis CPU µs/job, enqueue | Redis CPU µs/job, total | Redis cmds/job "
            "| vs `small` jobs/s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in next(iter(med.values())):
        for rev, by in med.items():
            r, base = by[row], by.get("small", {}).get("jobs_per_s") or 0
            ratio = f"{r['jobs_per_s'] / base:.2f}" if base else "-"
            out.append(f"| {row} | `{rev}` | {round(r['jobs_per_s']):,} {r['jobs_per_s_runs']} "
                       f"| {r['worker_cpu_us']} | {r['redis_cpu_us']} "
                       f"| {r['enqueue_redis_cpu_us']} | {r['redis_cpu_total_us']} "
                       f"| {r['commands']} | {ratio} |")
    out += ["", "| rev | dead jobs | job hash bytes | timeline bytes | hash + timeline "
            "| used_memory / dead job |", "|---|---:|---:|---:|---:|---:|"]
    for rev, d in dead.items():
        out.append(f"| `{rev}` | {d['dead']} | {d['job_hash_bytes']} | {d['timeline_bytes']} "
                   f"| {d['hash_plus_timeline_bytes']} | {d['used_memory_per_dead_job']} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
