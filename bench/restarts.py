"""Worker process restarts under the demo's traffic, two checkouts taking turns in one run.

``python3 bench/restarts.py --before DIR --segment-s 75 --segments 4``: segments of
``antre worker antre_demo:app --processes 2 --threads 4`` (the demo's pool, the demo's fake
email provider) under ``antre_demo.Traffic`` at 4 events/s (poison jobs every 60 s), the
worker's code alternating between DIR (e.g. ``git archive REV | tar -x -C DIR``) and this
checkout, each segment on a fresh private Redis and SQLite file. Per variant: the pool's
restarts by exit (from its log), hand-backs and lease expirations (siblings started over), the
deliveries of the longest jobs (``slow_report``), and the restarts recorded by cause (a
checkout that records them). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.lib.tree import code_path  # noqa: E402

from antre.embedded import EmbeddedRedis  # noqa: E402

EXIT_LINE = re.compile(r"worker process \d+ exited with (code \d+|signal \w+)")


def segment(tree: str, seconds: float, seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(data_dir=os.path.join(tmp, "redis")).start()
        env = dict(os.environ, ANTRE_REDIS_URL=server.url,
                   ANTRE_DATABASE_URL=f"sqlite:///{tmp}/antre.db", ANTRE_DEMO="1",
                   ANTRE_DEMO_EMAIL_RATE="2", ANTRE_DEMO_EMAIL_OUTAGE_EVERY_S="300",
                   ANTRE_LOG_FORMAT="text", ANTRE_LOG_LEVEL="WARNING",
                   PYTHONPATH=code_path(tree))
        os.environ.update({k: env[k] for k in ("ANTRE_REDIS_URL", "ANTRE_DATABASE_URL",
                                                "ANTRE_DEMO", "ANTRE_DEMO_EMAIL_RATE",
                                                "ANTRE_DEMO_EMAIL_OUTAGE_EVERY_S")})
        from antre_demo import Traffic, make_app, setup
        app = make_app()
        setup(app)
        log_path = os.path.join(tmp, "pool.log")
        with open(log_path, "wb") as log:
            pool = subprocess.Popen([sys.executable, "-m", "antre_cli", "worker", "antre_demo:app",
                                     "--processes", "2", "--threads", "4"], cwd=tree, env=env,
                                    stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        stop = threading.Event()
        producer = threading.Thread(target=Traffic(app, rate_per_s=4.0, seed=seed).run,
                                    args=(stop,), daemon=True)
        producer.start()
        stop.wait(seconds)
        stop.set()
        producer.join(10)
        pool.send_signal(signal.SIGTERM)
        try:
            pool.wait(60)
        except subprocess.TimeoutExpired:
            pool.kill()
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        exits = Counter(EXIT_LINE.findall(text))
        stats: Counter[str] = Counter()
        for q in ("emails", "stock", "webhooks", "integrations", "batch"):
            for k, v in app.redis.hgetall(app.queue(q).keys.stats).items():
                try:
                    stats[k] += int(v)
                except ValueError:
                    pass
        deliveries = []
        prefix = app.queue("batch").keys.job("")
        for key in app.redis.scan_iter(match=prefix + "*", count=1000):
            if app.redis.type(key) != "hash":
                continue
            h = app.redis.hmget(key, "type", "deliveries")
            if h[0] == "slow_report" and h[1]:
                deliveries.append(int(h[1]))
        by_cause: dict[str, int] = {}
        from antre.observe.registry import WorkerRegistry
        if hasattr(WorkerRegistry, "restart_counts"):  # (this checkout's registry reads them)
            by_cause = {f"{c}|{t}": n for (c, t), n in
                        WorkerRegistry(app.redis).restart_counts().items()}
        server.stop()
        return {"restarts": sum(exits.values()), "exits": dict(exits),
                "handed_back": stats.get("handed_back", 0), "expired": stats.get("expired", 0),
                "acked": stats.get("acked", 0), "enqueued": stats.get("enqueued", 0),
                "slow_report_deliveries_max": max(deliveries, default=0),
                "slow_report_redelivered": sum(1 for d in deliveries if d > 1),
                "slow_report_jobs": len(deliveries), "by_cause": by_cause}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True, help="the other checkout's root")
    p.add_argument("--segment-s", type=float, default=75.0)
    p.add_argument("--segments", type=int, default=4, help="in all, taking turns")
    args = p.parse_args()
    totals: dict[str, Counter[str]] = {"before": Counter(), "after": Counter()}
    runs = []
    for i in range(args.segments):
        name = "before" if i % 2 == 0 else "after"
        tree = os.path.abspath(args.before) if name == "before" else ROOT
        out = segment(tree, args.segment_s, seed=i // 2)
        runs.append({"variant": name, **out})
        print(json.dumps(runs[-1]), flush=True)
        for k, v in out.items():
            if isinstance(v, int):
                totals[name][k] += v
            elif isinstance(v, dict):
                for kk, vv in v.items():
                    totals[name][f"{k}:{kk}"] += vv
    print(json.dumps({"segment_s": args.segment_s, "segments": args.segments,
                      "totals": {k: dict(v) for k, v in totals.items()}}, indent=1))


if __name__ == "__main__":
    main()
