"""Dashboard render time on a big queue: 1,000,000 ready jobs and 100,000 dead-letter entries
(plus in-flight and scheduled jobs), each page rendered through the Flask app with a logged-in
operator against a private Redis. Reports the median and worst of several renders per page, and
the round trip of the action bar's htmx POSTs (replay 1 / 50 selected dead jobs, extend 1 lease;
each answer is the refreshed partial; SQLite audit log, one entry per job).

    python3 bench/dashboard_render.py [--ready 1000000] [--dead 100000] [--runs 7] [--out F]

Writes bench/RENDER.md and bench/render.json (or ``--out`` and its JSON). The performance
pages read a full week of slots for every type (``populate_perf``: their most).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import tree  # noqa: E402

tree.use()  # antre_web is this tree's webapp/, not the venv's install
from antre.embedded import EmbeddedRedis
from antre.engine.queue import JobSpec, Queue
from antre_web import create_app

TYPES = ("send_email", "charge_card", "sync_stock", "render_invoice")
ERRORS = ("smtp 554 rejected for user {n}", "card {n} declined", "sku {n} not found",
          "template error at line {n}")


def populate(q: Queue, ready: int, dead: int, inflight: int, scheduled: int) -> None:
    chunk = 5000
    t0 = time.monotonic()
    for start in range(0, dead + inflight, chunk):
        n = min(chunk, dead + inflight - start)
        q.enqueue_many([JobSpec(TYPES[i % 4], {"n": i, "to": f"user{i}@example.org"},
                                f"op:{start + i}") for i in range(n)])
    moved = 0
    while moved < dead:
        jobs = q.reserve("bench-worker", count=min(1000, dead - moved))
        pipe = q.redis.pipeline(transaction=False)
        k = q.keys
        for j, job in enumerate(jobs):
            i = moved + j
            err = ERRORS[i % 4].format(n=i)
            q.scripts.bury(keys=[k.job(job.id), k.inflight, k.dead, k.stats, k.error_groups],
                           args=[job.id, job.epoch, q.clock() - (dead - i) * 100,
                                 f"permanent error: {err}", err, "permanent", "Traceback ...",
                                 f"permanent: {ERRORS[i % 4]}", k.dead_type_prefix,
                                 k.dead_group_prefix, 1], client=pipe)
        pipe.execute()
        moved += len(jobs)
    q.reserve("bench-worker", count=inflight)
    for start in range(0, ready, chunk):
        n = min(chunk, ready - start)
        q.enqueue_many([JobSpec(TYPES[i % 4], {"n": i}, f"r:{start + i}") for i in range(n)])
    q.enqueue_many([JobSpec("send_email", {"n": i}, f"s:{i}", delay_s=3600)
                    for i in range(scheduled)])
    print(f"populated in {time.monotonic() - t0:.1f}s", flush=True)


def populate_perf(client: redis.Redis, queue: str, now: int) -> None:
    """A full week of performance slots (antre/observe/perf.py) for every type, every field
    set: the most the performance pages can ever read (their cost does not depend on depth)."""
    from antre.engine import keys
    from antre.observe import perf

    k = keys.QueueKeys(queue)
    pipe = client.pipeline(transaction=False)
    for res in ("m", "h"):
        last = perf.slot_of(res, now)
        count = perf.KEEP_MS[res] // perf.SLOT_MS[res]
        for slot in range(last - count, last + 1):
            pipe.hset(k.perf(res, slot), mapping={
                f: (slot * 7 + i) % 97 + 1 for t in TYPES
                for i, f in enumerate(perf.type_fields(t))})
    pipe.execute()


def login(client) -> None:
    page = client.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    resp = client.post("/login", data={"username": "op", "password": "bench-password",
                                       "csrf_token": token})
    assert resp.status_code == 302, resp.status_code


def time_actions(web, q: Queue, runs: int) -> list[dict]:
    """Round trips of the action bar (htmx POST, the refreshed partial back): replay one
    selected dead job, replay 50, extend one lease. Every run acts on other jobs."""
    with web.session_transaction() as s:
        csrf = s["csrf"]
    headers = {"HX-Request": "true"}
    dead = iter(q.redis.zrange(q.keys.dead, 0, runs * 51))
    leases = iter(q.redis.zrange(q.keys.inflight, 0, runs))
    actions = {
        "row action: replay 1 selected": lambda: ("/dlq/bench/selected",
                                                  {"op": "replay", "ids": [next(dead)]}),
        "row action: replay 50 selected": lambda: ("/dlq/bench/selected", {
            "op": "replay", "ids": [next(dead) for _ in range(50)]}),
        "row action: extend 1 lease": lambda: ("/inflight/bench/selected", {
            "op": "extend", "seconds": "60", "ids": [_lease_ref(q, next(leases))]}),
    }
    rows = []
    for name, make in actions.items():
        times = []
        for _ in range(runs):
            url, data = make()
            t0 = time.perf_counter()
            resp = web.post(url, data={**data, "csrf_token": csrf, "reason": "bench"},
                            headers=headers)
            times.append((time.perf_counter() - t0) * 1000)
            assert resp.status_code == 200 and b"not in the" not in resp.data, (url, resp.data[:300])
        rows.append({"page": name, "url": url, "median_ms": round(statistics.median(times), 1),
                     "max_ms": round(max(times), 1)})
        print(f"{name:<32} {rows[-1]['median_ms']:>8.1f} ms (max {rows[-1]['max_ms']:.1f})",
              flush=True)
    return rows


def operator_client(redis_url: str, tmp: str) -> Any:
    """A test client of the dashboard on ``redis_url`` (SQLite in ``tmp``), logged in as an
    operator: what every bench page timing reads through."""
    app = create_app({"ANTRE_REDIS_URL": redis_url,
                      "ANTRE_DATABASE_URL": f"sqlite:///{tmp}/antre.db",
                      "SECRET_KEY": "bench-only-session-key-8e1d4c7a2f9b6e3d0c5a"})
    app.extensions["antre"].users.add("op", "operator", "bench-password")
    web = app.test_client()
    login(web)
    return web


def _lease_ref(q: Queue, job_id: str) -> str:
    return f"{q.redis.hget(q.keys.job(job_id), 'epoch')}:{job_id}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready", type=int, default=1_000_000)
    ap.add_argument("--dead", type=int, default=100_000)
    ap.add_argument("--inflight", type=int, default=2_000)
    ap.add_argument("--scheduled", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default="RENDER.md", help="the report's name in bench/ "
                    "(its JSON beside it: render.json for RENDER.md, else <name>.json)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="antre-render-")
    with EmbeddedRedis(data_dir=os.path.join(tmp, "redis")) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        q = Queue(client, "bench")
        populate(q, args.ready, args.dead, args.inflight, args.scheduled)
        populate_perf(client, "bench", int(time.time() * 1000))
        memory = client.info("memory")["used_memory_human"]
        web = operator_client(server.url, tmp)
        dead_id = q.redis.zrange(q.keys.dead, 0, 0)[0]
        group = next(iter(client.hgetall(q.keys.error_groups)))
        pages = {
            "overview": "/",
            "in-flight": "/inflight/?queue=bench",
            "scheduled": "/scheduled/?queue=bench",
            "DLQ first page": "/dlq/?queue=bench",
            "DLQ page 1000": "/dlq/?queue=bench&offset=50000",
            "DLQ by type": "/dlq/?queue=bench&type=charge_card",
            "DLQ by error group": f"/dlq/?queue=bench&group={group}",
            "DLQ last hour": "/dlq/?queue=bench&window=1h",
            "DLQ job detail": f"/dlq/bench/{dead_id}",
            "locks": "/locks/",
            "workers": "/workers/",
            "API overview": "/api/overview",
            "API dead count by type": "/api/queues/bench/dead/count?type=charge_card",
            "performance, 24 h": "/types/",
            "performance, 7 d": "/types/?window=7d",
            "performance of a type, 7 d": "/types/charge_card?window=7d",
            "API performance of a type": "/api/types/charge_card",
            "incident view": "/incident/",
            "groups": "/groups/?queue=bench",
            "flows": "/flows/?queue=bench",
        }
        rows = []
        for name, url in pages.items():
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                resp = web.get(url)
                times.append((time.perf_counter() - t0) * 1000)
                assert resp.status_code == 200, (url, resp.status_code)
            rows.append({"page": name, "url": url, "median_ms": round(statistics.median(times), 1),
                         "max_ms": round(max(times), 1)})
            print(f"{name:<24} {rows[-1]['median_ms']:>8.1f} ms (max {rows[-1]['max_ms']:.1f})",
                  flush=True)
        rows += time_actions(web, q, args.runs)
        depth = {"ready": client.llen(q.keys.ready), "dead": client.zcard(q.keys.dead),
                 "inflight": client.zcard(q.keys.inflight),
                 "scheduled": client.zcard(q.keys.scheduled)}
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    result = {"depth": depth, "redis_memory": memory, "runs": args.runs, "pages": rows,
              "machine": f"{os.cpu_count()} cores, {cpu}", "python": platform.python_version(),
              "command": "python3 bench/dashboard_render.py " + " ".join(sys.argv[1:])}
    json_name = "render.json" if args.out == "RENDER.md" else args.out.rsplit(".", 1)[0] + ".json"
    with open(os.path.join(ROOT, "bench", json_name), "w") as fh:
        json.dump(result, fh, indent=2)
    lines = ["# Dashboard render time on a big queue", "",
             f"Queue depth: {depth['ready']:,} ready, {depth['dead']:,} dead, "
             f"{depth['inflight']:,} in flight, {depth['scheduled']:,} scheduled "
             f"(Redis memory {memory}). Machine: {result['machine']}; Python "
             f"{result['python']}. Each page rendered {args.runs} times through the Flask app "
             "(server side, logged-in operator, private Redis on a unix socket).", "",
             f"Command: `{result['command']}`", "",
             "| page | median ms | worst ms |", "|---|---:|---:|"]
    lines += [f"| {r['page']} | {r['median_ms']} | {r['max_ms']} |" for r in rows]
    lines += ["", "Every read is indexed (LLEN/ZCARD counts, ZRANGE by score or rank with "
              "LIMIT, one pipelined HMGET per page): render time does not depend on depth."]
    with open(os.path.join(ROOT, "bench", args.out), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
