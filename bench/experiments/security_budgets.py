"""What one viewer request costs Redis, and what a Basic-auth request costs the dashboard
(issue 24, items 11 and 12): the purge dry run of 200,000 ready jobs walked whole (the code
before) beside one bounded count request, and /api/overview with HTTP Basic, argon2 defaults,
the first request (hashed) beside the cached ones.

    PYTHONPATH=$PWD python3 bench/experiments/security_budgets.py [--jobs 200000]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from bench.lib import tree  # noqa: E402

tree.use()  # antre_web is this tree's webapp/, not the venv's install

import antre  # noqa: E402
from antre.control.purge import Purger, PurgeFilter  # noqa: E402
from antre.embedded import EmbeddedRedis  # noqa: E402
from antre.engine.envelope import JobSpec  # noqa: E402
from antre_web import create_app  # noqa: E402
from webtools import TEST_SECRET_KEY  # noqa: E402


def evalsha(r) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200_000)
    args = ap.parse_args()
    server = EmbeddedRedis(tcp=True)
    server.start()
    try:
        app = antre.Antre(redis_url=server.url)
        q = app.queue("default")
        for start in range(0, args.jobs, 10_000):
            q.enqueue_many([JobSpec("email", {"i": i}, f"k{i}")
                            for i in range(start, min(args.jobs, start + 10_000))])
        purger, flt, r = Purger(app.redis), PurgeFilter("ready"), app.redis
        before = evalsha(r)
        full_ms, total = timed(lambda: purger.count("default", flt))
        full_calls = evalsha(r) - before
        before = evalsha(r)
        tally_ms, tally = timed(lambda: purger.tally("default", flt))
        tally_calls = evalsha(r) - before
        print(f"purge dry run of {args.jobs} ready jobs")
        print(f"  whole walk (before):  {full_ms:8.1f} ms  {full_calls:5d} EVALSHA  count={total}")
        print(f"  one bounded request:  {tally_ms:8.1f} ms  {tally_calls:5d} EVALSHA  "
              f"at least {tally.matched} (exact={tally.exact})")
        with tempfile.TemporaryDirectory() as d:
            web = create_app({"ANTRE_REDIS_URL": server.url, "TESTING": True,
                              "ANTRE_DATABASE_URL": f"sqlite:///{d}/a.db",
                              "SECRET_KEY": TEST_SECRET_KEY})
            web.extensions["antre"].users.add("viewer", "viewer", "correct horse battery")
            c = web.test_client()
            token = base64.b64encode(b"viewer:correct horse battery").decode()
            hdr = {"Authorization": f"Basic {token}"}
            first_ms, _ = timed(lambda: c.get("/api/overview", headers=hdr))
            rest = [timed(lambda: c.get("/api/overview", headers=hdr))[0] for _ in range(20)]
            print("HTTP Basic /api/overview (argon2 defaults)")
            print(f"  first request (hashed): {first_ms:6.1f} ms")
            print(f"  cached, median of 20:   {statistics.median(rest):6.1f} ms")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
