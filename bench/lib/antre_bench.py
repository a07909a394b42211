"""Antre's side of ``bench/run``: the Redis ceiling, enqueue, no-op processing (raw Queue loop
and the real worker), idempotency + lock, latency at a paced rate, round trips per job, memory.

Every function takes the private server's URL and returns a dict of figures. Worker runs are
what a user starts: ``antre worker bench.apps.noop:app`` (as ``python -m antre_cli worker
...``) with no flags and the default environment (INFO JSON logs, scheduler and sweeper on)
unless a row names what it changes; jobs are produced with ``app.enqueue`` /
``app.enqueue_many`` of the same app. Completion is seen through ``bench.lib.progress`` (no extra
round trip per job); the worker's CPU per job is read from its process tree (``TreeCpu``).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import redis

import psutil

from antre import Antre
from antre.engine.queue import JobSpec, Queue
from bench.lib import progress
from bench.lib.tree import code_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = "bench.apps.noop:app"


HERE = os.path.join(ROOT, "bench")
RESULTS = os.path.join(HERE, "results")  # what the harnesses write: one document each
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

# what a user's shell would not have: the bench's own ANTRE_* and BENCH_* settings
_NOT_DEFAULT = ("ANTRE_LOG_LEVEL", "ANTRE_LOG_FORMAT", "ANTRE_DATABASE_URL",
                "BENCH_DATABASE_URL", "BENCH_LOCK", "BENCH_WRITE", "BENCH_COUNT_RTT")


def _env(url: str, **extra: str | None) -> dict[str, str]:
    """The default environment plus the server's URL (and what ``extra`` sets); its
    PYTHONPATH runs this tree's code (``code_path``)."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_DEFAULT}
    env.update({"BENCH_REDIS_URL": url, "ANTRE_REDIS_URL": url, "PYTHONPATH": code_path()})
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


class TreeCpu:
    """CPU seconds (user + system) of a process and all its descendants, read between two
    moments: ``start()`` when the first job finished, ``stop()`` when the last did."""

    def __init__(self, *pids: int) -> None:
        self.roots = [psutil.Process(pid) for pid in pids]
        self.seen: dict[int, float] = {}
        self.at_start: float | None = None
        self.jobs_at_start = 0

    def total(self) -> float:
        procs = []
        for root in self.roots:
            try:
                procs += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for proc in procs:
            try:
                t = proc.cpu_times()
                self.seen[proc.pid] = t.user + t.system  # a process that exits keeps its last
            except psutil.NoSuchProcess:
                pass
        return sum(self.seen.values())

    def start(self, jobs_done: int) -> None:
        self.at_start, self.jobs_at_start = self.total(), jobs_done

    def us_per_job(self, jobs_done: int) -> float | None:
        if self.at_start is None or jobs_done <= self.jobs_at_start:
            return None
        return round((self.total() - self.at_start) / (jobs_done - self.jobs_at_start) * 1e6)


def producer(url: str) -> Antre:
    """The bench app (``bench.apps.noop:app``) as a producer imports it: jobs go in through
    ``app.enqueue`` / ``app.enqueue_many`` with the handlers' defaults."""
    os.environ["BENCH_REDIS_URL"] = url  # the module reads it when imported
    import bench.apps.noop as noop
    if noop.app.redis_url != url:  # imported before, for another server
        noop = importlib.reload(noop)
    return noop.app


def flush(client: redis.Redis) -> None:
    client.flushall()
    client.config_resetstat()


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in client.info("commandstats").items()}


def ceiling(url: str, n: int = 20_000, batch: int = 100) -> dict[str, Any]:
    """Redis round trips per second from one Python thread: PING one at a time, then PINGs
    pipelined ``batch`` at a time (commands per second)."""
    client = redis.Redis.from_url(url)
    client.ping()
    t = time.perf_counter()
    for _ in range(n):
        client.ping()
    single = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(n * 5 // batch):
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.ping()
        pipe.execute()
    piped = n * 5 / (time.perf_counter() - t)
    client.close()
    return {"ping_per_s": round(single), "pipelined_ping_per_s": round(piped),
            "pipeline_batch": batch}


def _specs(app: Antre, n: int, prefix: str = "k", lock: bool = False,
           job_type: str = "noop", groups: int = 0) -> list[JobSpec]:
    """``groups``: jobs spread round robin over that many groups (``group="g<n>"``, issue 23's
    fair shares); 0: no group, as a plain job."""
    run = uuid.uuid4().hex[:6]
    return [app.spec(job_type, {"i": i}, idempotency_key=f"{prefix}:{run}:{i}",
                     lock_key=f"lock:{i}" if lock else None,
                     **({"group": f"g{i % groups}"} if groups else {})) for i in range(n)]


def enqueue(url: str, n_single: int = 5_000, n_many: int = 50_000, chunk: int = 1_000
            ) -> dict[str, Any]:
    """``app.enqueue`` one job at a time, then ``app.enqueue_many`` in chunks: jobs/s (wall)
    and the producer's CPU µs per job."""
    client = redis.Redis.from_url(url, decode_responses=True)
    app = producer(url)
    flush(client)
    app.enqueue("noop", {}, idempotency_key="warm")  # connect and load the script first
    run = uuid.uuid4().hex[:6]
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(n_single):
        app.enqueue("noop", {"i": i}, idempotency_key=f"s:{run}:{i}")
    single, single_cpu = time.perf_counter() - t, time.process_time() - cpu
    flush(client)
    specs = _specs(app, n_many)
    t, cpu = time.perf_counter(), time.process_time()
    for start in range(0, n_many, chunk):
        app.enqueue_many(specs[start:start + chunk])
    many, many_cpu = time.perf_counter() - t, time.process_time() - cpu
    flush(client)
    client.close()
    return {"enqueue_per_s": round(n_single / single),
            "enqueue_cpu_us": round(single_cpu / n_single * 1e6, 1),
            "enqueue_many_per_s": round(n_many / many),
            "enqueue_many_cpu_us": round(many_cpu / n_many * 1e6, 1),
            "enqueue_many_chunk": chunk, "n_single": n_single, "n_many": n_many}


def fill(url: str, n: int, lock: bool = False, prefix: str = "k", job_type: str = "noop",
         groups: int = 0) -> None:
    """``n`` no-op jobs through ``app.enqueue_many``, 2,000 per call (in ``groups`` groups)."""
    app = producer(url)
    specs = _specs(app, n, prefix=prefix, lock=lock, job_type=job_type, groups=groups)
    for start in range(0, n, 2_000):
        app.enqueue_many(specs[start:start + 2_000])


def wait_progress(client: redis.Redis, n: int, procs: list[subprocess.Popen], timeout: float,
                  cpu: TreeCpu | None = None) -> tuple[int, float, float]:
    """Wait for ``n`` jobs done (or the workers gone, or ``timeout``); ``cpu`` is started
    when the first job is seen done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = progress.read(client)
        if cpu is not None and cpu.at_start is None and got[0] >= 1:
            cpu.start(got[0])
        if got[0] >= n:
            return got
        if procs and all(p.poll() is not None for p in procs):
            time.sleep(0.1)
            return progress.read(client)
        time.sleep(0.05)
    return progress.read(client)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def _result(n: int, got: tuple[int, float, float], procs: int, **more: Any) -> dict[str, Any]:
    done, first, last = got
    secs = max(last - first, 1e-9)
    return {"n": n, "done": done, "seconds": round(secs, 3),
            "jobs_per_s": round((done - 1) / secs) if done > 1 else 0,
            "per_process": round((done - 1) / secs / procs) if done > 1 else 0,
            "processes": procs, **more}


RAW_CONSUMER = r"""
import os, sys, redis
from antre.engine.queue import Queue
from bench.lib import progress
url, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from antre.observe.metrics import record_duration
client = redis.Redis.from_url(url, decode_responses=True)
q = Queue(client, "default")
wid = f"raw:{os.getpid()}"
idle = 0
while idle < 20:
    jobs = q.reserve(wid, count=count)
    if not jobs:
        idle += 1
        continue
    idle = 0
    if mode == "ack_many":
        for job in jobs:
            progress.done()   # the no-op "handler"
        lost = q.ack_many([(job, None) for job in jobs])
        assert not lost, lost
        continue
    for job in jobs:           # the executor's pattern: one ack per job (+ its metrics)
        progress.done()
        if mode == "ack+metrics":
            record_duration(client, "default", job.type, "processing", 0)
            record_duration(client, "default", job.type, "latency", 1)
        q.ack(job)
progress.flush_now()
"""


def raw_loop(url: str, n: int, procs: int = 1, count: int = 100, mode: str = "ack_many"
             ) -> dict[str, Any]:
    """The floor of the executor's cost: reserve(count) + settle in a loop, no threads.
    ``mode``: ``ack_many`` (one pipeline per batch), ``ack`` (one ack per job, as the
    executor does), ``ack+metrics`` (plus the executor's two duration-histogram pipelines)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    fill(url, n)
    before = commandstats(client)
    ps = [subprocess.Popen([sys.executable, "-c", RAW_CONSUMER, url, str(count), mode], cwd=ROOT,
                           env=_env(url), start_new_session=True) for _ in range(procs)]
    cpu = TreeCpu(*(p.pid for p in ps))
    got = wait_progress(client, n, ps, timeout=300, cpu=cpu)
    cpu_us = cpu.us_per_job(progress.read(client)[0])
    for p in ps:
        p.wait(60)
    after = commandstats(client)
    # script calls: FCALL (Redis Functions, as shipped) or EVALSHA (a server without them)
    evalsha = (after.get("evalsha", 0) + after.get("fcall", 0)
               - before.get("evalsha", 0) - before.get("fcall", 0))
    out = _result(n, got, procs, reserve_count=count, settle=mode, worker_cpu_us_per_job=cpu_us,
                  evalsha_per_job=round(evalsha / n, 3))
    client.close()
    return out


def worker_cmd(args: Sequence[str] = ()) -> list[str]:
    """``antre worker bench.apps.noop:app`` plus ``args`` (run as ``python -m antre_cli``, the
    console script's module, so the worktree's code is the one that runs)."""
    return [sys.executable, "-m", "antre_cli", "worker", APP, *args]


def describe(args: Sequence[str] = (), env: dict[str, str] | None = None) -> str:
    """The command line a user would type for this configuration."""
    prefix = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    return " ".join(x for x in (prefix, "antre worker app:app", *args) if x)


def _processes(args: Sequence[str]) -> int:
    return int(args[list(args).index("--processes") + 1]) if "--processes" in args else 1


def worker_run(url: str, n: int, args: Sequence[str] = (), env: dict[str, str] | None = None,
               database_url: str | None = None, lock: bool = False, count_rtt: bool = False,
               timeout: float = 300, write: bool = False, job_type: str = "noop",
               groups: int = 0) -> dict[str, Any]:
    """The real worker pool as a user starts it (``antre worker app:app`` + ``args``, the
    default environment + ``env``), draining ``n`` jobs (of ``job_type``: ``noop`` returns a
    small result, ``noop_none`` None; spread over ``groups`` groups when > 0) enqueued before
    it starts."""
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    fill(url, n, lock=lock, job_type=job_type, groups=groups)
    before, cmds_before = commandstats(client), client.info("stats")["total_commands_processed"]
    # not --burst: a burst worker exits while snoozed jobs (database busy) are still scheduled
    full_env = _env(url, BENCH_DATABASE_URL=database_url,
                    BENCH_COUNT_RTT="1" if count_rtt else None,
                    BENCH_WRITE="1" if write else None, **(env or {}))
    log_path = os.path.join(ROOT, "bench", "out", "worker-run.log")
    with open(log_path, "wb") as log:  # a file, not a pipe: a full pipe would stall the worker
        p = subprocess.Popen(worker_cmd(args), cwd=ROOT, env=full_env, start_new_session=True,
                             stdout=log, stderr=log)
        cpu = TreeCpu(p.pid)
        got = wait_progress(client, n, [p], timeout, cpu)
        cpu_us = cpu.us_per_job(progress.read(client)[0])
        stop([p])
    with open(log_path, "rb") as f:
        err = f.read()[-2000:].decode(errors="replace")
    after, cmds_after = commandstats(client), client.info("stats")["total_commands_processed"]
    # script calls: FCALL (Redis Functions, as shipped) or EVALSHA (a server without them)
    evalsha = (after.get("evalsha", 0) + after.get("fcall", 0)
               - before.get("evalsha", 0) - before.get("fcall", 0))
    extra: dict[str, Any] = {
        "command": describe(args, env), "worker_cpu_us_per_job": cpu_us,
        "evalsha_per_job": round(evalsha / n, 3),
        "redis_commands_per_job": round((cmds_after - cmds_before) / n, 2),
        "log_bytes_per_job": round(os.path.getsize(log_path) / n),
        "database": _db_kind(database_url), "lock_per_job": lock, "row_written": write,
        "groups": groups}
    if count_rtt:
        sends = sum(int(v) for v in client.hgetall("bench:rtt").values())
        extra["round_trips_per_job"] = round(sends / n, 3)
    if got[0] < n:
        extra["error"] = f"only {got[0]}/{n} done; stderr tail: {err}"
    client.close()
    return _result(n, got, _processes(args), **extra)


def _db_kind(url: str | None) -> str:
    if not url:
        return "none"
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def pg_schema_url(base: str) -> tuple[str, Any]:
    """A fresh schema on ``base``; returns (url, drop)."""
    import psycopg
    libpq = base.replace("postgresql+psycopg://", "postgresql://")
    admin = psycopg.connect(libpq, autocommit=True, connect_timeout=5)
    schema = f"antre_bench_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    url = f"{base}{sep}options=-csearch_path%3D{schema}&application_name={schema}"

    def drop() -> None:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = %s AND pid <> pg_backend_pid()", (schema,))
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
    return url, drop


def latency(url: str, rate: float = 200.0, seconds: float = 10.0, args: Sequence[str] = (),
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """p50/p99 enqueue-to-start: ``antre worker app:app`` (+ ``args``), a producer paced at
    ``rate`` calling ``app.enqueue``; the handler records when it started."""
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    app = producer(url)
    with open(os.path.join(ROOT, "bench", "out", "latency.log"), "wb") as log:
        p = subprocess.Popen(worker_cmd(args), cwd=ROOT, env=_env(url, **(env or {})),
                             start_new_session=True, stdout=log, stderr=log)
        # warm up: the worker is up when it ran one job
        app.enqueue("latency", {"t": time.time()}, idempotency_key="warm")
        if wait_samples(client, 1):
            client.delete("bench:latency")
            n = int(rate * seconds)
            paced(n, rate, lambda i: app.enqueue("latency", {"t": time.time()},
                                                 idempotency_key=f"lat:{i}"))
            wait_samples(client, n)
        stop([p])
    out = latency_figures(client, rate)
    client.close()
    return {**out, "command": describe(args, env)}


def paced(n: int, rate: float, send: Any) -> None:
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)


def wait_samples(client: redis.Redis, n: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while client.llen("bench:latency") < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return client.llen("bench:latency") >= n


def latency_figures(client: redis.Redis, rate: float) -> dict[str, Any]:
    """Percentiles of the enqueue-to-start samples (ms) in ``bench:latency``."""
    samples = sorted(float(x) for x in client.lrange("bench:latency", 0, -1))
    return {**_percentiles(samples, rate), "samples": samples}


def _percentiles(samples: list[float], rate: float) -> dict[str, Any]:
    if not samples:
        return {"error": "no samples", "rate_per_s": rate}
    pick = lambda f: round(samples[min(len(samples) - 1, int(f * len(samples)))], 2)
    return {"rate_per_s": rate, "n": len(samples), "p50_ms": pick(0.50), "p90_ms": pick(0.90),
            "p99_ms": pick(0.99), "max_ms": round(samples[-1], 2),
            "mean_ms": round(statistics.fmean(samples), 2)}


def pooled_latency(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The percentiles of several rounds' samples together (``latency_figures`` of each round,
    whose raw ``samples`` are dropped here), with each round's own p99."""
    samples = sorted(x for r in runs for x in r.get("samples", []))
    rate = runs[0].get("rate_per_s", 200.0) if runs else 200.0
    out = {**_percentiles(samples, rate), "rounds": len(runs),
           "round_p99_ms": [r.get("p99_ms") for r in runs]}
    errors = [r["error"] for r in runs if r.get("error")]
    if errors:
        out["error"] = "; ".join(errors)
    if runs and runs[0].get("command"):
        out["command"] = runs[0]["command"]
    return out


def memory(url: str, n: int, depth: int = 20_000, sample_s: float = 0.5) -> dict[str, Any]:
    """RSS of the worker process of ``antre worker app:app`` (defaults) while it runs ``n``
    no-op jobs; a producer keeps the ready list at most ``depth`` long so Redis memory stays
    flat."""
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    q = Queue(client, "default")
    fill(url, min(n, depth))
    produced = min(n, depth)
    p = subprocess.Popen(worker_cmd(), cwd=ROOT, env=_env(url), start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples: list[tuple[int, int]] = []  # (jobs done, rss bytes)
    child = None
    t0 = time.monotonic()
    while True:
        done = progress.read(client)[0]
        if child is None:
            kids = psutil.Process(p.pid).children(recursive=True)
            child = kids[0] if kids else None
        if child is not None and done:
            try:
                samples.append((done, child.memory_info().rss))
            except psutil.NoSuchProcess:
                break
        if done >= n or time.monotonic() - t0 > 3600:
            break
        if produced < n and client.llen(q.keys.ready) < depth // 2:
            k = min(depth // 2, n - produced)
            fill(url, k, prefix=f"m{produced}")
            produced += k
        time.sleep(sample_s)
    stop([p])
    client.close()
    if not samples:
        return {"error": "no samples", "n": n}
    mb = lambda b: round(b / 2**20, 1)
    # "start" is after warm-up: the first sample past 5% of the jobs
    warm = next((s for s in samples if s[0] >= n * 0.05), samples[0])
    mid = min(samples, key=lambda s: abs(s[0] - n / 2))
    return {"n": n, "done": samples[-1][0], "rss_start_mb": mb(warm[1]), "rss_mid_mb": mb(mid[1]),
            "rss_end_mb": mb(samples[-1][1]), "rss_max_mb": mb(max(s[1] for s in samples)),
            "samples": len(samples), "seconds": round(time.monotonic() - t0, 1)}


if __name__ == "__main__":  # quick manual check: python -m bench.lib.antre_bench URL
    print(json.dumps(ceiling(sys.argv[1]), indent=1))
