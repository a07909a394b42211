"""The peers of ``bench/run``: each installed from PyPI into its own virtualenv under
``bench/.venvs/<name>`` (created when missing), driven with the same no-op workload.

For each peer: flush the server, enqueue N jobs with the peer's own client (timed, for
information), start one worker process, and time from the first job finished to the last one
(``bench.lib.progress``), then stop the worker; the worker's CPU per job is read from its process
tree as for Antre. Each worker is started as its docs start it, at its default verbosity (no
``-q`` / ``-l`` flags for any of them); concurrency inside that one process is each system's
usual one: 4 threads where the system has threads, the async default (10) for arq and saq, one
job at a time for RQ. ``latency`` times a peer's producer inside its own virtualenv (one
``send`` per job, paced at 200 jobs/s); the single-enqueue rate is ``bench/lib/enqueue_paired.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import redis

from bench.lib import antre_bench as ab
from bench.lib import progress

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
VENVS = os.path.join(HERE, ".venvs")

# name: pip requirement, worker command (after the venv's bin/), env, settings note,
#       what happens to a job in flight on kill -9 of its worker
PEERS: dict[str, dict[str, Any]] = {
    "rq-simple": {
        "venv": "rq", "pip": ["rq"], "module": "rq_tasks",
        "cmd": ["rq", "worker", "--burst", "-w", "rq.worker.SimpleWorker", "-u", "{url}",
                "bench"],
        "note": "SimpleWorker (no fork), 1 job at a time",
        "kill9": "job stays in StartedJobRegistry until its heartbeat/TTL lapses; the next worker's "
                 "maintenance moves it to FailedJobRegistry as AbandonedJobError; no automatic "
                 "retry unless Retry is configured (from docs and rq/registry.py cleanup)",
        "keeps_job_in_redis": True,
    },
    "rq-fork": {
        "venv": "rq", "pip": ["rq"], "module": "rq_tasks", "env": {"BENCH_SYNC": "1"},
        "cmd": ["rq", "worker", "--burst", "-u", "{url}", "bench"],
        "note": "default Worker: forks a work horse per job",
        "kill9": "as rq-simple (killing the work horse alone marks the job failed at once: "
                 "'Work-horse terminated unexpectedly')",
        "keeps_job_in_redis": True, "jobs_factor": 0.2,
    },
    "arq": {
        "venv": "arq", "pip": ["arq"], "module": "arq_tasks",
        "cmd": ["arq", "arq_tasks.WorkerSettings"],
        "note": "asyncio, max_jobs=10, poll_delay=0.01 s (default 0.5 s caps it near 200/s)",
        "kill9": "job stays in the queue zset with an in-progress key; re-run by another worker "
                 "after the in-progress key expires (job timeout + 10 s): at-least-once (from docs)",
        "keeps_job_in_redis": True,
    },
    "saq": {
        "venv": "saq", "pip": ["saq", "typing_extensions"], "module": "saq_tasks",
        "cmd": ["saq", "saq_tasks.settings", "--workers", "1"],
        "note": "asyncio, concurrency=10",
        "kill9": "job stays active; the sweeper of a live worker retries it (or aborts it once "
                 "retries are spent) after its heartbeat/timeout lapses (from docs: Queue.sweep)",
        "keeps_job_in_redis": True,
    },
    "dramatiq": {
        "venv": "dramatiq", "pip": ["dramatiq[redis]"], "module": "dramatiq_tasks",
        "cmd": ["dramatiq", "dramatiq_tasks", "--processes", "1", "--threads", "4"],
        "note": "Redis broker, 1 process x 4 threads",
        "kill9": "message stays in the worker's ack set; another worker's heartbeat check requeues "
                 "it after the dead worker times out (dead_message_ttl / heartbeat_timeout, "
                 "60 s by default): at-least-once (from docs of RedisBroker)",
        "keeps_job_in_redis": True,
    },
    "dramatiq-2p": {
        "venv": "dramatiq", "pip": ["dramatiq[redis]"], "module": "dramatiq_tasks",
        "cmd": ["dramatiq", "dramatiq_tasks", "--processes", "2", "--threads", "4"],
        "note": "Redis broker, 2 processes x 4 threads (both cores)", "processes": 2,
        "kill9": "as dramatiq",
        "keeps_job_in_redis": True,
    },
    "huey": {
        "venv": "huey", "pip": ["huey"], "module": "huey_tasks",
        "cmd": ["huey_consumer", "huey_tasks.huey", "-w", "4", "-k", "thread"],
        "note": "RedisHuey, 4 worker threads",
        "kill9": "the task was popped from the list (RPOP) before running: it is lost, no "
                 "redelivery (from docs/source: RedisStorage.dequeue)",
        "keeps_job_in_redis": False,
    },
    "taskiq-stream": {
        "venv": "taskiq", "pip": ["taskiq", "taskiq-redis"], "module": "taskiq_tasks",
        "cmd": ["taskiq", "worker", "taskiq_tasks:broker", "--workers", "1"],
        "note": "taskiq-redis RedisStreamBroker (consumer group, ack after the task), "
                "1 worker process, max-async-tasks 100 (its default)",
        "kill9": "the message stays pending in the consumer group; a worker claims pending "
                 "messages idle longer than idle_timeout (10 min by default) at start-up "
                 "(from taskiq-redis RedisStreamBroker: XAUTOCLAIM)",
        "keeps_job_in_redis": True,
    },
    "taskiq-stream-2p": {
        "venv": "taskiq", "pip": ["taskiq", "taskiq-redis"], "module": "taskiq_tasks",
        "cmd": ["taskiq", "worker", "taskiq_tasks:broker"],
        "note": "as taskiq-stream with its default --workers 2 (both cores)", "processes": 2,
        "kill9": "as taskiq-stream",
        "keeps_job_in_redis": True,
    },
    "celery": {
        "venv": "celery", "pip": ["celery[redis]"], "module": "celery_tasks",
        "cmd": ["celery", "-A", "celery_tasks", "worker", "-P", "threads", "-c", "4",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", "celery"],
        "note": "Redis broker, acks_late=True, threads pool x 4, prefetch multiplier 4",
        "kill9": "with acks_late the unacked message is restored and redelivered after the "
                 "broker's visibility_timeout (1 h by default on Redis) or when a worker restores "
                 "unacked messages at start (from docs)",
        "keeps_job_in_redis": True,
    },
}


def venv_python(name: str) -> str:
    return os.path.join(VENVS, name, "bin", "python")


def ensure_venv(name: str, pip: list[str]) -> str:
    """Create ``bench/.venvs/<name>`` with the peer, redis and psutil when missing."""
    py = venv_python(name)
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", os.path.join(VENVS, name)], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", *pip, "redis", "psutil"], check=True)
    return py


def version(name: str, dist: str) -> str:
    out = subprocess.run([venv_python(name), "-c",
                          f"import importlib.metadata as m; print(m.version({dist!r}))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def run_peer(url: str, name: str, n: int) -> dict[str, Any]:
    peer = PEERS[name]
    ensure_venv(peer["venv"], peer["pip"])
    env, bindir = _peer_env(url, peer)
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    t = time.perf_counter()
    mod = peer["module"]
    subprocess.run([venv_python(peer["venv"]), "-c", f"import {mod}; {mod}.enqueue({n})"],
                   cwd=os.path.join(HERE, "peers"), env=env, check=True)
    enqueue_s = time.perf_counter() - t
    cmd = [c.format(url=url) for c in peer["cmd"]]
    cmd[0] = os.path.join(bindir, cmd[0])
    log = open(os.path.join(ab.ROOT, "bench", "out", f"{name}.log"), "ab")
    p = subprocess.Popen(cmd, cwd=os.path.join(HERE, "peers"), env=env, start_new_session=True,
                         stdout=log, stderr=log)
    cpu = ab.TreeCpu(p.pid)
    got = ab.wait_progress(client, n, [p], timeout=max(120, n / 50), cpu=cpu)
    cpu_us = cpu.us_per_job(progress.read(client)[0])
    ab.stop([p])
    log.close()
    client.close()
    out = ab._result(n, got, peer.get("processes", 1), enqueue_per_s=round(n / enqueue_s),
                     worker_cpu_us_per_job=cpu_us, command=" ".join(peer["cmd"]))
    if got[0] < n:
        out["error"] = f"only {got[0]}/{n} done (see bench/out/{name}.log)"
    return out


def _peer_env(url: str, peer: dict[str, Any]) -> tuple[dict[str, str], str]:
    env = ab._env(url, **peer.get("env", {}))
    env["PYTHONPATH"] = os.pathsep.join([ab.ROOT, HERE + "/peers"])
    bindir = os.path.join(VENVS, peer["venv"], "bin")
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env, bindir


PACED = r"""
import sys, time
mod = __import__(sys.argv[1]); n, rate = int(sys.argv[2]), float(sys.argv[3])
start = time.perf_counter()
for i in range(n):
    delay = start + i / rate - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    mod.send_latency()
"""


def latency(url: str, name: str, rate: float = 200.0, seconds: float = 10.0) -> dict[str, Any]:
    """p50/p99 enqueue-to-start of the peer's worker (its docs' command) with the peer's
    producer paced at ``rate``; the task records when it started (``send_latency``)."""
    peer = PEERS[name]
    ensure_venv(peer["venv"], peer["pip"])
    env, bindir = _peer_env(url, peer)
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    cwd = os.path.join(HERE, "peers")
    cmd = [c.format(url=url) for c in peer["cmd"] if c != "--burst"]
    cmd[0] = os.path.join(bindir, cmd[0])
    produce = [venv_python(peer["venv"]), "-c", PACED, peer["module"]]
    with open(os.path.join(ab.ROOT, "bench", "out", f"latency-{name}.log"), "ab") as log:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, stdout=log,
                             stderr=log)
        subprocess.run([*produce, "1", str(rate)], cwd=cwd, env=env, check=True)  # warm up
        if ab.wait_samples(client, 1):
            client.delete("bench:latency")
            n = int(rate * seconds)
            subprocess.run([*produce, str(n), str(rate)], cwd=cwd, env=env, check=True)
            ab.wait_samples(client, n)
        ab.stop([p])
    out = ab.latency_figures(client, rate)
    client.close()
    return {**out, "command": " ".join(peer["cmd"])}


DISTS = {"rq": "rq", "arq": "arq", "saq": "saq", "dramatiq": "dramatiq", "huey": "huey",
         "celery": "celery", "taskiq": "taskiq"}


def _start_started_worker(url: str, cmd: list[str], cwd: str, env: dict[str, str],
                          log_name: str) -> subprocess.Popen:
    log = open(os.path.join(ab.ROOT, "bench", "out", log_name), "ab")  # noqa: SIM115
    return subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, stdout=log,
                            stderr=log)


def kill9_check(url: str, name: str, wait_s: float = 20.0) -> dict[str, Any]:
    """Actually kill -9 a worker (its whole process group) while it runs a 3 s job, start a
    fresh worker, and see whether the job runs again within ``wait_s``."""
    client = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(client)
    if name == "antre":
        env = ab._env(url)
        cwd = ab.ROOT
        cmd = ab.worker_cmd(["--threads", "1"])
        from antre.engine.queue import Queue
        Queue(client, "default").enqueue("slow", {}, idempotency_key="kill9",
                                         visibility_timeout_s=5)
    else:
        peer = PEERS[name]
        env, bindir = _peer_env(url, peer)
        cwd = os.path.join(HERE, "peers")
        mod = peer["module"]
        subprocess.run([venv_python(peer["venv"]), "-c", f"import {mod}; {mod}.enqueue_slow()"],
                       cwd=cwd, env=env, check=True)
        cmd = [c.format(url=url) for c in peer["cmd"] if c != "--burst"]
        cmd[0] = os.path.join(bindir, cmd[0])
    p = _start_started_worker(url, cmd, cwd, env, f"kill9-{name}.log")
    deadline = time.monotonic() + 30
    while int(client.get("bench:started") or 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    if int(client.get("bench:started") or 0) < 1:
        ab.stop([p])
        return {"result": "the job never started", "verified": False}
    time.sleep(0.5)
    os.killpg(p.pid, 9)
    p.wait(10)
    killed_at = time.monotonic()
    p2 = _start_started_worker(url, cmd, cwd, env, f"kill9-{name}.log")
    ran_again = None
    while time.monotonic() - killed_at < wait_s:
        if progress.read(client)[0] >= 1:
            ran_again = time.monotonic() - killed_at
            break
        time.sleep(0.1)
    ab.stop([p2])
    starts = int(client.get("bench:started") or 0)
    client.close()
    if ran_again is not None:
        return {"result": f"re-run and finished {ran_again:.1f} s after the kill", "verified": True,
                "starts": starts}
    return {"result": f"not run again within {wait_s:.0f} s after the kill (started {starts}x)",
            "verified": True, "starts": starts}
