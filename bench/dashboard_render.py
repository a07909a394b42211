"""Dashboard render time on a big queue: 1,000,000 ready jobs and 100,000 dead-letter entries
(plus in-flight and scheduled jobs, fair-share groups, flows and held locks), every page
rendered through the Flask app with a logged-in admin against a private Redis. Reports the
median and worst server time of several renders per page and the median CPU time the request
took in the dashboard's process (which hardly depends on the machine's load), and the round
trip of the action bar's htmx POSTs (replay 1 / 50 selected dead jobs, extend 1 lease; each
answer is the refreshed partial; SQLite audit log, one entry per job).

    python3 bench/dashboard_render.py [--ready 1000000] [--dead 100000] [--runs 7]
                                      [--base /tmp/base] [--out F]

With ``--base`` (another checkout of the code), the same pages of both trees on the same data,
interleaved request by request (``bench/lib/render_child.py``: one child process per tree), so their
ratio holds on a loaded machine. Writes bench/results/render.md and render.json (or ``--out``
and its JSON) with the load average seen during the run. The performance pages read a full
week of slots for every type (``populate_perf``: their most).
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
from bench.lib import tree  # noqa: E402

tree.use()  # antre_web is this tree's webapp/, not the venv's install
code_path = tree.code_path
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
    hours: dict[int, dict[str, int]] = {}
    for res in ("m", "h"):
        last = perf.slot_of(res, now)
        count = perf.KEEP_MS[res] // perf.SLOT_MS[res]
        for slot in range(last - count, last + 1):
            values = {f: (slot * 7 + i) % 97 + 1 for t in TYPES
                      for i, f in enumerate(perf.type_fields(t))}
            pipe.hset(k.perf(res, slot), mapping=values)
            if res == "h":
                hours[slot] = values
    # the 6-hour and daily slots hold the sums of their hours, as the workers write them
    # (code without them never reads these keys)
    for res in ("q", "d"):
        if res not in perf.SLOT_MS:
            continue
        per = perf.SLOT_MS[res] // perf.SLOT_MS["h"]
        sums: dict[int, dict[str, int]] = {}
        for hour, values in hours.items():
            into = sums.setdefault(hour // per, {})
            for f, v in values.items():
                into[f] = into.get(f, 0) + v
        for slot, values in sums.items():
            pipe.hset(k.perf(res, slot), mapping=values)
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


def populate_more(client: redis.Redis, url: str, groups: int, flows: int, locks: int) -> None:
    """What the newer pages show: fair-share groups with waiting lines (``groups`` groups, two
    slots each, ten jobs each), ``flows`` chains of three steps, ``locks`` held locks."""
    from antre import Antre
    from antre.engine.locks import Locks

    app = Antre(redis_url=url)

    @app.handler("flow_step", queue="bench")
    def flow_step(ctx: Any, payload: Any) -> None:  # never run here
        return None

    q = Queue(client, "bench")
    t0 = time.monotonic()
    specs = [JobSpec("sync_stock", {"n": i}, f"g:{i}", group=f"tenant:{i % groups}",
                     group_concurrency=2) for i in range(groups * 10)]
    for start in range(0, len(specs), 5000):
        q.enqueue_many(specs[start:start + 5000])
    for i in range(flows):
        app.chain(*[app.spec("flow_step", {"i": i, "s": s}, idempotency_key=f"f:{i}:{s}")
                    for s in range(3)]).enqueue()
    held = Locks(client)
    for i in range(locks):
        held.acquire(f"order:{i}", 3_600_000, owner=f"bench-{i}")
    print(f"groups, flows, locks in {time.monotonic() - t0:.1f}s", flush=True)


def page_list(client: redis.Redis, q: Queue) -> dict[str, str]:
    """Every page of the dashboard (and the JSON twins most read), with ids from the data."""
    dead_id = q.redis.zrange(q.keys.dead, 0, 0)[0]
    inflight_id = q.redis.zrange(q.keys.inflight, 0, 0)[0]
    group = next(iter(client.hgetall(q.keys.error_groups)))
    tenant = (client.zrevrange(q.keys.group_waiting, 0, 0) or ["tenant:0"])[0]
    # a running flow (the state names of antre/flows)
    pages = {
        "overview": "/",
        "overview charts": "/charts?queue=bench",
        "incident view": "/incident/",
        "in-flight": "/inflight/?queue=bench",
        "scheduled": "/scheduled/?queue=bench",
        "DLQ first page": "/dlq/?queue=bench",
        "DLQ page 1000": "/dlq/?queue=bench&offset=50000",
        "DLQ by type": "/dlq/?queue=bench&type=charge_card",
        "DLQ by error group": f"/dlq/?queue=bench&group={group}",
        "DLQ last hour": "/dlq/?queue=bench&window=1h",
        "DLQ job detail": f"/dlq/bench/{dead_id}",
        "error groups": "/errors/?queue=bench",
        "job page (dead)": f"/jobs/bench/{dead_id}",
        "job page (in flight)": f"/jobs/bench/{inflight_id}",
        "job edit": f"/jobs/bench/{dead_id}/edit",
        "job edit, dry run": f"/jobs/bench/{dead_id}/edit?payload=%7B%22n%22%3A+1%7D",
        "finder": "/find",
        "finder, payload search (a budgeted step)": "/find?q=n%3D5&queue=bench&state=dead",
        "browse ready": "/browse/bench/ready",
        "locks": "/locks/",
        "workers": "/workers/",
        "groups": "/groups/?queue=bench",
        "a group": f"/groups/bench/{tenant}",
        "flows": "/flows/?queue=bench",
        "performance, 24 h": "/types/",
        "performance, 7 d": "/types/?window=7d",
        "performance of a type, 24 h": "/types/charge_card",
        "performance of a type, 7 d": "/types/charge_card?window=7d",
        "purge": "/purge/?queue=bench",
        "audit log": "/audit/",
        "idempotency lookup": "/idempotency/?key=op:5",
        "schedules": "/schedules/",
        "users": "/users/",
        "account": "/account",
        "API overview": "/api/overview",
        "API dead count by type": "/api/queues/bench/dead/count?type=charge_card",
        "API types, 7 d": "/api/types?window=7d",
        "API performance of a type": "/api/types/charge_card",
        "metrics": "/metrics",
    }
    flows = client.zrevrange(q.keys.flows_by_state("running"), 0, 0)
    if flows:
        pages["a flow"] = f"/flows/bench/{flows[0]}"
    return pages


class Side:
    """One code tree's dashboard in a child process (``bench/lib/render_child.py``)."""

    def __init__(self, name: str, tree: str, redis_url: str) -> None:
        import subprocess

        self.name, self.tree = name, tree
        tmp = tempfile.mkdtemp(prefix=f"antre-render-{name}-")
        env = {**os.environ, "PYTHONPATH": code_path(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "bench", "lib", "render_child.py"), redis_url, tmp],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        first = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert json.loads(first).get("ready"), first

    def ask(self, method: str, url: str, data: dict | None = None) -> dict:
        self.proc.stdin.write(json.dumps({"m": method, "url": url, "data": data or {}}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=60)


def loadavg() -> float:
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


def commit_of(tree: str) -> str:
    import subprocess

    out = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def run_pages(sides: list[Side], pages: dict[str, str], runs: int, loads: list[float]
              ) -> dict[str, dict[str, list[float]]]:
    """Each page ``runs`` times per side, the sides interleaved request by request (the
    order swapped every round), after one warm-up request each."""
    times: dict[str, dict[str, list[float]]] = {
        n: {k: [] for s in sides for k in (s.name, s.name + " cpu")} for n in pages}
    for name, url in pages.items():
        for side in sides:
            side.ask("GET", url)
        for r in range(runs):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                out = side.ask("GET", url)
                assert out["status"] == 200, (side.name, url, out)
                times[name][side.name].append(out["ms"])
                times[name][side.name + " cpu"].append(out.get("cpu_ms", 0.0))
        loads.append(loadavg())
        print(f"{name:<30} " + "  ".join(
            f"{s.name} {statistics.median(times[name][s.name]):8.1f} ms "
            f"(cpu {statistics.median(times[name][s.name + ' cpu']):.1f})" for s in sides)
            + f"  (load {loads[-1]:.1f})", flush=True)
    return times


def run_actions(sides: list[Side], q: Queue, runs: int, loads: list[float]
                ) -> dict[str, dict[str, list[float]]]:
    """The action bar's htmx POSTs (the refreshed partial back): replay 1 and 50 selected
    dead jobs, extend 1 lease; interleaved; every request acts on other jobs."""
    n = len(sides) * (runs + 1)
    dead = iter(q.redis.zrange(q.keys.dead, 0, n * 51))
    leases = iter(q.redis.zrange(q.keys.inflight, 0, n))
    actions = {
        "row action: replay 1 selected": lambda: ("/dlq/bench/selected",
                                                  {"op": "replay", "ids": [next(dead)]}),
        "row action: replay 50 selected": lambda: ("/dlq/bench/selected", {
            "op": "replay", "ids": [next(dead) for _ in range(50)]}),
        "row action: extend 1 lease": lambda: ("/inflight/bench/selected", {
            "op": "extend", "seconds": "60", "ids": [_lease_ref(q, next(leases))]}),
    }
    times: dict[str, dict[str, list[float]]] = {}
    for name, make in actions.items():
        times[name] = {k: [] for s in sides for k in (s.name, s.name + " cpu")}
        for r in range(runs + 1):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                url, data = make()
                out = side.ask("POST", url, data)
                assert out["status"] == 200 and not out["refused"], (side.name, url, out)
                if r:  # the first: a warm-up
                    times[name][side.name].append(out["ms"])
                    times[name][side.name + " cpu"].append(out.get("cpu_ms", 0.0))
        loads.append(loadavg())
        print(f"{name:<30} " + "  ".join(
            f"{s.name} {statistics.median(times[name][s.name]):8.1f} ms" for s in sides),
            flush=True)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ready", type=int, default=1_000_000)
    ap.add_argument("--dead", type=int, default=100_000)
    ap.add_argument("--inflight", type=int, default=2_000)
    ap.add_argument("--scheduled", type=int, default=20_000)
    ap.add_argument("--groups", type=int, default=500, help="fair-share groups (10 jobs each)")
    ap.add_argument("--flows", type=int, default=300, help="chains of 3 steps")
    ap.add_argument("--locks", type=int, default=200, help="held locks")
    ap.add_argument("--runs", type=int, default=7, help="requests per page and side")
    ap.add_argument("--base", default="", help="a checkout of the code to compare with (e.g. "
                    "`git worktree add --detach /tmp/base main`): the same pages on the same "
                    "data, the two interleaved request by request")
    ap.add_argument("--data", default="", help="a directory for the data set: saved there "
                    "(dump.rdb) once populated and reused by the next run with the same --data "
                    "(the sizes given then are ignored; the slots of the performance pages are "
                    "written afresh)")
    ap.add_argument("--out", default="render.md", help="the report's name in "
                    "bench/results/ (its JSON beside it: <name>.json)")
    args = ap.parse_args()
    data_dir = args.data or os.path.join(tempfile.mkdtemp(prefix="antre-render-"), "redis")
    os.makedirs(data_dir, exist_ok=True)
    saved = os.path.exists(os.path.join(data_dir, "dump.rdb"))
    loads = [loadavg()]
    with EmbeddedRedis(data_dir=data_dir, startup_timeout=600) as server:  # (loading a dump)
        client = redis.Redis.from_url(server.url, decode_responses=True)
        q = Queue(client, "bench")
        if saved:
            print(f"reusing the data set saved in {data_dir}", flush=True)
        else:
            populate(q, args.ready, args.dead, args.inflight, args.scheduled)
            populate_more(client, server.url, args.groups, args.flows, args.locks)
            if args.data:  # before the actions change it
                client.bgsave()
                while client.info("persistence")["rdb_bgsave_in_progress"]:
                    time.sleep(0.5)
        populate_perf(client, "bench", int(time.time() * 1000))
        memory = client.info("memory")["used_memory_human"]
        sides = [Side("tip", ROOT, server.url)]
        if args.base:
            sides.append(Side("base", os.path.abspath(args.base), server.url))
        pages = page_list(client, q)
        times = run_pages(sides, pages, args.runs, loads)
        times.update(run_actions(sides, q, args.runs, loads))
        for side in sides:
            side.close()
        depth = {"ready": client.llen(q.keys.ready), "dead": client.zcard(q.keys.dead),
                 "inflight": client.zcard(q.keys.inflight),
                 "scheduled": client.zcard(q.keys.scheduled)}
    write_report(args, sides, pages, times, depth, memory, loads)
    return 0


def write_report(args: argparse.Namespace, sides: list[Side], pages: dict[str, str],
                 times: dict[str, dict[str, list[float]]], depth: dict[str, int], memory: str,
                 loads: list[float]) -> None:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    rows = []
    for name, per in times.items():
        row: dict[str, Any] = {"page": name, "url": pages.get(name, "")}
        for side, ts in per.items():
            if side.endswith(" cpu"):
                row[f"{side[:-4]}_cpu_ms"] = round(statistics.median(ts), 1)
                continue
            row[f"{side}_median_ms"] = round(statistics.median(ts), 1)
            row[f"{side}_max_ms"] = round(max(ts), 1)
        if "base" in per:
            row["ratio"] = round(row["tip_median_ms"] / row["base_median_ms"], 2)
        rows.append(row)
    result = {"depth": depth, "redis_memory": memory, "runs": args.runs, "pages": rows,
              "sides": {s.name: commit_of(s.tree) for s in sides},
              "load_average": {"min": min(loads), "max": max(loads),
                               "median": statistics.median(loads)},
              "machine": f"{os.cpu_count()} cores, {cpu}", "python": platform.python_version(),
              "command": "python3 bench/dashboard_render.py " + " ".join(sys.argv[1:])}
    json_name = args.out.rsplit(".", 1)[0] + ".json"
    with open(os.path.join(ROOT, "bench", "results", json_name), "w") as fh:
        json.dump(result, fh, indent=2)
    ab = len(sides) > 1
    la = result["load_average"]
    lines = ["# Dashboard render time on a big queue", "",
             f"Queue depth: {depth['ready']:,} ready, {depth['dead']:,} dead, "
             f"{depth['inflight']:,} in flight, {depth['scheduled']:,} scheduled, "
             f"{args.groups} fair-share groups, {args.flows} flows, {args.locks} locks held "
             f"(Redis memory {memory}). Machine: {result['machine']}; Python "
             f"{result['python']}; load average {la['min']:.1f}-{la['max']:.1f} (median "
             f"{la['median']:.1f}) during the run. Server time of each request through the "
             f"Flask test client (logged-in admin, private Redis on a unix socket), median of "
             f"{args.runs} after a warm-up"
             + (f"; tip ({result['sides']['tip']}) and base ({result['sides']['base']}) on "
                "the same data, interleaved request by request, the order swapped every round"
                if ab else "") + ".", "",
             f"Command: `{result['command']}`", ""]
    if ab:
        lines += ["| page | tip median ms | base median ms | tip / base | tip worst ms | "
                  "tip CPU ms | base CPU ms |", "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['page']} | {r['tip_median_ms']} | {r['base_median_ms']} | "
                  f"{r['ratio']} | {r['tip_max_ms']} | {r['tip_cpu_ms']} | {r['base_cpu_ms']} |"
                  for r in rows]
    else:
        lines += ["| page | median ms | worst ms | CPU ms |", "|---|---:|---:|---:|"]
        lines += [f"| {r['page']} | {r['tip_median_ms']} | {r['tip_max_ms']} | "
                  f"{r['tip_cpu_ms']} |" for r in rows]
    with open(os.path.join(ROOT, "bench", "results", args.out), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
