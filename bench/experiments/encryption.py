"""Throughput with and without encrypted payloads, in one run: 20k no-op jobs enqueued
(enqueue_many) and run by one in-process worker thread (burst), plain, then sealed
(AES-256-GCM, ``Antre(encrypt=True)``), on a fresh Redis each.

    .venv/bin/python bench/experiments/encryption.py [jobs]

Results: bench/experiments/encryption.md."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import time

import redis

from antre import Antre
from antre_worker.runner import WorkerProcess


def _redis(sock: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    client = redis.Redis(unix_socket_path=sock)
    for _ in range(200):
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


def run(jobs: int, encrypt: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "r.sock")
        proc = _redis(sock)
        try:
            ring = "v1:" + base64.b64encode(os.urandom(32)).decode()
            app = Antre(redis_url=f"unix://{sock}", payload_keys=ring, encrypt=encrypt)
            app.handler("noop")(lambda ctx, payload: None)
            specs = [app.spec("noop", {"order": i, "sku": "A-1"}, idempotency_key=f"k{i}")
                     for i in range(jobs)]
            t0 = time.perf_counter()
            app.enqueue_many(specs)
            t1 = time.perf_counter()
            WorkerProcess(app, queues=["default"], threads=1, worker_id="b1",
                          heartbeat_s=60).run_burst()
            t2 = time.perf_counter()
            return jobs / (t1 - t0), jobs / (t2 - t1)
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    for encrypt in (False, True):
        enq, work = run(jobs, encrypt)
        print(f"encrypt={encrypt!s:5}  enqueue {enq:8.0f} jobs/s  worker {work:7.0f} jobs/s")


if __name__ == "__main__":
    main()
