"""Where a job's Redis instructions go, by phase and by function (callgrind), for the table in
bench/results/cost.md ("Where the remaining cost is"):

    python3 bench/experiments/redis_breakdown.py [TREE] [--jobs 1000]

Starts ``redis-server`` under ``valgrind --tool=callgrind`` with instrumentation off, then with
it on: enqueues ``--jobs`` no-op jobs (``Queue.enqueue_many``), reserves them all 16 at a time,
acks each batch (``Queue.ack_many``), dumping the profile after each phase
(``callgrind_control -d``); prints per job, for each phase, the instructions inside EVALSHA
and their split (the commands the scripts run, HMGET / HSET / ..., ``lpFind``, the replies made
Lua values, the Lua side, the script's reply). Unlike bench/experiments/redis_instructions.py the reserves
and the acks are not interleaved (the in-flight set holds every job meanwhile). A tree is a
directory holding ``antre/`` (default: this checkout). Needs valgrind and redis-server.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

CODE = r"""
import sys, time, subprocess
sys.path.insert(0, sys.argv[4])
import redis
from antre.engine.queue import JobSpec, Queue
pid, port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = redis.Redis(port=port)
for _ in range(600):
    try:
        c.ping(); break
    except redis.ConnectionError:
        time.sleep(0.1)
q = Queue(c, "default")
def ctl(*a): subprocess.run(["callgrind_control", *a, str(pid)], stdout=subprocess.DEVNULL, check=True)
q.enqueue_many([JobSpec("noop", {"i": -1}, idempotency_key="w")])  # the scripts loaded
got = q.reserve("w", count=16)
q.ack_many([(j, None) for j in got], notes=[{"ran_ms": 0}] * len(got))
specs = [JobSpec("noop", {"i": i}, idempotency_key=f"k{i}") for i in range(n)]
ctl("-i", "on")
for s in range(0, n, 1000):
    q.enqueue_many(specs[s:s + 1000])
ctl("-i", "off"); ctl("-d", "enqueue")
batches = []
ctl("-i", "on")
while True:
    got = q.reserve("w:1", count=16)
    if not got:
        break
    batches.append(got)
ctl("-i", "off"); ctl("-d", "reserve")
ctl("-i", "on")
for got in batches:
    assert not q.ack_many([(j, None) for j in got], notes=[{"ran_ms": 0}] * len(got))
ctl("-i", "off"); ctl("-d", "ack")
print(sum(len(g) for g in batches))
c.shutdown(nosave=True)
"""

COMMANDS = ("hmgetCommand", "hsetCommand", "zaddCommand", "rpushCommand", "zremCommand",
            "rpopCommand", "lpushCommand", "existsCommand", "hincrbyCommand")
LINE = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:([A-Za-z_0-9]+)('\d+)?\s")


def inclusive(path: str) -> dict[str, int]:
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    found: dict[str, int] = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            found.setdefault(m.group(2), int(m.group(1).replace(",", "")))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tree", nargs="?",
                   default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    p.add_argument("--jobs", type=int, default=1000)
    args = p.parse_args()
    port = 7300 + os.getpid() % 500
    out = os.path.join(tempfile.gettempdir(), f"redis-breakdown.{os.getpid()}")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        res = subprocess.run([sys.executable, "-c", CODE, str(server.pid), str(port),
                              str(args.jobs), args.tree], capture_output=True, text=True,
                             timeout=1800)
        if res.returncode != 0:
            raise SystemExit(res.stderr[-2000:])
        done = int(res.stdout.split()[-1])
        server.wait(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    for path, phase in zip(sorted(glob.glob(out + ".*")), ("enqueue", "reserve", "ack")):
        f = inclusive(path)
        n = args.jobs if phase == "enqueue" else done
        get = lambda name: f.get(name, 0) / n  # noqa: E731
        in_lua = get("lua_pcall") - get("scriptCall") - get("parseReply")
        print(f"{phase} ({path}), Ir per job:")
        print(f"  {get('evalGenericCommand'):10,.0f}  in EVALSHA")
        print(f"  {get('scriptCall'):10,.0f}    commands the scripts run")
        for name in COMMANDS:
            if get(name):
                print(f"  {get(name):10,.0f}      {name}")
        print(f"  {get('lpFind'):10,.0f}      of which lpFind (listpack walks)")
        print(f"  {get('parseReply'):10,.0f}    command replies made Lua values (parseReply)")
        print(f"  {in_lua:10,.0f}    Lua: interpreter, redis.call arguments, closures, GC")
        print(f"  {get('luaCallFunction') - get('lua_pcall'):10,.0f}    "
              "the script's reply to the client, KEYS/ARGV")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
