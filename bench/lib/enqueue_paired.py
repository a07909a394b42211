"""A single ``app.enqueue`` beside Huey's ``task()``, in paired blocks (robust to a drifting VM).

    PYTHONPATH=$PWD python3 bench/lib/enqueue_paired.py [--blocks 60] [--size 500] [--before REV]
        [--peers huey,dramatiq]

One private Redis (``EmbeddedRedis``, TCP 127.0.0.1, appendonly off) and one long-lived
producer process per side: each peer's own send (Huey's ``task()``, Dramatiq's ``send()``) in
its virtualenv (``bench/.venvs``, as ``bench/run`` builds them), Antre's ``app.enqueue`` (``bench.apps.noop``, default settings), and
with ``--before REV`` the same Antre loop from a ``git archive`` of REV. Each process is told
to run a block of ``--size`` single enqueues and reports the block's wall time and its own
CPU time; the sides take turns block by block (the order rotating each round), so a round's
blocks run within a second of each other and the machine's drift (2-3x in minutes on the
shared VM) touches both sides alike. Reported: per side the median jobs/s and CPU µs per job
over the blocks, and the quartiles of each side's rate over the first peer's (Huey's) in the
same round. ``bench/run`` measures its single-enqueue table this way (``paired``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench.lib.tree import code_path  # noqa: E402
from bench.lib import enqueue_vs_huey as evh  # noqa: E402
from bench.lib import peer_bench as pb  # noqa: E402

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


def side_antre(url: str, tree: str = ROOT) -> tuple[str, str, str, dict[str, str]]:
    """How Antre's producer is started: ``bench.apps.noop`` (``app.enqueue``) from ``tree``."""
    env = ab._env(url)
    env["PYTHONPATH"] = code_path(tree)
    return sys.executable, "bench.apps.noop", tree, env


def side_peer(url: str, name: str) -> tuple[str, str, str, dict[str, str]]:
    """How a peer's producer is started: its ``enqueue(n)`` inside its virtualenv."""
    peer = pb.PEERS[name]
    pb.ensure_venv(peer["venv"], peer["pip"])
    env, _ = pb._peer_env(url, peer)
    return pb.venv_python(peer["venv"]), peer["module"], os.path.join(ROOT, "bench", "peers"), env


# the server's own figures around a block (the bench's INFO calls themselves not counted)
SCRIPTED = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")


def server_snap(client: redis.Redis) -> tuple[float, dict[str, tuple[int, int]]]:
    """The Redis server's CPU s (user + sys) and its ``INFO commandstats`` (calls, usec)."""
    cpu = client.info("cpu")
    stats = {k: (int(v["calls"]), int(v["usec"])) for k, v in client.info("commandstats").items()
             if not k.startswith(("cmdstat_info", "cmdstat_flushall"))}
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), stats


def server_cost(before: tuple[float, dict[str, tuple[int, int]]],
                after: tuple[float, dict[str, tuple[int, int]]], n: int) -> dict[str, float]:
    """Per job between two ``server_snap``: commands run (a script's own ``redis.call`` each
    count: commandstats counts them), script µs (the FCALL / EVALSHA usec, its nested commands
    included), the server's CPU µs."""
    delta = {k: (c - before[1].get(k, (0, 0))[0], u - before[1].get(k, (0, 0))[1])
             for k, (c, u) in after[1].items()}
    return {"cmds_run": sum(c for c, _ in delta.values()) / n,
            "script_us": sum(delta.get(k, (0, 0))[1] for k in SCRIPTED) / n,
            "server_cpu_us": (after[0] - before[0]) / n * 1e6}


# the marker's own client connecting (not a side's command)
HANDSHAKE = ("ECHO", "HELLO", "CLIENT")


def commands_sent(url: str, proc: subprocess.Popen, n: int) -> tuple[float, dict[str, int]]:
    """The commands a side's client sends per job (``MONITOR`` over one block of ``n``, not
    timed: a script's own commands, shown as 'lua', are not counted), by name."""
    client = redis.Redis.from_url(url)
    seen: dict[str, int] = {}
    with client.monitor() as monitor:
        done = threading.Event()

        def count() -> None:
            for line in monitor.listen():
                command = line["command"]
                if command == "ECHO enqueue-paired-end":
                    break
                if line.get("client_type") != "lua" and not command.startswith(HANDSHAKE):
                    name = command.split(" ", 1)[0].upper()
                    seen[name] = seen.get(name, 0) + 1
            done.set()

        reader = threading.Thread(target=count, daemon=True)
        reader.start()
        time.sleep(0.2)  # (MONITOR is on before the block starts)
        block(proc, n)
        redis.Redis.from_url(url).echo("enqueue-paired-end")
        done.wait(60)
    client.close()
    return sum(seen.values()) / n, seen


def paired(url: str, sides: dict[str, tuple[str, str, str, dict[str, str]]], blocks: int,
           size: int, base: str | None = None) -> dict[str, dict[str, Any]]:
    """Blocks of ``size`` single enqueues, the sides taking turns each round; per side the
    median jobs/s and producer CPU µs/job over its blocks, the server's figures per job
    (``server_cost``) and, beside ``base``, the quartiles of its rate over ``base``'s in the
    same round."""
    client = redis.Redis.from_url(url)
    procs: dict[str, subprocess.Popen] = {}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    cpus: dict[str, list[float]] = {name: [] for name in sides}
    server: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    names = list(sides)
    try:
        for name, (python, module, cwd, env) in sides.items():
            procs[name] = start(python, module, cwd, env)
        sent = {name: commands_sent(url, procs[name], size) for name in names}
        for b in range(blocks):
            if b % 10 == 0:
                client.flushall()  # the server's data stays small, as in a fresh run
            for name in names[b % len(names):] + names[:b % len(names)]:
                snap = server_snap(client)
                rate, cpu = block(procs[name], size)
                server[name].append(server_cost(snap, server_snap(client), size))
                rates[name].append(rate)
                cpus[name].append(cpu)
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
        client.flushall()
        client.close()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        r: dict[str, Any] = {"enqueue_per_s": round(statistics.median(rates[name])),
                             "enqueue_cpu_us": round(statistics.median(cpus[name]), 1),
                             "blocks": blocks, "block_size": size,
                             "quartiles_per_s": [round(x) for x in quartiles(rates[name])]}
        r["cmds_sent"], r["sent"] = sent[name]
        for field in ("cmds_run", "script_us", "server_cpu_us"):
            r[field] = round(statistics.median(b[field] for b in server[name]), 2)
        if base is not None and name != base:
            ratio = [a / h for a, h in zip(rates[name], rates[base])]
            r["ratio_to_" + base] = [round(x, 3) for x in quartiles(ratio)]
            r["rounds_ahead_of_" + base] = sum(x > 1 for x in ratio)
        out[name] = r
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--blocks", type=int, default=60, help="rounds (one block per side each)")
    p.add_argument("--size", type=int, default=500, help="single enqueues per block")
    p.add_argument("--before", help="a git revision to run beside this tree")
    p.add_argument("--peers", default="huey", help="comma-separated peers (huey first)")
    p.add_argument("--json", help="write the summary here")
    args = p.parse_args()
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        sides = {name: side_peer(server.url, name) for name in args.peers.split(",")}
        if args.before:
            sides[f"antre {args.before[:12]}"] = side_antre(server.url, evh.archive(args.before))
        sides["antre"] = side_antre(server.url)
        base = args.peers.split(",")[0]
        res = paired(server.url, sides, args.blocks, args.size, base=base)
    print(f"{args.blocks} rounds of {args.size} single enqueues per side (median jobs/s, "
          f"producer CPU µs/job; ratio to {base} in the same round: q1 median q3)")
    for name, r in res.items():
        q1, med, q3 = r.get("ratio_to_" + base, [1, 1, 1])
        print(f"  {name:24} {r['enqueue_per_s']:7,} /s {r['enqueue_cpu_us']:7.1f} µs   x{q1:.3f} "
              f"x{med:.3f} x{q3:.3f}   ahead in {r.get('rounds_ahead_of_' + base, '-')}"
              f"/{args.blocks}")
        print(f"  {'':24} server per job: {r['cmds_sent']:.2f} commands sent, {r['cmds_run']:.2f} "
              f"run, script {r['script_us']:.1f} µs, CPU {r['server_cpu_us']:.1f} µs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
