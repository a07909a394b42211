"""``bench/flows_chaos``: the judged fault-injection run of issue 26 (flows).

    bench/flows_chaos                    # 2,000 chords of 10 children, 2 processes x 4 threads
    bench/flows_chaos --db postgres      # the effects and idempotency records on PostgreSQL
    bench/flows_chaos --flows 50 --script kill9,sweep   # the test suite's size, fixed faults

N flows, each ``app.chord([fchild x 10], fclose)`` as a producer writes it, are run by
``python -m antre_worker worker bench.apps.flows_chaos:app`` (real worker processes, the
shipped defaults: sweeper on, the idempotency store as shipped) while, at random: kill -9 of a
worker child; SIGSTOP of one for longer than its lease, then SIGCONT; kill -9 of Redis and a
restart on the same data (AOF on, ``appendfsync always``); duplicate deliveries (a few jobs in
flight have their lease cut short and are swept back to ready while their worker still runs
them, so two workers hold the same job and the first one's ack is refused); and the children's
own retryable failures. Every child commits a row in ``flow_child`` and every callback a row
in ``flow_callback`` keyed by its flow id (``bench/apps/flows_chaos.py``; no unique
constraints, so a duplicate shows). At the end it checks: every flow succeeded, every callback
committed exactly once (N rows, 0 duplicates), none lost, none fired early (each saw 10
results in the group's order and, in its own transaction, its 10 children's committed rows;
its commit is later than theirs), no child effect twice; it prints the figures, writes
bench/results/flows-chaos-<db>.json and bench/results/flows-chaos.md, and exits 1 if a check
failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

import redis
import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre import Antre, InvalidJob
from antre.embedded import EmbeddedRedis
from antre.engine.queue import Queue
from antre.flows import FlowReader
from bench.lib import antre_bench as ab
from bench.lib import faults
from bench.chaos import Chaos

HERE, PG_DEFAULT, log = ab.HERE, ab.PG_DEFAULT, ab.log
CHILDREN = 10
SCHEMA = (
    "CREATE TABLE flow_child (id {pk}, flow_id TEXT NOT NULL, idem_key TEXT NOT NULL, "
    "job_id TEXT, at DOUBLE PRECISION)",
    "CREATE TABLE flow_callback (id {pk}, flow_id TEXT NOT NULL, job_id TEXT, "
    "results_seen INT, in_order INT, children_committed INT, at DOUBLE PRECISION)",
)
DUPLICATE = "duplicate delivery (lease cut short, swept while its worker ran it)"


class FlowsChaos(Chaos):
    """The faults of ``bench/chaos`` (kill -9, SIGSTOP past the lease) plus a Redis kill -9,
    duplicate deliveries and a producer of chords; its own checks."""

    # -- setup ---------------------------------------------------------------------------------
    def setup_db(self) -> None:
        a = self.args
        if a.db == "postgres":
            self.db_url, self._drop = ab.pg_schema_url(a.pg_url)
            pk = "SERIAL PRIMARY KEY"
        else:
            path = os.path.join(a.work_dir, "flows-chaos.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
            self.db_url, self._drop, pk = f"sqlite:///{path}", (lambda: None), "INTEGER PRIMARY KEY"
        self.engine = sa.create_engine(self.db_url)
        with self.engine.begin() as con:
            for ddl in SCHEMA:
                con.execute(sa.text(ddl.format(pk=pk)))

    def rows(self, sql: str) -> list[Any]:
        with self.engine.connect() as con:
            return list(con.execute(sa.text(sql)).fetchall())

    # -- faults --------------------------------------------------------------------------------
    def _do_restart(self) -> None:
        """kill -9 of Redis, then a start on the same data dir (AOF, appendfsync always)."""
        self.restart_requested.clear()
        with self.redis_lock:
            if self.server.pid:
                os.kill(self.server.pid, signal.SIGKILL)
            self.server.restart()
        self.events["Redis kill -9 and restart (AOF, appendfsync always)"] += 1

    def cut_leases(self, most: int | None = None) -> None:
        """Duplicate deliveries: some jobs in flight get their lease deadline moved into the
        past and the sweeper's script runs at once; each goes back to ready (epoch + 1 on its
        next reserve) while the worker that holds it still runs it. ``most`` None: a few."""
        with self.redis_lock:
            ids = self.client.zrange(self.q.keys.inflight, 0, -1)
            if not ids:
                return
            picks = ids if most == 0 else self.rng.sample(ids, min(len(ids), most or
                                                                 self.rng.randint(1, 5)))
            self.client.zadd(self.q.keys.inflight, {i: 1 for i in picks}, xx=True)
            swept = self.q.sweep()
        self.events[DUPLICATE] += swept.requeued

    def children(self) -> list[Any]:
        """The pool's worker processes that have been up ``--min-age`` seconds (a process
        killed while it starts never runs a job: a loaded machine would see no work done)."""
        return faults.children(self.pool.pid, self.args.min_age)

    def chaos_loop(self) -> None:
        """Random faults paced by the work done, not by the clock: one each time about
        ``--fault-every`` more children have committed (half to one and a half times it), so
        a loaded machine, whose workers take long to start, sees the same faults per flow."""
        faults = [(self.kill9, 3), (self.sigstop, 2), (self.restart_redis, 1),
                  (self.cut_leases, 4)]
        total = sum(w for _, w in faults)
        restarts, goal = 0, self.args.fault_every * self.rng.uniform(0.5, 1.5)
        while not self.stop.wait(0.2):
            if self._committed() < goal:
                continue
            goal += self.args.fault_every * self.rng.uniform(0.5, 1.5)
            pick = self.rng.uniform(0, total)
            for fn, w in faults:
                pick -= w
                if pick <= 0:
                    break
            if fn == self.restart_redis:
                if restarts >= self.args.max_redis_restarts:
                    fn = self.cut_leases
                else:
                    restarts += 1
            self._fault(fn)

    def _committed(self) -> int:
        try:
            return int(self.rows("SELECT count(*) FROM flow_child")[0][0])
        except Exception:  # noqa: BLE001 - the database busy: ask again
            return 0

    def _fault(self, fn: Any) -> None:
        try:
            fn()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log(f"fault {fn.__name__} skipped: Redis away ({exc!r})")
        except Exception as exc:  # noqa: BLE001 - the harness itself must survive its faults
            log(f"fault {fn.__name__} failed: {exc!r}")

    def scripted(self) -> None:
        """``--script kill9,sweep``: each fault once, in order, at even steps of the children
        committed (a kill -9 once a quarter of them are in, ...); ``sweep`` cuts every lease
        in flight (the killed worker's jobs come back at once, the others are delivered
        twice)."""
        steps = [s for s in self.args.script.split(",") if s]
        fns = {"kill9": self.kill9, "sigstop": self.sigstop, "redis": self.restart_redis,
               "sweep": lambda: self.cut_leases(0), "dup": self.cut_leases}
        want = self.args.flows * CHILDREN
        for n, step in enumerate(steps, start=1):
            goal = want * n // (len(steps) + 1)
            while not self.stop.is_set() and self._committed() < goal:
                time.sleep(0.05)
            before = sum(self.events.values())
            for _ in range(100):  # until it lands (no process up, nothing in flight: again)
                if self.stop.is_set():
                    return
                self._fault(fns[step])
                if sum(self.events.values()) > before:
                    break
                time.sleep(0.1)
            if step == "kill9":
                time.sleep(0.2)  # let the kill land before the next scripted fault

    # -- producing -----------------------------------------------------------------------------
    def enqueue_flow(self, n: int) -> None:
        app, fid = self.producer_app, f"fc-{self.run_id}-{n}"
        kids = [app.spec("fchild", {"i": i}, idempotency_key=f"{fid}:c{i}",
                         visibility_timeout_s=self.args.vt, max_attempts=10, max_deliveries=50)
                for i in range(CHILDREN)]
        close = app.spec("fclose", {}, idempotency_key=f"{fid}:close",
                         visibility_timeout_s=self.args.vt, max_attempts=10, max_deliveries=50)
        while True:
            try:
                with self.redis_lock:
                    app.chord(kids, close).enqueue(flow_id=fid, description=f"order {n}")
                break
            except InvalidJob as exc:  # the reply was lost in a restart: it is stored
                if "exists already" not in str(exc):
                    raise
                break
            except (redis.ConnectionError, redis.TimeoutError):
                time.sleep(0.1)
        self.flow_ids.append(fid)

    def producer(self) -> None:
        a = self.args
        pause = a.produce_s / max(1, a.flows)
        for n in range(a.flows):
            self.enqueue_flow(n)
            if pause:
                time.sleep(pause)
        self.produced.set()

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        a = self.args
        os.makedirs(a.work_dir, exist_ok=True)
        self.run_id = uuid.uuid4().hex[:6]
        data_dir = os.path.join(a.work_dir, f"flows-chaos-redis-{self.run_id}")
        self.server = EmbeddedRedis(tcp=True, appendonly=True, data_dir=data_dir,
                                    extra_args=["--appendfsync", "always"]).start()
        url = self.server.url
        self.setup_db()
        self.client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
        self.q = Queue(self.client, "default")
        self.producer_app = Antre(redis_url=url, redis_client=self.client)
        self.flow_ids: list[str] = []
        self.produced = threading.Event()
        env = ab._env(url, BENCH_DATABASE_URL=self.db_url, CHAOS_VT_S=str(a.vt),
                      CHAOS_WORK_MS=str(a.work_ms), FLOWS_CHAOS_FAIL=str(a.fail),
                      ANTRE_LOG_LEVEL="INFO", ANTRE_LOG_FORMAT="json")
        worker_log = os.path.join(a.work_dir, "flows-chaos-workers.log")
        cmd = [sys.executable, "-m", "antre_worker", "worker", "bench.apps.flows_chaos:app",
               "--processes", str(a.processes), "--threads", str(a.threads), "--grace", "5"]
        log(f"redis {url} (AOF, appendfsync always), db {a.db}, {a.flows} chords of "
            f"{CHILDREN}, {a.processes} processes x {a.threads} threads, lease {a.vt}s")
        with open(worker_log, "wb") as logf:
            t0 = time.monotonic()
            self.pool = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=logf, stderr=logf,
                                            start_new_session=True)
            threading.Thread(target=self.producer, daemon=True).start()
            faults = self.scripted if a.script else self.chaos_loop
            threading.Thread(target=faults, daemon=True).start()
            done, elapsed = self.wait_done(t0)
            self.stop.set()
            ab.stop([self.pool])
        result = self.check(done, elapsed, worker_log)
        self.client.close()
        self.server.stop()
        self.engine.dispose()
        self._drop()
        return result

    def wait_done(self, t0: float) -> tuple[bool, float]:
        """Until every flow is final and nothing is left in flight (faults stop once
        ``chaos_until`` of the flows are final, or after ``chaos_s``); (done, seconds from the
        start to the last flow final)."""
        reader, a = FlowReader(self.client), self.args
        while time.monotonic() < t0 + a.timeout:
            time.sleep(0.25)
            if self.restart_requested.is_set():
                self._do_restart()
            try:
                with self.redis_lock:
                    counts = reader.counts("default")
                    busy = self.client.zcard(self.q.keys.inflight)
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            final = counts["succeeded"] + counts["failed"] + counts["cancelled"]
            late = a.chaos_s is not None and time.monotonic() - t0 > a.chaos_s
            if (late or final >= a.chaos_until * a.flows) and not self.stop.is_set() \
                    and not a.script:  # (scripted faults all run, whenever)
                self.stop.set()
                log(f"faults stopped ({final} flows final); draining")
            if self.produced.is_set() and final >= a.flows and not busy:
                return True, time.monotonic() - t0
        return False, time.monotonic() - t0

    # -- the checks ----------------------------------------------------------------------------
    def check(self, done: bool, elapsed: float, worker_log: str) -> dict[str, Any]:
        n, k = self.args.flows, self.q.keys
        counts = FlowReader(self.client).counts("default")
        stats = {name: int(v) for name, v in self.client.hgetall(k.stats).items()}
        calls = Counter(f for (f,) in self.rows("SELECT flow_id FROM flow_callback"))
        kids = Counter(key for (key,) in self.rows("SELECT idem_key FROM flow_child"))
        early = self.rows(f"SELECT count(*) FROM flow_callback WHERE results_seen <> {CHILDREN}"
                          f" OR in_order <> 1 OR children_committed <> {CHILDREN}")[0][0]
        before = self.rows("SELECT count(*) FROM flow_callback c WHERE c.at < (SELECT max(k.at)"
                           " FROM flow_child k WHERE k.flow_id = c.flow_id)")[0][0]
        ids = set(self.flow_ids)
        first, last = self.rows("SELECT (SELECT min(at) FROM flow_child), "
                                "(SELECT max(at) FROM flow_callback)")[0]
        window = (last - first) if first and last else 0.0
        lease_lost = 0
        with open(worker_log, "rb") as f:
            lease_lost = sum(1 for line in f if b'"lease_lost"' in line)
        checks = {
            "flows not succeeded": n - counts["succeeded"],
            "callbacks lost (a flow without its committed row)": len(ids - set(calls)),
            "duplicate callback commits": sum(c - 1 for c in calls.values()),
            "callbacks fired early (saw fewer than 10 results or child rows, or out of order)":
                int(early),
            "callbacks committed before one of their children": int(before),
            "child effects missing": n * CHILDREN - len(kids),
            "duplicate child effects": sum(c - 1 for c in kids.values()),
            "jobs in the DLQ": int(self.client.zcard(k.dead)),
            "not drained": 0 if done else 1,
        }
        jobs = n * (CHILDREN + 1)
        figures = {
            "flows": n, "jobs (10 children + 1 callback each)": jobs,
            "callback rows committed": sum(calls.values()),
            "child rows committed": sum(kids.values()),
            "flows by state at the end": counts,
            "time from the first enqueue to the last flow final (s)": round(elapsed, 1),
            "time from the first child's commit to the last callback's (s)": round(window, 1),
            "flows/s (over that window, under faults)": round(n / window, 1) if window else 0,
            "jobs/s (over that window)": round(jobs / window, 1) if window else 0,
            "redeliveries (reserves beyond one per job)": max(0, stats.get("reserved", 0) - jobs),
            "lease expirations swept": stats.get("expired", 0),
            "duplicate executions caught (idempotency hits)": stats.get("deduplicated", 0),
            "retries (injected retryable failures)": stats.get("retried", 0),
            "LeaseLost refusals (worker log lines)": lease_lost,
        }
        return {"ok": not any(checks.values()), "checks": checks, "figures": figures,
                "faults": dict(self.events), "stats": stats}


def render(res: dict[str, Any]) -> str:
    p = res["params"]
    lines = [f"## {p['db']}: {p['flows']:,} chords of {CHILDREN} children", "",
             f"`{res['command']}` on {res['date']}; {res['machine']['nproc']} CPUs, "
             f"{res['machine']['cpu']} (shared with other work). Result: "
             f"**{'PASS' if res['ok'] else 'FAIL'}**.", "", f"Parameters: `{p}`", "",
             "| check | value | required |", "|---|---:|---|"]
    lines += [f"| {name} | {value} | 0 |" for name, value in res["checks"].items()]
    lines += ["", "| figure | value |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in res["figures"].items()]
    lines += ["", "| fault injected | times |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in res["faults"].items()]
    lines += ["", "Queue counters at the end: `" + json.dumps(res["stats"]) + "`", ""]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/flows_chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flows", type=int, default=2_000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--pg-url", default=os.environ.get("ANTRE_TEST_PG_URL", PG_DEFAULT))
    p.add_argument("--vt", type=float, default=3.0, help="lease (visibility timeout) seconds")
    p.add_argument("--work-ms", type=float, default=10.0, help="max random handler time")
    p.add_argument("--fail", type=float, default=0.02,
                   help="fraction of children whose first attempt fails (retryable)")
    p.add_argument("--produce-s", type=float, default=None,
                   help="spread enqueueing over this many seconds (default: flows/100)")
    p.add_argument("--chaos-until", type=float, default=0.9,
                   help="inject faults until this fraction of the flows is final")
    p.add_argument("--chaos-s", type=float, default=None,
                   help="and for at most this many seconds from the start (default: no bound)")
    p.add_argument("--fault-every", type=float, default=None,
                   help="a fault each time about this many more children have committed "
                        "(default: flows * 10 / 50, some 50 faults in a run)")
    p.add_argument("--max-redis-restarts", type=int, default=3)
    p.add_argument("--min-age", type=float, default=10.0,
                   help="kill -9 / SIGSTOP only worker processes up this many seconds")
    p.add_argument("--script", default="",
                   help="fixed faults instead of random ones, e.g. kill9,sweep (kill9, "
                        "sigstop, redis, dup, sweep)")
    p.add_argument("--timeout", type=float, default=None, help="give up after (s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--work-dir", default=os.path.join(HERE, "out"))
    p.add_argument("--out", default=None, help="default: bench/results/flows-chaos-<db>.json")
    p.add_argument("--md", default=os.path.join(ab.RESULTS, "flows-chaos.md"),
                   help="'' to leave it alone")
    args = p.parse_args(argv)
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    args.produce_s = args.produce_s if args.produce_s is not None else max(1.0, args.flows / 100)
    args.fault_every = args.fault_every or max(1.0, args.flows * CHILDREN / 50)
    args.timeout = args.timeout or max(600.0, args.flows * 0.9)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from bench.run import machine
    res = FlowsChaos(args).run()
    res.update({"command": "bench/flows_chaos " + " ".join(
                    argv if argv is not None else sys.argv[1:]),
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": machine(),
                "params": {k: v for k, v in vars(args).items()
                           if k not in ("out", "md", "work_dir", "pg_url")}})
    out = args.out or os.path.join(ab.RESULTS, f"flows-chaos-{args.db}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    if args.md:
        runs = []
        for db in ("sqlite", "postgres"):
            path = os.path.join(ab.RESULTS, f"flows-chaos-{db}.json")
            if os.path.exists(path):
                with open(path) as f:
                    runs.append(json.load(f))
        with open(args.md, "w") as f:
            f.write("# Flows under faults (`bench/flows_chaos`, issue 26)\n\n"
                    "The latest run per database: chords of 10 children under kill -9 of "
                    "workers, SIGSTOP past the lease, kill -9 of Redis (AOF, appendfsync "
                    "always) and duplicate deliveries, the faults paced by the work done. "
                    "Re-run: `bench/flows_chaos` (SQLite) or `bench/flows_chaos --db "
                    "postgres`. The throughput here is under faults on a 2-core VM shared "
                    "with other work (load average 15-20 while these ran): it says the run "
                    "finished, not how fast flows are; the flow overhead is in flows.md.\n\n")
            f.write("\n".join(render(r) for r in runs))
    print(render(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
