"""A single ``app.enqueue`` beside Huey's ``task()``, in paired blocks (robust to a drifting VM).

    PYTHONPATH=$PWD python3 bench/enqueue_paired.py [--blocks 60] [--size 500] [--before REV]

One private Redis (``EmbeddedRedis``, TCP 127.0.0.1, appendonly off) and one long-lived
producer process per side: Huey's own ``task()`` in its virtualenv (``bench/.venvs/huey``, as
``bench/run`` builds it), Antre's ``app.enqueue`` (``bench.apps.noop``, default settings), and
with ``--before REV`` the same Antre loop from a ``git archive`` of REV. Each process is told
to run a block of ``--size`` single enqueues and reports the block's wall time and its own
CPU time; the sides take turns block by block (the order rotating each round), so a round's
blocks run within a second of each other and the machine's drift (2-3x in minutes on the
shared VM) touches both sides alike. Reported: per side the median jobs/s and CPU µs per job
over the blocks, and per pair the median ratio of each side's rate to Huey's in the same
round, with its quartiles.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench import antre_bench as ab  # noqa: E402
from bench import enqueue_vs_huey as evh  # noqa: E402
from bench import peer_bench as pb  # noqa: E402

# A producer that runs blocks on request: "n" on stdin -> one JSON line (wall s, cpu s).
LOOP = r"""
import importlib, json, sys, time
mod = importlib.import_module(sys.argv[1])
mod.enqueue(20)  # connect (and load a script) first
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    wall, cpu = time.perf_counter(), time.process_time()
    mod.enqueue(n)
    print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]), flush=True)
"""


def start(python: str, module: str, cwd: str, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([python, "-c", LOOP, module], cwd=cwd, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def block(proc: subprocess.Popen, n: int) -> tuple[float, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{n}\n")
    proc.stdin.flush()
    wall, cpu = json.loads(proc.stdout.readline())
    return n / wall, cpu / n * 1e6


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--blocks", type=int, default=60, help="rounds (one block per side each)")
    p.add_argument("--size", type=int, default=500, help="single enqueues per block")
    p.add_argument("--before", help="a git revision to run beside this tree")
    p.add_argument("--json", help="write the summary here")
    args = p.parse_args()
    peer = pb.PEERS["huey"]
    pb.ensure_venv(peer["venv"], peer["pip"])
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        client = redis.Redis.from_url(server.url)
        huey_env, _ = pb._peer_env(server.url, peer)
        sides = {"huey task()": start(pb.venv_python(peer["venv"]), peer["module"],
                                      os.path.join(ROOT, "bench", "peers"), huey_env)}
        trees = {"antre app.enqueue": ROOT}
        if args.before:
            trees = {f"antre {args.before[:12]}": evh.archive(args.before), **trees}
        for name, tree in trees.items():
            env = ab._env(server.url)
            env["PYTHONPATH"] = tree
            sides[name] = start(sys.executable, "bench.apps.noop", tree, env)
        rates: dict[str, list[float]] = {name: [] for name in sides}
        cpus: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        try:
            for b in range(args.blocks):
                if b % 10 == 0:
                    client.flushall()  # the server's data stays small, as in a fresh run
                for name in names[b % len(names):] + names[:b % len(names)]:
                    rate, cpu = block(sides[name], args.size)
                    rates[name].append(rate)
                    cpus[name].append(cpu)
        finally:
            for proc in sides.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=30)
    summary: dict[str, Any] = {"blocks": args.blocks, "size": args.size, "sides": {}}
    huey = rates["huey task()"]
    print(f"{args.blocks} rounds of {args.size} single enqueues per side "
          "(median jobs/s, producer CPU µs/job; ratio to Huey in the same round: q1 median q3)")
    for name in names:
        ratio = [a / h for a, h in zip(rates[name], huey)]
        q1, med, q3 = quartiles(ratio)
        summary["sides"][name] = {"per_s": round(statistics.median(rates[name])),
                                  "cpu_us": round(statistics.median(cpus[name]), 1),
                                  "ratio_to_huey": [round(q1, 3), round(med, 3), round(q3, 3)],
                                  "rounds_ahead_of_huey": sum(r > 1 for r in ratio)}
        s = summary["sides"][name]
        print(f"  {name:24} {s['per_s']:7,} /s {s['cpu_us']:7.1f} µs   x{q1:.3f} "
              f"x{med:.3f} x{q3:.3f}   ahead in {s['rounds_ahead_of_huey']}/{args.blocks}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
