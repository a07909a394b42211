"""``bench/chaos``: the fault-injection run of issue 6.

    bench/chaos                          # 2,000 jobs, 2 processes x 4 threads, SQLite
    bench/chaos --db postgres            # the ledger and idempotency records on PostgreSQL
    bench/chaos --jobs 100000 --processes 4   # the full run

N ``ledger`` jobs (each inserts one row per idempotency key into ``chaos_ledger`` through
``ctx.db``) plus a few ``poison`` jobs (they kill their worker on every delivery) are run by
``python -m antre_worker worker bench.apps.chaos:app --processes M --threads T`` while, at random:
kill -9 of a worker child; SIGSTOP of one for longer than its lease, then SIGCONT; a restart of
Redis (AOF on); the database connections dropped (PostgreSQL: pg_terminate_backend; SQLite: an
exclusive lock held for a few seconds); a producer re-sending jobs with new job ids and the
same idempotency keys; with ``--lock-keys N``, the jobs share N business locks (short TTL) and
an "operator" force-releases held locks now and then. At the end it checks jobs lost = 0 and
duplicate committed effects = 0 (and, under locks, that the SQL fence of every lock key is the
highest token its committed rows carry, and on SQLite, where commits are serialised, that each
lock key's rows were committed in token order), prints the figures, writes
bench/results/chaos-<db>.json and bench/results/chaos.md, and exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis
from antre.engine.locks import Locks
from antre.engine.queue import JobSpec, Queue
from bench.lib import antre_bench as ab
from bench.lib import faults

HERE, PG_DEFAULT, log = ab.HERE, ab.PG_DEFAULT, ab.log


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.events: Counter[str] = Counter()
        self.stop = threading.Event()
        self.redis_lock = threading.Lock()  # restarts vs. the harness's own reads
        self.restart_requested = threading.Event()

    # -- setup ---------------------------------------------------------------------------------
    def setup_db(self) -> None:
        a = self.args
        if a.db == "postgres":
            self.db_url, self._drop = ab.pg_schema_url(a.pg_url)
            self.app_name = self.db_url.rsplit("application_name=", 1)[1]
            import psycopg
            self.pg = psycopg.connect(a.pg_url.replace("postgresql+psycopg://", "postgresql://"),
                                      autocommit=True)
            schema = self.app_name
            self.pg.execute(f'CREATE TABLE "{schema}".chaos_ledger (id serial PRIMARY KEY, '
                            'idem_key text NOT NULL, job_id text, epoch int, at double precision, '
                            'lock_key text, fence bigint)')
        else:
            path = os.path.join(HERE, "out", "chaos.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
            self.db_url = f"sqlite:///{path}"
            self.sqlite_path = path
            con = sqlite3.connect(path)
            con.execute("CREATE TABLE chaos_ledger (id INTEGER PRIMARY KEY, idem_key TEXT NOT NULL,"
                        " job_id TEXT, epoch INT, at REAL, lock_key TEXT, fence INTEGER)")
            con.commit()
            con.close()
            self._drop = lambda: None

    def _rows(self, sql: str) -> list[Any]:
        if self.args.db == "postgres":
            return self.pg.execute(sql.replace("FROM ", f'FROM "{self.app_name}".')).fetchall()
        con = sqlite3.connect(self.sqlite_path, timeout=30)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()

    def fence_checks(self) -> dict[str, int]:
        """Under locks: every lock key's SQL fence is the highest token its committed rows carry;
        on SQLite (one writer at a time, so row ids are commit order) tokens rise with ids."""
        if not self.args.lock_keys:
            return {}
        top = dict(self._rows("SELECT lock_key, max(fence) FROM chaos_ledger "
                              "WHERE lock_key IS NOT NULL GROUP BY lock_key"))
        sql = dict(self._rows("SELECT lock_key, fence FROM antre_lock_fences"))
        out = {"lock keys whose SQL fence is not their highest committed token":
               sum(1 for k, f in top.items() if sql.get(k) != f)}
        if self.args.db == "sqlite":
            last: dict[str, int] = {}
            behind = 0
            for key, fence in self._rows("SELECT lock_key, fence FROM chaos_ledger "
                                         "WHERE lock_key IS NOT NULL ORDER BY id"):
                if fence < last.get(key, 0):
                    behind += 1
                last[key] = max(fence, last.get(key, 0))
            out["rows committed after a newer token under the same lock"] = behind
        return out

    def ledger_counts(self) -> Counter[str]:
        if self.args.db == "postgres":
            rows = self.pg.execute(f'SELECT idem_key, count(*) FROM "{self.app_name}".chaos_ledger '
                                   "GROUP BY idem_key").fetchall()
        else:
            con = sqlite3.connect(self.sqlite_path, timeout=30)
            rows = con.execute("SELECT idem_key, count(*) FROM chaos_ledger GROUP BY idem_key"
                               ).fetchall()
            con.close()
        return Counter({k: int(c) for k, c in rows})

    # -- faults --------------------------------------------------------------------------------
    def children(self) -> list[Any]:
        return faults.children(self.pool.pid)

    def kill9(self) -> None:
        if faults.kill9(self.children(), self.rng) is not None:
            self.events["kill -9 of a worker process"] += 1

    def sigstop(self) -> None:
        kids = self.children()
        if not kids:
            return
        victim = self.rng.choice(kids)
        if faults.pause(victim.pid, self.args.vt + 2 + self.rng.random() * 2):
            self.events["SIGSTOP past the lease, then SIGCONT"] += 1

    def restart_redis(self) -> None:
        # done by the main thread: PR_SET_PDEATHSIG kills the server when the *thread* that
        # spawned it exits (see antre/embedded.py)
        self.restart_requested.set()

    def _do_restart(self) -> None:
        self.restart_requested.clear()
        with self.redis_lock:
            self.server.restart()
        self.events["Redis restart (AOF on)"] += 1

    def drop_db(self) -> None:
        if self.args.db == "postgres":
            n = self.pg.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                                (self.app_name,)).fetchone()[0]
            self.events["database connections terminated"] += int(n)
            self.events["database drop"] += 1
        else:  # SQLite has no connections to drop: hold an exclusive lock for a while instead
            hold = 1 + self.rng.random() * 3

            def lock() -> None:
                con = sqlite3.connect(self.sqlite_path, timeout=30)
                con.execute("BEGIN EXCLUSIVE")
                time.sleep(hold)
                con.rollback()
                con.close()
            threading.Thread(target=lock, daemon=True).start()
            self.events["database locked (SQLite exclusive lock)"] += 1

    def resend(self) -> None:
        """A producer re-sends jobs: new job ids, the same idempotency keys and payloads."""
        if not self.keys_sent:
            return
        picks = self.rng.sample(self.keys_sent, min(len(self.keys_sent), self.rng.randint(1, 20)))
        specs = [self.spec(k) for k in picks]
        self.enqueue(specs)
        self.events["re-sent jobs (new id, same key)"] += len(specs)

    def chaos_loop(self) -> None:
        faults = [(self.kill9, 4), (self.sigstop, 2), (self.restart_redis, 1), (self.drop_db, 2),
                  (self.resend, 3), (self.force_release, 2 if self.args.lock_keys else 0)]
        total = sum(w for _, w in faults)
        restarts = 0
        while not self.stop.wait(self.rng.uniform(*self.args.every)):
            pick = self.rng.uniform(0, total)
            for fn, w in faults:
                pick -= w
                if pick <= 0:
                    break
            if fn == self.restart_redis:  # bound methods: == not is
                if restarts >= self.args.max_redis_restarts:
                    continue
                restarts += 1
            try:
                fn()
            except Exception as exc:  # the harness itself must survive its faults
                log(f"fault {fn.__name__} failed: {exc!r}")

    # -- producing -----------------------------------------------------------------------------
    def enqueue(self, specs: list[JobSpec]) -> None:
        while True:
            try:
                with self.redis_lock:
                    self.q.enqueue_many(specs)
                return
            except (redis.ConnectionError, redis.TimeoutError):
                time.sleep(0.1)

    def spec(self, key: str) -> JobSpec:
        """A ledger job; with ``--lock-keys N`` under lock ``acct:<i mod N>`` (i: the key's
        number, so a re-sent job takes the same lock)."""
        n = self.args.lock_keys
        lock = f"acct:{int(key.rsplit(':', 1)[1]) % n}" if n else None
        return JobSpec("ledger", {"k": key}, key, lock_key=lock, visibility_timeout_s=self.args.vt,
                       max_attempts=8, max_deliveries=25)

    def force_release(self) -> None:
        """An operator force-releases a held business lock (as the dashboard's Locks page does,
        by the holder token it shows): the holder loses it while its job runs."""
        if not self.args.lock_keys:
            return
        with self.redis_lock:
            held = self.locks.held()
            if held:
                pick = self.rng.choice(held)
                if self.locks.release_token(pick.key, pick.holder):
                    self.events["business lock force-released"] += 1

    def producer(self) -> None:
        a = self.args
        run = uuid.uuid4().hex[:6]
        keys = [f"ledger:{run}:{i}" for i in range(a.jobs)]
        poison = [JobSpec("poison", {"p": i}, f"poison:{run}:{i}", visibility_timeout_s=a.vt,
                          max_deliveries=3) for i in range(a.poison)]
        chunk = max(1, a.jobs // 20)
        for start in range(0, a.jobs, chunk):
            part = keys[start:start + chunk]
            self.enqueue([self.spec(k) for k in part])
            self.keys_sent.extend(part)
            if start == 0:
                self.enqueue(poison)
            time.sleep(a.produce_s / 20)
        self.produced.set()

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        a = self.args
        os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
        data_dir = os.path.join(HERE, "out", f"chaos-redis-{uuid.uuid4().hex[:6]}")
        self.server = EmbeddedRedis(tcp=True, appendonly=True, data_dir=data_dir).start()
        url = self.server.url
        self.setup_db()
        client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
        self.q = Queue(client, "default")
        self.locks = Locks(client)
        self.keys_sent: list[str] = []
        self.produced = threading.Event()
        env = ab._env(url, BENCH_DATABASE_URL=self.db_url, CHAOS_VT_S=str(a.vt),
                      CHAOS_WORK_MS=str(a.work_ms), CHAOS_LOCK_TTL_S=str(a.lock_ttl),
                      ANTRE_LOG_LEVEL="INFO",
                      ANTRE_LOG_FORMAT="json")
        worker_log = os.path.join(HERE, "out", "chaos-workers.log")
        logf = open(worker_log, "wb")  # noqa: SIM115 - closed below
        cmd = [sys.executable, "-m", "antre_worker", "worker", "bench.apps.chaos:app",
               "--processes", str(a.processes), "--threads", str(a.threads), "--grace", "5"]
        log(f"redis {url} (AOF on), db {a.db}, {a.jobs} jobs + {a.poison} poison, "
            f"{a.processes} processes x {a.threads} threads, lease {a.vt}s")
        t0 = time.monotonic()
        self.pool = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=logf, stderr=logf,
                                     start_new_session=True)
        threading.Thread(target=self.producer, daemon=True).start()
        chaos = threading.Thread(target=self.chaos_loop, daemon=True)
        chaos.start()
        deadline = t0 + a.timeout
        drained = False
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if self.restart_requested.is_set():
                self._do_restart()
            if time.monotonic() - t0 > a.chaos_s and not self.stop.is_set():
                self.stop.set()  # faults stop; the rest drains
                log("faults stopped; draining")
            if not self.produced.is_set():
                continue
            try:
                with self.redis_lock:
                    pipe = client.pipeline(transaction=False)
                    pipe.llen(self.q.keys.ready)
                    pipe.zcard(self.q.keys.scheduled)
                    pipe.zcard(self.q.keys.inflight)
                    left = pipe.execute()
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            if not any(left) and self.stop.is_set():
                drained = True
                break
        drain_s = time.monotonic() - t0
        self.stop.set()
        ab.stop([self.pool])
        logf.close()
        result = self.check(client, drained, drain_s, worker_log)
        client.close()
        self.server.stop()
        self._drop()
        return result

    def check(self, client: redis.Redis, drained: bool, drain_s: float, worker_log: str
              ) -> dict[str, Any]:
        k = self.q.keys
        stats = {name: int(v) for name, v in client.hgetall(k.stats).items()}
        dead = client.zrange(k.dead, 0, -1)
        dead_keys = {client.hget(k.job(j), "idem_key") for j in dead}
        dead_reasons = Counter((client.hget(k.job(j), "error_kind") or "?") for j in dead)
        ledger = self.ledger_counts()
        keys = set(self.keys_sent)
        # jobs lost: an idempotency key with no committed effect and no job in the DLQ
        lost_keys = sorted(key for key in keys if ledger.get(key, 0) == 0 and key not in dead_keys)
        duplicates = {key: n for key, n in ledger.items() if n > 1}
        left = {"ready": client.llen(k.ready), "scheduled": client.zcard(k.scheduled),
                "inflight": client.zcard(k.inflight)}
        # job-level accounting from the queue's own counters
        enqueued = stats.get("enqueued", 0)
        settled = stats.get("acked", 0) + stats.get("deduplicated", 0) + stats.get("buried", 0)
        lease_lost = refusals = taken_over = fence_rejected = lock_conflicts = 0
        with open(worker_log, "rb") as f:
            for line in f:
                if b'"lease_lost"' in line:
                    lease_lost += 1
                if b'"taken_over"' in line:
                    taken_over += 1
                if b"LeaseLost" in line or b"lease epoch" in line:
                    refusals += 1
                if b'"fence_rejected"' in line:
                    fence_rejected += 1
                if (b'"lock_conflict"' in line or b'"error_kind":"lock_busy"' in line
                        or b'"error_kind":"lock_lost"' in line):
                    lock_conflicts += 1  # a lock-busy or lock-lost snooze's line
        poison_dead = sum(1 for j in dead if (client.hget(k.job(j), "type") == "poison"))
        fenced = self.fence_checks()
        checks = {"jobs_lost": len(lost_keys) + max(0, enqueued - settled - sum(left.values())),
                  "keys_without_effect_or_dlq": len(lost_keys),
                  "jobs_unsettled": enqueued - settled,
                  "duplicate_committed_effects": sum(n - 1 for n in duplicates.values()),
                  "drained": drained, **fenced}
        ok = (checks["jobs_lost"] == 0 and checks["duplicate_committed_effects"] == 0
              and drained and not any(fenced.values()))
        figures = {
            "jobs_enqueued": enqueued, "idempotency_keys": len(keys),
            "effects_committed": sum(1 for key in keys if ledger.get(key)),
            "duplicate_executions_caught (idempotency hits)": stats.get("deduplicated", 0),
            "redeliveries": max(0, stats.get("reserved", 0) - enqueued),
            "lease_expirations": stats.get("expired", 0),
            "LeaseLost refusals (worker log lines)": lease_lost,
            "idempotency takeovers": taken_over,
            **({"lock conflicts and lost locks (worker log lines)": lock_conflicts,
                "commits refused by the SQL fence": fence_rejected} if self.args.lock_keys else {}),
            "poison jobs in the DLQ": poison_dead,
            "jobs in the DLQ": len(dead), "DLQ by error kind": dict(dead_reasons),
            # every snooze counts under its reason (worker/antre_worker/outcomes.py), plain ones as 'snoozed'
            "snoozed (lock/db busy)": sum(stats.get(c, 0) for c in (
                "snoozed", "handed_back", "lock_busy", "lock_lost", "idempotency_busy",
                "fence_rejected")),
            "time to drain (s)": round(drain_s, 1),
            "left": left,
        }
        return {"ok": ok, "checks": checks, "figures": figures, "faults": dict(self.events),
                "stats": stats, "lost_sample": lost_keys[:10],
                "duplicate_sample": dict(list(duplicates.items())[:10])}


FENCE_CHECKS = ("lock keys whose SQL fence is not their highest committed token",
                "rows committed after a newer token under the same lock")


def render(res: dict[str, Any]) -> str:
    c, f = res["checks"], res["figures"]
    locks = res["params"].get("lock_keys")
    under = f" under {locks} business locks" if locks else ""
    lines = [f"## {res['params']['db']}: {res['params']['jobs']:,} jobs{under}", "",
             f"`{res['command']}` on {res['date']}; {res['machine']['nproc']} CPUs, "
             f"{res['machine']['cpu']}. Result: **{'PASS' if res['ok'] else 'FAIL'}**.", "",
             f"Parameters: {res['params']}", "",
             "| check | value | required |", "|---|---:|---|",
             f"| jobs lost (no committed effect and not in the DLQ) | {c['jobs_lost']} | 0 |",
             f"| duplicate committed effects | {c['duplicate_committed_effects']} | 0 |",
             f"| drained (nothing ready, scheduled or in flight at the end) | {c['drained']} | yes |"]
    lines += [f"| {k} | {c[k]} | 0 |" for k in FENCE_CHECKS if k in c]
    lines += ["", "| figure | value |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in f.items()]
    lines += ["", "| fault injected | times |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in res["faults"].items()]
    lines += ["", "Queue counters at the end: `" + json.dumps(res["stats"]) + "`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=2_000)
    p.add_argument("--poison", type=int, default=3)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--pg-url", default=os.environ.get("ANTRE_TEST_PG_URL", PG_DEFAULT))
    p.add_argument("--vt", type=float, default=3.0, help="lease (visibility timeout) seconds")
    p.add_argument("--work-ms", type=float, default=20.0, help="max random handler time")
    p.add_argument("--produce-s", type=float, default=None,
                   help="spread enqueueing over this many seconds (default: jobs/200)")
    p.add_argument("--chaos-s", type=float, default=None,
                   help="inject faults for this many seconds (default: produce time + 10)")
    p.add_argument("--every", type=float, nargs=2, default=(0.5, 1.5),
                   help="seconds between faults (uniform range)")
    p.add_argument("--max-redis-restarts", type=int, default=3)
    p.add_argument("--lock-keys", type=int, default=0,
                   help="ledger jobs share N business locks (0: no locks)")
    p.add_argument("--lock-ttl", type=float, default=2.0,
                   help="business lock TTL in seconds (shorter than a SIGSTOP: holders lose it)")
    p.add_argument("--timeout", type=float, default=None, help="give up after (s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", default=None, help="default: bench/results/chaos-<db>[-locks].json")
    p.add_argument("--md", default=os.path.join(ab.RESULTS, "chaos.md"),
                   help="rewritten from every bench/results/chaos-*.json present "
                        "(latest run per db)")
    args = p.parse_args(argv)
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    args.produce_s = args.produce_s if args.produce_s is not None else max(2.0, args.jobs / 200)
    args.chaos_s = args.chaos_s if args.chaos_s is not None else args.produce_s + 10
    args.timeout = args.timeout or max(300.0, args.jobs / 20)
    from bench.run import machine
    started = time.time()
    res = Chaos(args).run()
    res.update({"command": "bench/chaos " + " ".join(argv if argv is not None else sys.argv[1:]),
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": machine(),
                "params": {k: v for k, v in vars(args).items() if k not in ("out", "md")}})
    suffix = "-locks" if args.lock_keys else ""
    out = args.out or os.path.join(ab.RESULTS, f"chaos-{args.db}{suffix}.json")
    if os.path.exists(out) and os.path.getmtime(out) > started:
        # another run finished since this one started (a harness left behind, say): keep its
        # result where it is and put this one beside it
        out = out.replace(".json", f".{os.getpid()}.json")
        log(f"a newer result exists; this run's result goes to {out} and chaos.md is left alone")
        args.md = None
    with open(out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    runs = []
    for name in ("sqlite", "postgres", "sqlite-locks", "postgres-locks"):
        path = os.path.join(ab.RESULTS, f"chaos-{name}.json")
        if os.path.exists(path):
            with open(path) as f:
                runs.append(json.load(f))
    with open(args.md or os.devnull, "w") as f:
        f.write("# Antre fault-injection runs (`bench/chaos`)\n\n"
                "The latest run per database, without and with business locks. Re-run: "
                "`bench/chaos` (SQLite) and `bench/chaos --db postgres`; the full run is "
                "`--jobs 100000`; `--lock-keys 32` puts the jobs under 32 shared locks.\n\n")
        f.write("\n".join(render(r) for r in runs))
    print(render(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
