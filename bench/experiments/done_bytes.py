"""Redis memory per ready job and per done job, git revisions side by side (issue 29).

    python3 bench/experiments/done_bytes.py REV [REV ...] [--jobs 10000]     ('.': this working tree)

For each revision (extracted as ``bench/run --ab`` does: bench/cost.py ``tree``), on one
private Redis flushed between them: ``--jobs`` jobs of the ``small`` row (the handler returns
``{"ok": true, "i": i}``) enqueued with the revision's ``app.enqueue_many``, then drained by
``antre worker bench.apps.cost:app`` as shipped. Prints, per revision, ``used_memory`` after the
fill minus before, per job (a ready job: its hash, its place in the ready list and the
idempotency index), after the drain minus before, per job (a done job: its hash, its timeline
if it has one, the done index), ``MEMORY USAGE`` (SAMPLES 0) of 100 done jobs' hashes and
timelines, and the keys left.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis  # noqa: E402
from bench.lib import antre_bench as ab  # noqa: E402
from bench import cost  # noqa: E402


def measure(url: str, rev: str, n: int) -> dict[str, object]:
    path = cost.tree(rev)
    c = redis.Redis.from_url(url, decode_responses=True)
    ab.flush(c)
    c.memory_purge()
    time.sleep(0.2)
    before = int(c.info("memory")["used_memory"])
    cost.fill(url, path, "small", n)
    filled = int(c.info("memory")["used_memory"])
    cost.drain(url, path, n)
    time.sleep(0.3)  # the last batch's settle lands
    c.delete("bench:progress")
    drained = int(c.info("memory")["used_memory"])
    tag = next(k for k in c.scan_iter("*:done", count=1000)).removesuffix("done")
    ids = c.zrange(tag + "done", 0, 99)
    hashes = [c.memory_usage(tag + "job:" + i, samples=0) or 0 for i in ids]
    timelines = [c.memory_usage(tag + "tl:" + i, samples=0) or 0 for i in ids]
    out = {"rev": rev, "jobs": n, "ready_bytes_per_job": round((filled - before) / n),
           "done_bytes_per_job": round((drained - before) / n),
           "done_hash_bytes": round(statistics.fmean(hashes)),
           "done_timeline_bytes": round(statistics.fmean(timelines)), "keys": c.dbsize()}
    c.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revs", nargs="+")
    p.add_argument("--jobs", type=int, default=10_000)
    args = p.parse_args(argv)
    with EmbeddedRedis() as srv:
        for rev in args.revs:
            print(json.dumps(measure(srv.url, rev, args.jobs)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
