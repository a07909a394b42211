"""The Redis server's CPU per job of the hot-path scripts alone (no worker): ``reserve.lua`` in
batches of 16 (the worker's default prefetch), then ``ack_many`` of each batch, on a private
Redis, for one source tree (A/B: run it once per tree, interleaved).

    .venv/bin/python bench/experiments/script_cost.py /path/to/tree [--jobs 20000] [--batch 16]

Prints the server's CPU µs per job (``INFO cpu`` user + sys) and EVALSHA µs per job (``INFO
commandstats``: the scripts' own time, inner commands included) for each phase.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tree")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args()
    sys.path.insert(0, args.tree)
    import redis

    from antre.embedded import EmbeddedRedis
    from antre.engine.queue import JobSpec, Queue

    def cpu(c: redis.Redis) -> float:
        i = c.info("cpu")
        return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])

    def evalsha_us(c: redis.Redis) -> float:
        return float(c.info("commandstats")["cmdstat_evalsha"]["usec"])

    n = args.jobs
    with EmbeddedRedis(tcp=True, appendonly=False) as server:
        c = redis.Redis.from_url(server.url, decode_responses=True)
        q = Queue(c, "default")
        q.enqueue_many([JobSpec("noop", {}, f"k{i}") for i in range(n)])
        c.config_resetstat()
        t = cpu(c)
        batches = [q.reserve("host:1:ab", args.batch) for _ in range(n // args.batch)]
        reserve_cpu, reserve_ev = (cpu(c) - t) / n * 1e6, evalsha_us(c) / n
        t = cpu(c)
        for batch in batches:
            q.ack_many([(j, None) for j in batch], notes=[{"ran_ms": 0}] * len(batch))
        ack_cpu, ack_ev = (cpu(c) - t) / n * 1e6, evalsha_us(c) / n - reserve_ev
        print(f"{args.tree}: reserve {reserve_cpu:.1f} µs/job (EVALSHA {reserve_ev:.1f}), "
              f"ack {ack_cpu:.1f} µs/job (EVALSHA {ack_ev:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
