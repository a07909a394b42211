"""Per-key scheduling (issue 23), measured with the real worker as a user starts it.

``python3 bench/perkey.py hot --jobs 3000`` : N jobs on one lock_key, one default
``antre worker perkey:app --burst`` (bench/apps/perkey.py), 2 ms handler; prints the drain time, order
inversions, lock-busy snoozes per job, what is left in the DLQ and in every other state.
``python3 bench/perkey.py noisy --jobs 5000`` (``--ungrouped``: without groups): 5,000 jobs of
group A then 20 of group B; when B's last one finished, against A's drain time.
``python3 bench/perkey.py noop --jobs 20000 --groups 10000 --reps 3``: no-op throughput of one
default burst worker, ungrouped and grouped, taking turns in one run.
``python3 bench/perkey.py slots --jobs 2000 --trees OLD,.``: starts/s of one group of 4 slots
(``--slots``), the worker's code of two checkouts taking turns.
``python3 bench/perkey.py reserve --jobs 100000``: Redis time per reserve (100) and per ack
with 100,000 ungrouped jobs, 100,000 distinct groups, one group of 100,000, one lock_key.

Each run starts its own private Redis (EmbeddedRedis, appendonly off).
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import subprocess
import sys
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# BENCH_TREE=DIR (another checkout, e.g. `git worktree add --detach DIR REV`): the producer and
# the worker are that checkout's code (the figures before a change); the bench app module stays this tree's
TREE = os.path.abspath(os.environ.get("BENCH_TREE", ROOT))
sys.path.insert(0, ROOT)
from bench.lib.tree import code_path  # noqa: E402  (this tree's bench, before TREE goes first)

sys.path.insert(0, TREE)

from antre.embedded import EmbeddedRedis  # noqa: E402
from antre.engine.queue import JobSpec, Queue  # noqa: E402

APP = "perkey:app"  # bench/apps/perkey.py, on the path by itself (another tree has a bench/)



def script_stat(cmd: dict, field: str) -> float:
    """``INFO commandstats``' ``field`` of the script calls: FCALL (Redis Functions, as
    shipped) and EVALSHA (a server without them) together."""
    return sum(float(cmd.get(f"cmdstat_{c}", {}).get(field, 0)) for c in ("fcall", "evalsha"))

def fill_hot(client: redis.Redis, n: int, key: str) -> None:
    q = Queue(client, "default")
    for start in range(0, n, 1000):
        q.enqueue_many([JobSpec("hot", {"k": key, "i": i}, f"hot:{i}", key)
                        for i in range(start, min(n, start + 1000))])


def burst(url: str, timeout_s: float, tree: str = TREE, extra: tuple[str, ...] = ()) -> float:
    """One default ``antre worker APP --burst`` (``extra``: more of its options) of ``tree``'s
    code."""
    path = os.pathsep.join([code_path(tree), os.path.join(ROOT, "bench", "apps")])
    env = dict(os.environ, BENCH_REDIS_URL=url, ANTRE_REDIS_URL=url, PYTHONPATH=path)
    env.pop("ANTRE_DATABASE_URL", None)
    log_path = os.path.join(ROOT, "bench", "out", "perkey-worker.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        # cwd: the tree (python -m puts it first on the path)
        p = subprocess.run([sys.executable, "-m", "antre_cli", "worker", APP, "--burst",
                            *extra], cwd=tree, env=env, stdout=log, stderr=log, timeout=timeout_s)
    took = time.monotonic() - started
    if p.returncode != 0:
        raise SystemExit(f"worker exited {p.returncode}; see {log_path}")
    return took


def inversions(order: list[int]) -> int:
    return sum(1 for a, b in zip(order, order[1:]) if b < a)


def states(client: redis.Redis) -> dict[str, int]:
    k = Queue(client, "default").keys
    return {"ready": client.llen(k.ready), "scheduled": client.zcard(k.scheduled),
            "inflight": client.zcard(k.inflight), "waiting": client.zcard(f"{k.tag}:waiting"),
            "dead": client.zcard(k.dead), "done": client.zcard(k.done)}


def hot(args: argparse.Namespace) -> dict[str, object]:
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        url = server.url
        client = redis.Redis.from_url(url, decode_responses=True)
        client.flushall()
        fill_hot(client, args.jobs, "order:42")
        client.config_resetstat()
        cpu0, rcpu0 = _children_cpu_s(), _redis_cpu_s(client)
        took = burst(url, args.timeout)
        worker_cpu, redis_cpu = _children_cpu_s() - cpu0, _redis_cpu_s(client) - rcpu0
        cmd = client.info("commandstats")

        ran = [x.split(":") for x in client.lrange("perkey:order:order:42", 0, -1)]
        order = [int(x[0]) for x in ran]
        ends = [int(x[1]) for x in ran if len(x) > 1]
        stats = {k: int(v) for k, v in client.hgetall(Queue(client, "default").keys.stats).items()}
        out = {"case": "hot key", "jobs": args.jobs, "ran": len(order),
               "distinct": len(set(order)),
               "worker_wall_s": round(took, 2),  # the process's start and exit included
               # the done index keeps the newest 10,000: above that, worker_wall_s is the figure
               "drain_s": round(_drain_span_s(client), 2) if args.jobs <= 10_000 else None,
               # the first job's end to the last's, as the handler saw them (any size)
               "handler_span_s": round((max(ends) - min(ends)) / 1000, 2) if ends else None,
               "serial_ideal_s": round(args.jobs * 0.002, 2),
               "inversions": inversions(order),
               "lock_busy_per_job": round(stats.get("lock_busy", 0) / args.jobs, 4),
               "snoozes": stats.get("snoozed", 0) + stats.get("lock_busy", 0),
               "left": states(client),
               "redis_us_per_job": round(sum(v["usec"] for v in cmd.values()) / args.jobs, 1),
               "evalsha_us_per_call": round(script_stat(cmd, "usec")
                                            / max(1, script_stat(cmd, "calls")), 1),
               # scripts called per job (top level: FCALL or EVALSHA) and Redis commands in
               # all, scripts' included
               "evalsha_per_job": round(script_stat(cmd, "calls") / args.jobs, 2),
               "commands_per_job": round(sum(v["calls"] for v in cmd.values()) / args.jobs, 1),
               # CPU of the worker's processes (start and exit included) and of redis-server
               "worker_cpu_ms_per_job": round(worker_cpu * 1000 / args.jobs, 3),
               "redis_cpu_us_per_job": round(redis_cpu * 1e6 / args.jobs, 1),
               "load_avg": round(os.getloadavg()[0], 1)}
        return out
    finally:
        server.stop()


def _children_cpu_s() -> float:
    """User + system CPU of this process's waited-for children (the worker and its process)."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _redis_cpu_s(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _drain_span_s(client: redis.Redis) -> float:
    k = Queue(client, "default").keys
    first = client.zrange(k.done, 0, 0, withscores=True)
    last = client.zrange(k.done, -1, -1, withscores=True)
    return (last[0][1] - first[0][1]) / 1000 if first else 0.0


def _finish_times(client: redis.Redis, ids: list[str]) -> list[int]:
    k = Queue(client, "default").keys
    pipe = client.pipeline(transaction=False)
    for i in ids:
        pipe.zscore(k.done, i)
    return [int(x) for x in pipe.execute() if x is not None]


def noisy(args: argparse.Namespace) -> dict[str, object]:
    """5,000 jobs of group A, then 20 of group B, one default burst worker, 2 ms handler:
    when B's last job finished, as a share of A's drain time."""
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        q = Queue(client, "default")
        grouped = not args.ungrouped
        a = q.enqueue_many([JobSpec("hot", {"k": "A", "i": i}, f"a:{i}",
                                    group="A" if grouped else None) for i in range(args.jobs)])
        b = q.enqueue_many([JobSpec("hot", {"k": "B", "i": i}, f"b:{i}",
                                    group="B" if grouped else None) for i in range(20)])
        took = burst(server.url, args.timeout)
        fa, fb = _finish_times(client, a), _finish_times(client, b)
        start = min(fa + fb)
        a_drain, b_done = (max(fa) - start) / 1000, (max(fb) - start) / 1000
        return {"case": "noisy neighbour" + ("" if grouped else " (no groups)"),
                "a_jobs": len(a), "a_done": len(fa), "b_done": len(fb),
                "a_drain_s": round(a_drain, 2), "b_last_done_s": round(b_done, 3),
                "b_share_of_a_drain": round(b_done / a_drain, 4), "worker_wall_s": round(took, 2),
                "left": states(client)}
    finally:
        server.stop()


def noop(args: argparse.Namespace) -> dict[str, object]:
    """No-op jobs drained by one default burst worker, taking turns in one run: ungrouped,
    then spread over ``--groups`` distinct groups (drain span: first to last job finished)."""
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    kinds = args.kinds.split(",")
    rows: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for rep in range(args.reps):
            for kind in kinds:
                client.flushall()
                q = Queue(client, "default")
                for start in range(0, args.jobs, 1000):
                    q.enqueue_many([JobSpec("noop", {}, f"n:{i}", **(
                        {"group": f"g:{i % args.groups}"} if kind == "grouped" else {}))
                        for i in range(start, min(args.jobs, start + 1000))])
                burst(server.url, args.timeout)
                # the done index keeps the newest 10,000: the rate over the jobs it holds
                span, n = _drain_span_s(client), client.zcard(Queue(client, "default").keys.done)
                rows[kind].append(round((n - 1) / span) if span else 0)
        med = {k: statistics.median(v) for k, v in rows.items()}
        return {"case": f"no-op jobs/s, {args.jobs} jobs, grouped over {args.groups} groups",
                "tree": TREE, "jobs_per_s": rows, "median": med,
                "grouped_share": (round(med["grouped"] / med["ungrouped"], 3)
                                  if len(med) == 2 else None)}
    finally:
        server.stop()


def reserve_cost(args: argparse.Namespace) -> dict[str, object]:
    """Redis time of reserve (batches of 100) and of ack_many for each shape of backlog:
    ungrouped, ``--jobs`` distinct groups, one group of ``--jobs``, one lock_key of ``--jobs``
    (INFO commandstats of EVALSHA around the calls; no worker)."""
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    out: dict[str, object] = {"case": f"Redis time per call, backlog of {args.jobs}"}
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        shapes = {"ungrouped": lambda i: {}, "distinct groups": lambda i: {"group": f"g:{i}"},
                  "one group": lambda i: {"group": "big"}, "one lock_key": lambda i: {
                      "lock_key": "hot"}}
        for name, extra in shapes.items():
            client.flushall()
            q = Queue(client, "default")
            for start in range(0, args.jobs, 1000):
                q.enqueue_many([JobSpec("noop", {}, f"n:{i}", **extra(i))
                                for i in range(start, min(args.jobs, start + 1000))])
            reserve_us, ack_us, n = 0.0, 0.0, 0
            for _ in range(50):
                client.config_resetstat()
                jobs = q.reserve("bench", count=100)
                reserve_us += script_stat(client.info("commandstats"), "usec")
                client.config_resetstat()
                q.ack_many([(j, None) for j in jobs])
                ack_us += script_stat(client.info("commandstats"), "usec")
                n += len(jobs)
            out[name] = {"reserve_us_per_call": round(reserve_us / 50, 1),
                         "jobs_per_reserve": round(n / 50, 1),
                         "ack_us_per_job": round(ack_us / max(n, 1), 1)}
        return out
    finally:
        server.stop()


def rate(args: argparse.Namespace) -> dict[str, object]:
    """``--jobs`` jobs of group A at ``--rate`` (default 50/s), then as many of group B with no
    rate, 2 ms handler, one default worker (not --burst: it leaves scheduled jobs) until all
    are done: A's most starts (reserved_at) in any 1 s window, B's drain, snoozes spent."""
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        q = Queue(client, "default")

        def fill() -> tuple[list[str], list[str]]:
            return (q.enqueue_many([JobSpec("hot", {"k": "A", "i": i}, f"a:{i}", group="A",
                                            group_rate=args.rate) for i in range(args.jobs)]),
                    q.enqueue_many([JobSpec("hot", {"k": "B", "i": i}, f"b:{i}", group="B")
                                    for i in range(args.jobs)]))
        if not args.worker_first:
            a, b = fill()
        path = os.pathsep.join([code_path(TREE), os.path.join(ROOT, "bench", "apps")])
        env = dict(os.environ, BENCH_REDIS_URL=server.url, ANTRE_REDIS_URL=server.url,
                   PYTHONPATH=path)
        env.pop("ANTRE_DATABASE_URL", None)
        log_path = os.path.join(ROOT, "bench", "out", "perkey-worker.log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "wb") as log:
            worker = subprocess.Popen([sys.executable, "-m", "antre_cli", "worker", APP],
                                      cwd=TREE, env=env, stdout=log, stderr=log)
            deadline = time.monotonic() + args.timeout
            if args.worker_first:  # the jobs arrive once the worker runs one (a warm-up job)
                q.enqueue("hot", {"k": "warm", "i": 0}, idempotency_key="warm")
                while not client.zcard(q.keys.done) and time.monotonic() < deadline:
                    time.sleep(0.05)
                a, b = fill()
            try:
                while time.monotonic() < deadline:
                    if client.zcard(q.keys.done) >= 2 * args.jobs + int(args.worker_first):
                        break
                    time.sleep(0.2)
            finally:
                worker.terminate()
                worker.wait(60)
        pipe = client.pipeline(transaction=False)
        for i in a + b:
            pipe.hmget(q.keys.job(i), "reserved_at", "snoozes", "deliveries")
        rows = pipe.execute()
        starts_a = sorted(int(r[0]) for r in rows[:len(a)] if r[0])
        if os.environ.get("BENCH_DEBUG"):  # A's starts, ms after the first
            print([t - starts_a[0] for t in starts_a], file=sys.stderr)
        most = max((sum(1 for t in starts_a if s <= t < s + 1000) for s in starts_a), default=0)
        fa, fb = _finish_times(client, a), _finish_times(client, b)
        start = min(fa + fb)
        return {"case": f"group rate {args.rate}" + (", worker first" if args.worker_first else ""), "a_done": len(fa), "b_done": len(fb),
                "a_most_starts_in_1s": most, "a_drain_s": round((max(fa) - start) / 1000, 2),
                "b_drain_s": round((max(fb) - start) / 1000, 2),
                "snoozes": sum(int(r[1] or 0) for r in rows),
                "deliveries_per_job": round(sum(int(r[2] or 0) for r in rows) / len(rows), 3),
                "left": states(client)}
    finally:
        server.stop()


def slots(args: argparse.Namespace) -> dict[str, object]:
    """``--jobs`` 2 ms jobs of one group with ``--slots`` slots (group_concurrency), drained by
    one default burst worker (1 process x 4 runner threads, prefetch 16; ``--prefetch N`` as
    well), the worker's code taking turns between ``--trees`` (comma-separated checkouts,
    default this one): the group's starts per second (its jobs over the span from the first's
    end to the last's)."""
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    trees = [os.path.abspath(t) for t in (args.trees.split(",") if args.trees else [TREE])]
    extra = ("--prefetch", str(args.prefetch)) if args.prefetch else ()
    rows: dict[str, list[float]] = {t: [] for t in trees}
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for _ in range(args.reps):
            for tree in trees:
                client.flushall()
                q = Queue(client, "default")
                q.enqueue_many([JobSpec("hot", {"k": "A", "i": i}, f"a:{i}", group="A",
                                        group_concurrency=args.slots)
                                for i in range(args.jobs)])
                burst(server.url, args.timeout, tree, extra)
                ends = sorted(int(x.split(":")[1]) for x in client.lrange("perkey:order:A", 0, -1))
                span = (ends[-1] - ends[0]) / 1000 if len(ends) > 1 else 0
                rows[tree].append(round((len(ends) - 1) / span) if span else 0)
        return {"case": f"starts/s of one group of {args.slots} slots, {args.jobs} jobs of 2 ms"
                        + (f", --prefetch {args.prefetch}" if args.prefetch else ""),
                "starts_per_s": rows,
                "median": {t: statistics.median(v) for t, v in rows.items()}}
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("case", choices=["hot", "noisy", "noop", "reserve", "rate", "slots"])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--groups", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--kinds", default="ungrouped,grouped", help="noop: which rows, in turn")
    p.add_argument("--ungrouped", action="store_true", help="noisy: the same jobs, no groups")
    p.add_argument("--rate", default="50/s", help="rate: group A's group_rate")
    p.add_argument("--worker-first", action="store_true",
                   help="rate: enqueue once the worker runs (else before it starts)")

    p.add_argument("--slots", type=int, default=4, help="slots: the group's slots")
    p.add_argument("--prefetch", type=int, default=0, help="slots: the worker's --prefetch")
    p.add_argument("--trees", default="", help="slots: checkouts taking turns (default: this)")
    args = p.parse_args()
    case = {"hot": hot, "noisy": noisy, "noop": noop, "reserve": reserve_cost,
            "rate": rate, "slots": slots}[args.case]
    print(json.dumps(case(args), indent=1))


if __name__ == "__main__":
    main()

