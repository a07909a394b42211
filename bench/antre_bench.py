"""Antre's side of ``bench/run``: the Redis ceiling, enqueue, no-op processing (raw Queue loop
and the real worker), idempotency + lock, latency at a paced rate, round trips per job, memory.

Every function takes the private server's URL and returns a dict of figures. Worker runs are
real subprocesses (``python -m worker ... --burst``); completion is seen through
``bench.progress`` (no extra round trip per job).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import redis

from antre.queue import JobSpec, Queue
from bench import progress
from worker.executor import DEFAULT_PREFETCH

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = "bench.apps.noop:app"


HERE = os.path.dirname(os.path.abspath(__file__))
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

def _env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"BENCH_REDIS_URL": url, "ANTRE_REDIS_URL": url, "PYTHONPATH": ROOT,
                "ANTRE_LOG_LEVEL": "WARNING"})
    env.pop("BENCH_DATABASE_URL", None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


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


def _specs(n: int, prefix: str = "k", lock: bool = False, job_type: str = "noop") -> list[JobSpec]:
    run = uuid.uuid4().hex[:6]
    return [JobSpec(job_type, {"i": i}, f"{prefix}:{run}:{i}",
                    lock_key=f"lock:{i}" if lock else None) for i in range(n)]


def enqueue(url: str, n_single: int = 5_000, n_many: int = 50_000, chunk: int = 1_000
            ) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    q = Queue(client, "bench")
    specs = _specs(n_single)
    t = time.perf_counter()
    for s in specs:
        q.enqueue(s.job_type, s.payload, idempotency_key=s.idempotency_key)
    single = n_single / (time.perf_counter() - t)
    flush(client)
    specs = _specs(n_many)
    t = time.perf_counter()
    for start in range(0, n_many, chunk):
        q.enqueue_many(specs[start:start + chunk])
    many = n_many / (time.perf_counter() - t)
    flush(client)
    client.close()
    return {"enqueue_per_s": round(single), "enqueue_many_per_s": round(many),
            "enqueue_many_chunk": chunk, "n_single": n_single, "n_many": n_many}


def fill(client: redis.Redis, n: int, queue: str = "default", lock: bool = False) -> None:
    q = Queue(client, queue)
    specs = _specs(n, lock=lock)
    for start in range(0, n, 2_000):
        q.enqueue_many(specs[start:start + 2_000])


def wait_progress(client: redis.Redis, n: int, procs: list[subprocess.Popen], timeout: float
                  ) -> tuple[int, float, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = progress.read(client)
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
from antre.queue import Queue
from bench import progress
url, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from antre.metrics import record_duration
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
    fill(client, n)
    before = commandstats(client)
    ps = [subprocess.Popen([sys.executable, "-c", RAW_CONSUMER, url, str(count), mode], cwd=ROOT,
                           env=_env(url), start_new_session=True) for _ in range(procs)]
    got = wait_progress(client, n, ps, timeout=300)
    for p in ps:
        p.wait(60)
    after = commandstats(client)
    evalsha = after.get("evalsha", 0) - before.get("evalsha", 0)
    out = _result(n, got, procs, reserve_count=count, settle=mode, evalsha_per_job=round(evalsha / n, 3))
    client.close()
    return out


def worker_run(url: str, n: int, procs: int = 1, threads: int = 4,
               prefetch: int = DEFAULT_PREFETCH,
               database_url: str | None = None, lock: bool = False, count_rtt: bool = False,
               timeout: float = 300, write: bool = False) -> dict[str, Any]:
    """The real worker pool: ``python -m worker bench.apps.noop:app --burst``."""
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    fill(client, n, lock=lock)
    before, cmds_before = commandstats(client), client.info("stats")["total_commands_processed"]
    cmd = [sys.executable, "-m", "worker", "worker", APP, "--processes", str(procs),
           "--threads", str(threads), "--prefetch", str(prefetch), "--no-scheduler"]
    # not --burst: a burst worker exits while snoozed jobs (database busy) are still scheduled
    env = _env(url, BENCH_DATABASE_URL=database_url, BENCH_COUNT_RTT="1" if count_rtt else None,
               BENCH_WRITE="1" if write else None)
    log_path = os.path.join(ROOT, "bench", "out", "worker-run.log")
    with open(log_path, "wb") as log:  # a file, not a pipe: a full pipe would stall the worker
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=log)
        got = wait_progress(client, n, [p], timeout)
        stop([p])
    with open(log_path, "rb") as f:
        err = f.read()[-2000:].decode(errors="replace")
    after, cmds_after = commandstats(client), client.info("stats")["total_commands_processed"]
    evalsha = after.get("evalsha", 0) - before.get("evalsha", 0)
    extra: dict[str, Any] = {
        "threads": threads, "prefetch": prefetch, "evalsha_per_job": round(evalsha / n, 3),
        "redis_commands_per_job": round((cmds_after - cmds_before) / n, 2),
        "database": _db_kind(database_url), "lock_per_job": lock, "row_written": write}
    if count_rtt:
        sends = sum(int(v) for v in client.hgetall("bench:rtt").values())
        extra["round_trips_per_job"] = round(sends / n, 3)
    if got[0] < n:
        extra["error"] = f"only {got[0]}/{n} done; stderr tail: {err}"
    client.close()
    return _result(n, got, procs, **extra)


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


def latency(url: str, rate: float = 200.0, seconds: float = 10.0, threads: int = 4
            ) -> dict[str, Any]:
    """p50/p99 enqueue-to-start with one worker process and a producer paced at ``rate``."""
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    cmd = [sys.executable, "-m", "worker", "worker", APP, "--processes", "1", "--threads",
           str(threads), "--no-scheduler"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=_env(url), start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    q = Queue(client, "default")
    # warm up: the worker is up when it ran one job
    q.enqueue("latency", {"t": time.time()}, idempotency_key="warm")
    deadline = time.monotonic() + 30
    while client.llen("bench:latency") < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.delete("bench:latency")
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        target = start + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        q.enqueue("latency", {"t": time.time()}, idempotency_key=f"lat:{i}")
    deadline = time.monotonic() + 30
    while client.llen("bench:latency") < n and time.monotonic() < deadline:
        time.sleep(0.05)
    samples = sorted(float(x) for x in client.lrange("bench:latency", 0, -1))
    stop([p])
    client.close()
    if not samples:
        return {"error": "no samples"}
    pick = lambda f: round(samples[min(len(samples) - 1, int(f * len(samples)))], 2)
    return {"rate_per_s": rate, "n": len(samples), "p50_ms": pick(0.50), "p90_ms": pick(0.90),
            "p99_ms": pick(0.99), "max_ms": round(samples[-1], 2),
            "mean_ms": round(statistics.fmean(samples), 2), "threads": threads}


def memory(url: str, n: int, threads: int = 4, prefetch: int = DEFAULT_PREFETCH,
           depth: int = 20_000,
           sample_s: float = 0.5) -> dict[str, Any]:
    """RSS of one worker process while it runs ``n`` no-op jobs; a producer keeps the ready
    list at most ``depth`` long so Redis memory stays flat."""
    import psutil
    client = redis.Redis.from_url(url, decode_responses=True)
    flush(client)
    q = Queue(client, "default")
    fill(client, min(n, depth))
    produced = min(n, depth)
    cmd = [sys.executable, "-m", "worker", "worker", APP, "--processes", "1", "--threads",
           str(threads), "--prefetch", str(prefetch), "--no-scheduler"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=_env(url), start_new_session=True,
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
            specs = _specs(k, prefix=f"m{produced}")
            for start in range(0, k, 2_000):
                q.enqueue_many(specs[start:start + 2_000])
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


if __name__ == "__main__":  # quick manual check: python -m bench.antre_bench URL
    import json
    print(json.dumps(ceiling(sys.argv[1]), indent=1))
