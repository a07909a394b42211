"""The enqueue script of a git revision against the working tree's, in one server, interleaved.

    PYTHONPATH=$PWD python3 bench/experiments/enqueue_script_ab.py --before REV [--blocks 40] [--block 500]

Both scripts (``_lib.lua`` + ``enqueue.lua`` of REV, and of this tree) are loaded into one
private Redis (``EmbeddedRedis``, appendonly off). Blocks of ``--block`` EVALSHA calls, one new
job each, are pipelined alternately to the one and the other, so drift in the machine's load
hits both alike; per block the server's CPU (``INFO cpu`` user + sys) is divided by the calls.
Prints the median and quartiles per side and case. On a shared machine the absolute figures
move with the load; the interleaved ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from antre.engine.envelope import NEW_FIELDS, JobSpec, encode_new, pack_new  # noqa: E402
from antre.engine.keys import QueueKeys  # noqa: E402
from antre.engine.scripts import source  # noqa: E402

import redis  # noqa: E402


def old_source(rev: str) -> str:
    def show(path: str) -> str:
        return subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    return show("antre/lua/_lib.lua") + "\n" + show("antre/lua/enqueue.lua")


def cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


UNIQUE_NAMES = json.dumps([*NEW_FIELDS, "ukey", "unique_ms"])


def block(client: redis.Redis, sha: str, names_arg: str, k: QueueKeys, n: int, tag: str,
          delay_s: float) -> float:
    """Server CPU µs per call over ``n`` pipelined calls (a unique job when ``names_arg`` is
    ``UNIQUE_NAMES``)."""
    now = 1_700_000_000_000
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        values = encode_new(JobSpec("noop", {"i": i}, f"{tag}:{i}", delay_s=delay_s), k.queue,
                            now)
        if names_arg == UNIQUE_NAMES:
            values += [k.unique(f"{tag}:{i}"), "0"]
        pipe.evalsha(sha, 5, k.ready, k.scheduled, k.stats, k.types, k.wake,
                     k.job_prefix, now, names_arg, pack_new(values))
    start = cpu_s(client)
    pipe.execute()
    return (cpu_s(client) - start) / n * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--before", required=True, help="git revision of the 'before' script")
    p.add_argument("--blocks", type=int, default=40)
    p.add_argument("--block", type=int, default=500)
    args = p.parse_args()
    out: dict[str, Any] = {}
    with EmbeddedRedis(appendonly=False) as server:
        client = redis.Redis.from_url(server.url)
        shas = {"before": client.script_load(old_source(args.before)),
                "after": client.script_load(source("enqueue"))}
        names = {"before": json.dumps(list(NEW_FIELDS)), "after": ""}
        k = QueueKeys("bench")
        for case, delay_s in (("immediate", 0.0), ("delay_s=60", 60.0), ("unique=True", 0.0)):
            per: dict[str, list[float]] = {"before": [], "after": []}
            for b in range(args.blocks):
                for side in ("before", "after") if b % 2 else ("after", "before"):
                    client.flushall()
                    names_arg = UNIQUE_NAMES if case == "unique=True" else names[side]
                    per[side].append(block(client, shas[side], names_arg, k, args.block,
                                           f"{side}{b}", delay_s))
            out[case] = {side: {"median_us": round(statistics.median(v), 2),
                                "quartiles_us": [round(q, 2) for q in
                                                 statistics.quantiles(v, n=4)]}
                         for side, v in per.items()}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
