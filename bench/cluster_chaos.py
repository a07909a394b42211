"""``bench/cluster_chaos``: the multi-host fault run of issue 29 item 5.

    bench/cluster_chaos                       # 10,000 jobs, 2 hosts x 2 processes x 4 threads
    bench/cluster_chaos --jobs 300 --partitions 3    # the test's size

The set-up of ``bench/cluster_scale`` (``bench/lib/cluster_harness.py``: 3 Redis masters + 3
replicas with AOF on, two network namespaces as hosts, each with its own ``antre worker
bench.apps.cluster:app`` pool) plus a private PostgreSQL on the bridge holding the idempotency
store and the effects: each ``effect`` job inserts a row into ``cluster_effects`` through
``ctx.db``, committed with its idempotency record (no unique constraint, so a duplicate
committed effect shows as two rows for one key). A producer on the root namespace enqueues the
jobs with ``enqueue_many`` in chunks, a ``--backlog`` ahead of the effects committed, waiting after each chunk for a replica to
have it (``WAIT 1``: Redis replication is asynchronous, so without it a master's kill -9 can
take the last acknowledged writes with it; ``--no-replica-wait`` leaves it out),
and re-sending a chunk (new ids, same idempotency keys) when the cluster refuses it mid-failover.

Faults, each once, paced by the effects committed (``--script``, default
``link,master,postgres,kill9``):
``link``: one host's cable down (``ip link set <veth> down``) for ``--vt`` + 4 s, longer than
the lease, then up: its jobs are swept back and run on the other host, and its own late acks
are refused; ``master``: kill -9 of the master serving the queue (partition 0), its replica
takes over (the cluster's own failover), the killed node restarted on its data later (it
rejoins as a replica); ``postgres``: ``pg_ctl restart -m fast`` of the store; ``kill9``: kill -9
of one worker process. At the end: 0 lost (an idempotency key with neither a committed effect
nor a dead job), 0 duplicate committed effects, every job in exactly one final state (done or
dead, nothing ready, scheduled or in flight, and the queue's counters balance). Writes
bench/results/cluster-chaos.json and the fault-run section of bench/results/cluster.md;
exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
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

from bench.lib import faults  # noqa: E402
from bench.lib.cluster_harness import Harness, log  # noqa: E402
from bench.cluster_scale import write_md  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = ("link", "master", "postgres", "kill9")


class ClusterChaos:
    def __init__(self, h: Harness, args: argparse.Namespace) -> None:
        self.h, self.args = h, args
        self.rng = random.Random(args.seed)
        self.events: Counter[str] = Counter()
        self.timings: dict[str, float] = {}
        self.stop = threading.Event()
        self.faults_done = threading.Event()
        self.produced = threading.Event()
        self.keys: list[str] = []
        self.ids: list[str] = []
        self.errors: list[str] = []

    # -- set-up --------------------------------------------------------------------------------
    def setup(self) -> None:
        from antre.stores.sql import make_engine, migrate
        self.engine = make_engine(self.h.pg_url)
        migrate(self.engine)  # once, before the pools (two hosts migrating at once would race)
        with self.engine.begin() as con:
            con.execute(sa.text("CREATE TABLE cluster_effects (id SERIAL PRIMARY KEY, idem_key "
                                "TEXT NOT NULL, job_id TEXT, epoch INT, host TEXT, "
                                "at DOUBLE PRECISION)"))
        os.environ.update({"BENCH_REDIS_URL": self.h.cluster_url,
                           "BENCH_PARTITIONS": str(self.args.partitions),
                           "BENCH_DATABASE_URL": self.h.pg_url})
        import importlib

        import bench.apps.cluster as mod
        self.mod = importlib.reload(mod)
        self.app = self.mod.app
        self.q = self.app.queue()  # partition 0 (its master is the one killed)

    def env(self, host: str) -> dict[str, str]:
        a = self.args
        return {"BENCH_REDIS_URL": self.h.cluster_url, "ANTRE_REDIS_URL": self.h.cluster_url,
                "BENCH_PARTITIONS": str(a.partitions), "BENCH_DATABASE_URL": self.h.pg_url,
                "BENCH_HOST": host, "CHAOS_VT_S": str(a.vt), "CHAOS_WORK_MS": str(a.work_ms),
                "ANTRE_LOG_LEVEL": "INFO", "ANTRE_LOG_FORMAT": "json"}

    # -- producing -----------------------------------------------------------------------------
    def producer(self) -> None:
        """The jobs in chunks, keeping about ``--backlog`` of them ahead of the effects
        committed: work is left whenever a fault lands, however fast or slow the machine."""
        a = self.args
        run = uuid.uuid4().hex[:6]
        keys = [f"effect:{run}:{i}" for i in range(a.jobs)]
        chunk = max(1, min(500, a.backlog // 4))
        for start in range(0, a.jobs, chunk):
            while not self.stop.is_set():
                done = self.committed()
                if done >= 0 and len(self.keys) - done < a.backlog:
                    break
                time.sleep(0.05)
            part = keys[start:start + chunk]
            self.enqueue(part)
            self.keys.extend(part)
        self.produced.set()

    def enqueue(self, keys: list[str]) -> None:
        while True:
            specs = [self.app.spec("effect", {"k": k}, idempotency_key=k,
                                   visibility_timeout_s=self.args.vt) for k in keys]
            try:
                ids = self.app.enqueue_many(specs)
                if not self.args.no_replica_wait:
                    self.wait_replicas()
                self.ids.extend(ids)
                return
            except redis.RedisError as exc:  # mid-failover: again, new ids, the same keys
                self.events["enqueue batches re-sent (cluster refused them)"] += 1
                log(f"enqueue of {len(keys)} refused ({exc!r}); re-sending")
                time.sleep(0.2)

    def wait_replicas(self) -> None:
        """``WAIT 1 2000`` on every master: the chunk just written has reached a replica."""
        client = self.app.redis
        client.execute_command("WAIT", 1, 2000, target_nodes=client.PRIMARIES)

    # -- faults --------------------------------------------------------------------------------
    def committed(self) -> int:
        try:
            with self.engine.connect() as con:
                return int(con.execute(sa.text("SELECT count(*) FROM cluster_effects")).scalar()
                           or 0)
        except sa.exc.DBAPIError:
            return -1  # PostgreSQL restarting

    def scripted(self) -> None:
        try:
            self._scripted()
        finally:
            self.faults_done.set()

    def _scripted(self) -> None:
        steps = [s for s in self.args.script.split(",") if s]
        for n, step in enumerate(steps, start=1):
            goal = self.args.jobs * n // (len(steps) + 2)
            while not self.stop.is_set() and self.committed() < goal:
                time.sleep(0.1)
            if self.stop.is_set():
                return
            log(f"fault: {step} ({self.committed()} effects committed)")
            try:
                getattr(self, f"fault_{step}")()
            except Exception as exc:  # noqa: BLE001 - the run reports it and goes on
                self.errors.append(f"fault {step} failed: {exc!r}")
                log(self.errors[-1])

    def fault_link(self) -> None:
        host = self.h.hosts[-1]
        down = self.args.vt + 4
        expired = self.stat("expired")
        self.h.link(host, up=False)
        time.sleep(down)
        self.h.link(host, up=True)
        self.events[f"host link down for {down:g} s (lease {self.args.vt:g} s), then up"] += 1
        self.timings["leases expired while the link was down"] = self.stat("expired") - expired

    def fault_master(self) -> None:
        victim = self.h.master_of(self.q.keys.ready)
        t0 = time.monotonic()
        self.h.kill9(victim)
        self.events["kill -9 of the queue's Redis master"] += 1
        self.h.wait_failover(victim, timeout=60)
        self.timings["failover: kill -9 to a new master serving every slot (s)"] = round(
            time.monotonic() - t0, 1)
        time.sleep(self.args.vt)  # the cluster runs on a master short, then the node is back
        self.h.start_node(victim)
        self.events["killed master restarted on its AOF (rejoins as a replica)"] += 1

    def fault_postgres(self) -> None:
        t0 = time.monotonic()
        self.h.restart_pg()
        self.events["PostgreSQL restart (pg_ctl restart -m fast)"] += 1
        self.timings["PostgreSQL restart (s)"] = round(time.monotonic() - t0, 1)

    def fault_kill9(self) -> None:
        for _ in range(50):
            kids = [c for host in self.h.hosts for pool in host.pools
                    for c in faults.children(pool.pid, min_age_s=2)]
            if faults.kill9(kids, self.rng) is not None:
                self.events["kill -9 of a worker process"] += 1
                return
            time.sleep(0.2)

    def stats(self) -> dict[str, int]:
        """The queue's counters summed over its partitions."""
        out: Counter[str] = Counter()
        for q in self.mod.partitions():
            out.update(q.stats())
        return dict(out)

    def stat(self, name: str) -> int:
        try:
            return int(self.stats().get(name, 0))
        except redis.RedisError:
            return 0

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        a = self.args
        self.setup()
        log(f"{a.jobs} effect jobs, {a.partitions} partition(s), {len(self.h.hosts)} hosts x "
            f"{a.processes} processes x {a.threads} threads, lease {a.vt}s, faults {a.script}")
        t0 = time.monotonic()
        for host in self.h.hosts:
            self.h.start_pool(host, "bench.apps.cluster:app", a.processes, a.threads,
                              self.env(host.name),
                              os.path.join(self.h.work_dir, f"chaos-{host.name}.log"),
                              ["--grace", "5"])
        threading.Thread(target=self.producer, daemon=True).start()
        faults_thread = threading.Thread(target=self.scripted, daemon=True)
        faults_thread.start()
        drained = self.wait_drained(t0)
        elapsed = time.monotonic() - t0
        self.stop.set()
        faults_thread.join(30)
        logs = [os.path.join(self.h.work_dir, f"chaos-{host.name}.log") for host in self.h.hosts]
        self.h.stop_pools()
        if a.logs_to:
            import shutil
            for path in logs:
                shutil.copy(path, a.logs_to)
        return self.check(drained, elapsed, logs)

    def wait_drained(self, t0: float) -> bool:
        """Until every key sent has a final job and nothing is ready, scheduled or in flight."""
        while time.monotonic() < t0 + self.args.timeout:
            time.sleep(0.5)
            if not self.produced.is_set() or not self.faults_done.is_set():
                continue
            try:
                left = self.left()
            except redis.RedisError:
                continue
            if not any(left.values()) and self.committed() >= 0 and self.settled():
                return True
        return False

    def left(self) -> dict[str, int]:
        r, out = self.app.redis, Counter({"ready": 0, "scheduled": 0, "inflight": 0})
        for q in self.mod.partitions():
            out.update({"ready": r.llen(q.keys.ready), "scheduled": r.zcard(q.keys.scheduled),
                        "inflight": r.zcard(q.keys.inflight)})
        return dict(out)

    def settled(self) -> bool:
        s = self.stats()
        return s.get("enqueued", 0) == sum(s.get(n, 0) for n in ("acked", "deduplicated",
                                                                   "buried"))

    # -- the checks ----------------------------------------------------------------------------
    def check(self, drained: bool, elapsed: float, logs: list[str]) -> dict[str, Any]:
        r, parts = self.app.redis, self.mod.partitions()
        stats = self.stats()
        with self.engine.connect() as con:
            rows = con.execute(sa.text("SELECT idem_key, host FROM cluster_effects")).fetchall()
        effects = Counter(key for key, _ in rows)
        by_host = Counter(host for _, host in rows)
        done = {j for q in parts for j in r.zrange(q.keys.done, 0, -1)}
        dead_by_q = {q: r.zrange(q.keys.dead, 0, -1) for q in parts}
        dead = {j for ids in dead_by_q.values() for j in ids}
        dead_keys = {r.hget(q.keys.job(j), "idem_key") for q, ids in dead_by_q.items()
                     for j in ids}
        keys = set(self.keys)
        lost = sorted(key for key in keys if not effects.get(key) and key not in dead_keys)
        dups = {key: n for key, n in effects.items() if n > 1}
        left = self.left()
        not_final = [j for j in self.ids if (j in done) == (j in dead)]
        lease_lost = refused = 0
        for path in logs:
            with open(path, "rb") as f:
                for line in f:
                    lease_lost += b'"lease_lost"' in line
                    refused += b"LeaseLost" in line
        enqueued = stats.get("enqueued", 0)
        settled = sum(stats.get(n, 0) for n in ("acked", "deduplicated", "buried"))
        checks = {
            "jobs lost (a key with neither a committed effect nor a dead job)": len(lost),
            "duplicate committed effects": sum(n - 1 for n in dups.values()),
            "jobs not in exactly one final state (done xor dead)": len(not_final),
            "jobs left ready, scheduled or in flight": sum(left.values()),
            "enqueued minus settled (acked + deduplicated + buried)": enqueued - settled,
            "not drained before the timeout": 0 if drained else 1,
            "faults that failed to run": len(self.errors),
        }
        figures = {
            "idempotency keys": len(keys), "jobs enqueued": enqueued,
            "effects committed": sum(1 for key in keys if effects.get(key)),
            "effects committed by host": dict(by_host),
            "jobs done by partition": [int(r.zcard(q.keys.done)) for q in parts],
            "duplicate executions caught (idempotency hits)": stats.get("deduplicated", 0),
            "redeliveries (reserves beyond one per job)": max(0, stats.get("reserved", 0)
                                                              - enqueued),
            "lease expirations swept": stats.get("expired", 0),
            "LeaseLost refusals (worker log lines)": lease_lost or refused,
            "jobs in the DLQ": len(dead),
            **self.timings,
            "time from the first enqueue to drained (s)": round(elapsed, 1),
            "load average at the end": [round(x, 2) for x in os.getloadavg()],
        }
        return {"ok": not any(checks.values()), "checks": checks, "figures": figures,
                "faults": dict(self.events), "errors": self.errors, "stats": stats,
                "lost_sample": lost[:10], "duplicate_sample": dict(list(dups.items())[:10])}


def render(res: dict[str, Any]) -> str:
    p = res["params"]
    lines = ["## Fault run: hosts cut off, a master killed, PostgreSQL restarted "
             "(`bench/cluster_chaos`)", "",
             f"`{res['command']}` on {res['date']}; {res['machine']['nproc']} CPUs "
             f"({res['machine']['cpu']}), shared with other work: load average "
             f"{res['load_avg_start']} at the start, {res['figures']['load average at the end']}"
             f" at the end. Result: **{'PASS' if res['ok'] else 'FAIL'}**.", "",
             f"{p['jobs']:,} `effect` jobs on {p['partitions']} partition(s), "
             f"{p['hosts']} hosts x {p['processes']} processes x {p['threads']} threads, lease "
             f"{p['vt']:g} s, Redis AOF on, the idempotency store and the effects on the "
             "private PostgreSQL.", "",
             "| check | value | required |", "|---|---:|---|"]
    lines += [f"| {name} | {value} | 0 |" for name, value in res["checks"].items()]
    lines += ["", "| figure | value |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in res["figures"].items()]
    lines += ["", "| fault injected | times |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in res["faults"].items()]
    if res["errors"]:
        lines += ["", "Errors: " + "; ".join(res["errors"])]
    lines += ["", "Queue counters at the end: `" + json.dumps(res["stats"]) + "`", ""]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/cluster_chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--processes", type=int, default=2, help="worker processes per host")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--vt", type=float, default=3.0, help="lease (visibility timeout) seconds")
    p.add_argument("--work-ms", type=float, default=5.0, help="most random handler time")
    p.add_argument("--backlog", type=int, default=None,
                   help="the producer keeps about this many jobs ahead of the effects "
                        "committed (default: a tenth of the jobs, at least 50)")
    p.add_argument("--script", default=",".join(STEPS),
                   help=f"the faults, in order, each once: any of {', '.join(STEPS)}")
    p.add_argument("--timeout", type=float, default=None, help="give up after (s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-replica-wait", action="store_true",
                   help="the producer does not WAIT for a replica after each chunk")
    p.add_argument("--keep", action="store_true", help="leave the set-up running")
    p.add_argument("--logs-to", default=None, help="copy the worker logs into this folder")
    p.add_argument("--out", default=os.path.join(HERE, "results", "cluster-chaos.json"))
    p.add_argument("--md", default=os.path.join(HERE, "results", "cluster.md"),
                   help="'' to leave it")
    a = p.parse_args(argv)
    bad = [s for s in a.script.split(",") if s and s not in STEPS]
    if bad:
        p.error(f"--script: unknown fault(s) {bad}; pass a comma-separated list of {STEPS}")
    a.seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    a.backlog = a.backlog or max(50, a.jobs // 10)
    a.timeout = a.timeout or max(300.0, a.jobs / 20)
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    from bench.run import machine
    started = [round(x, 2) for x in os.getloadavg()]
    with Harness(hosts=a.hosts, appendonly=True, postgres=True, keep=a.keep) as h:
        chaos = ClusterChaos(h, a)
        try:
            res = chaos.run()
        finally:
            chaos.stop.set()
            if getattr(chaos, "engine", None) is not None:
                chaos.engine.dispose()
    res.update({"harness": h.id, "command": "bench/cluster_chaos " + " ".join(argv if argv is not None
                                                             else sys.argv[1:]),
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": machine(), "load_avg_start": started,
                "params": {k: v for k, v in vars(a).items()
                           if k not in ("out", "md", "keep", "logs_to")}})
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    text = render(res)
    if a.md:
        write_md(a.md, "Fault run", text)
    print(text)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
