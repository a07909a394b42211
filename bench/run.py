"""``bench/run``: every benchmark of issues 6 and 14 in one run against one private Redis server.

The headline rows are ``antre worker app:app`` as a user starts it (no flags, the default
environment: INFO JSON logs, scheduler and sweeper on), fed by ``app.enqueue_many``; tuned
configurations follow, each naming what it changes. Every row has the worker's CPU µs per job.
Huey and Dramatiq (and the other peers) run in the same run, each started as its docs start
it, with their single-enqueue rate and p99 enqueue-to-start at 200 jobs/s beside Antre's.
What a target compares is measured taking turns (this VM's speed drifts by 2x within
minutes): the headline rows with the peers, the single enqueues in blocks, the latency rounds.

    bench/run                  # the full run (~10-15 min on 2 cores)
    bench/run --quick          # small N everywhere (a smoke test, ~3 min)
    bench/run --jobs 20000 --memory-jobs 1000000 --reps 2 --skip-peers --skip-pg

Writes bench/results/run.json (raw) and bench/results/run.md (tables, versions, machine,
command; bench/results/run-notes.md appended).
Redis: a private EmbeddedRedis (TCP on 127.0.0.1, appendonly off), flushed between runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis
from bench.lib import antre_bench as ab
from bench.lib import enqueue_paired as ep
from bench import flows as fb
from bench.lib import peer_bench as pb

HERE, PG_DEFAULT, log = ab.HERE, ab.PG_DEFAULT, ab.log
# the headline rows: `antre worker app:app` as a user starts it
DEFAULTS_1 = "antre worker app:app (defaults: 1 process x 4 threads, INFO JSON logs, scheduler on)"
DEFAULTS_2 = "antre worker app:app --processes 2 (both cores; defaults otherwise)"
PG_LOCK = "defaults + idempotency (PostgreSQL) + lock per job, 1 process"
# issue 23's judged row: the same jobs spread over 10,000 groups (fair shares), taking turns with
# DEFAULTS_1 in the same rounds
GROUPS = 10_000
GROUPED = (f"defaults, the jobs in {GROUPS:,} groups (`group=\"g<i % {GROUPS:,}>\"`, "
           "default group limits), 1 process")


def one_run(fn: Callable[[], dict[str, Any]], key: str = "jobs_per_s") -> dict[str, Any]:
    """``fn()``, or the error it raised as a run of 0 (a broken system must not stop the run)."""
    try:
        return fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-1500:], key: 0}


def median_of(reps: int, fn: Callable[[], dict[str, Any]], key: str = "jobs_per_s"
              ) -> dict[str, Any]:
    """Run ``fn`` ``reps`` times; keep the run whose ``key`` is the median (lower median for
    an even count), with every run's figure listed."""
    return keep_median([one_run(fn, key) for _ in range(reps)], key)


def taking_turns(reps: int, fns: dict[str, Callable[[], dict[str, Any]]]
                 ) -> dict[str, dict[str, Any]]:
    """``reps`` rounds in which every configuration of ``fns`` runs once, in turn; per
    configuration the median run (as ``median_of``). The VM's speed drifts by 2x within
    minutes: configurations compared by a target run side by side, not minutes apart."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            runs[name].append(one_run(fn))
            log(f"{name}: {runs[name][-1].get('jobs_per_s')} jobs/s")
    return {name: keep_median(r) for name, r in runs.items()}


def keep_median(runs: list[dict[str, Any]], key: str = "jobs_per_s") -> dict[str, Any]:
    """Of runs already made: the run whose ``key`` is the median (lower median for an even
    count), with every run's figure listed."""
    ordered = sorted(runs, key=lambda r: r.get(key, 0))
    kept = dict(ordered[(len(ordered) - 1) // 2])
    kept["runs"] = [r.get(key, 0) for r in runs]
    kept["median"] = statistics.median(kept["runs"])
    return kept


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = (0, 0, 0)
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_at_start": [round(x, 2) for x in load]}


def versions(server: EmbeddedRedis, client: redis.Redis) -> dict[str, str]:
    info = client.info("server")
    out = {"redis_server": f"{info.get('redis_version')} ({os.path.basename(server.binary or '')})",
           "redis-py": md.version("redis"), "antre": md.version("antre"),
           "sqlalchemy": md.version("sqlalchemy")}
    try:
        out["psycopg"] = md.version("psycopg")
    except md.PackageNotFoundError:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small N everywhere (smoke test)")
    p.add_argument("--jobs", type=int, default=None, help="no-op jobs per run (default 20000)")
    p.add_argument("--peer-jobs", type=int, default=None, help="jobs per peer run (default 10000)")
    p.add_argument("--idem-jobs", type=int, default=None, help="jobs per idempotency run (5000)")
    p.add_argument("--memory-jobs", type=int, default=None,
                   help="jobs of the memory run (default 50000; the full target is 1000000)")
    p.add_argument("--reps", type=int, default=2, help="runs per configuration (median kept)")
    p.add_argument("--peers", default=",".join(pb.PEERS), help="comma-separated peer names")
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--skip-pg", action="store_true")
    p.add_argument("--skip-kill9", action="store_true",
                   help="skip the kill -9 checks (a 3 s job, worker killed mid-job)")
    p.add_argument("--kill9-wait", type=float, default=20.0,
                   help="seconds to wait for a killed job to run again")
    p.add_argument("--pg-url", default=os.environ.get("ANTRE_TEST_PG_URL", PG_DEFAULT))
    p.add_argument("--latency-seconds", type=float, default=10.0)
    p.add_argument("--out", default=os.path.join(ab.RESULTS, "run.json"))
    p.add_argument("--md", default=os.path.join(ab.RESULTS, "run.md"))
    p.add_argument("--render-only", action="store_true",
                   help="re-write the --md document from the --out JSON without measuring")
    args = p.parse_args(argv)
    if args.render_only:
        with open(args.out) as f:
            results = json.load(f)
        with open(args.md, "w") as f:
            f.write(render(results, args.out))
        return 0
    q = args.quick
    n = args.jobs or (3_000 if q else 20_000)
    peer_n = args.peer_jobs or (1_000 if q else 10_000)
    idem_n = args.idem_jobs or (1_000 if q else 5_000)
    mem_n = args.memory_jobs or (10_000 if q else 50_000)
    reps = 1 if q and args.reps == 2 else args.reps
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)

    started = time.time()
    results: dict[str, Any] = {
        "command": "bench/run " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(), "params": {"jobs": n, "peer_jobs": peer_n, "idem_jobs": idem_n,
                                         "memory_jobs": mem_n, "reps": reps,
                                         "latency_seconds": args.latency_seconds}}
    server = EmbeddedRedis(tcp=True, appendonly=False).start()
    url = server.url
    client = redis.Redis.from_url(url, decode_responses=True)
    results["versions"] = versions(server, client)
    try:
        log(f"private redis at {url}; N={n}, peers N={peer_n}, reps={reps}")
        results["ceiling"] = median_of(reps, lambda: ab.ceiling(url), "ping_per_s")
        log(f"ceiling {results['ceiling']}")
        results["enqueue"] = median_of(max(reps, 5), lambda: ab.enqueue(
            url, n_single=min(5_000, n), n_many=max(n, 50_000 if not q else 10_000)),
            "enqueue_many_per_s")
        log(f"enqueue {results['enqueue']}")
        # single enqueue: each system's producer in its own long-lived process, blocks of 500
        # single enqueues taking turns (antre, huey, dramatiq, huey, dramatiq, antre, ...):
        # the machine's drift touches every system alike (bench/lib/enqueue_paired.py)
        # the systems whose producers are compared (single enqueue, latency): Antre, Huey and
        # Dramatiq when they are among the peers
        one_names = ["antre"] + ([] if args.skip_peers else
                                 [x for x in ("huey", "dramatiq") if x in args.peers.split(",")])
        try:
            sides = {name: (ep.side_antre(url) if name == "antre" else ep.side_peer(url, name))
                     for name in one_names}
            results["single_enqueue"] = ep.paired(
                url, sides, blocks=max(reps, 3) * 10, size=500,
                base="huey" if "huey" in one_names else None)
        except Exception as exc:  # a broken system must not stop the whole run
            results["single_enqueue"] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"single enqueue {results['single_enqueue']}")

        rows: dict[str, Any] = {}
        results["antre"] = rows

        def antre(name: str, fn: Callable[[], dict[str, Any]]) -> None:
            rows[name] = median_of(reps, fn)
            log(f"{name}: {rows[name].get('jobs_per_s')} jobs/s {rows[name].get('runs')} "
                f"cpu {rows[name].get('worker_cpu_us_per_job')} us/job "
                f"{rows[name].get('error', '')}")

        # the headline rows: what a user starts, nothing changed; measured below, taking turns
        # with the peers (the targets compare them)
        headline = {DEFAULTS_1: lambda: ab.worker_run(url, n),
                    DEFAULTS_2: lambda: ab.worker_run(url, n, ["--processes", "2"]),
                    GROUPED: lambda: ab.worker_run(url, n, groups=GROUPS)}
        rows.update({name: {} for name in headline})  # their place: the table's first rows
        # tuned: each row names what it changes
        quiet = {"ANTRE_LOG_LEVEL": "WARNING"}
        antre("tuned: ANTRE_LOG_LEVEL=WARNING (no per-job log lines), 1 process",
              lambda: ab.worker_run(url, n, env=quiet, count_rtt=True))
        antre("tuned: ANTRE_LOG_LEVEL=WARNING, --processes 2",
              lambda: ab.worker_run(url, n, ["--processes", "2"], env=quiet))
        antre("defaults, the handler returning None (not a small result), 1 process",
              lambda: ab.worker_run(url, n, job_type="noop_none"))
        antre("tuned: --no-scheduler (no sweeper or other duties in the pool), 1 process",
              lambda: ab.worker_run(url, n, ["--no-scheduler"]))
        antre("tuned: --prefetch 1 (one job per reserve), 1 process",
              lambda: ab.worker_run(url, n, ["--prefetch", "1"], count_rtt=True))
        antre("raw loop, 1 process (reserve 100 + ack_many; no worker, no handler lookup)",
              lambda: ab.raw_loop(url, n, 1, 100))
        antre("raw loop, 2 processes (reserve 100 + ack_many)", lambda: ab.raw_loop(url, n, 2, 100))
        antre("raw loop, 1 process (reserve 16 + one ack per job)",
              lambda: ab.raw_loop(url, n, 1, 16, "ack"))

        sqlite_path = os.path.join(HERE, "out", "bench.db")

        def sqlite_run(lock: bool) -> dict[str, Any]:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(sqlite_path + suffix):
                    os.remove(sqlite_path + suffix)
            return ab.worker_run(url, idem_n, database_url=f"sqlite:///{sqlite_path}",
                                 lock=lock)
        antre("defaults + idempotency (SQLite), 1 process", lambda: sqlite_run(False))
        antre("defaults + idempotency (SQLite) + lock per job, 1 process", lambda: sqlite_run(True))
        if not args.skip_pg:
            def pg_run(lock: bool, procs: int = 1, write: bool = False) -> dict[str, Any]:
                pg, drop = ab.pg_schema_url(args.pg_url)
                try:
                    return ab.worker_run(url, idem_n, ["--processes", "2"] if procs == 2 else [],
                                         database_url=pg, lock=lock, write=write)
                finally:
                    drop()
            try:
                antre("defaults + idempotency (PostgreSQL), 1 process", lambda: pg_run(False))
                antre(PG_LOCK, lambda: pg_run(True))
                antre("defaults + idempotency (PostgreSQL) + lock per job, --processes 2",
                      lambda: pg_run(True, 2))
                antre("defaults + idempotency (PostgreSQL) + one row written through ctx.db, "
                      "1 process", lambda: pg_run(False, write=True))
                antre("defaults + idempotency (PostgreSQL) + lock per job + one row written "
                      "through ctx.db, 1 process", lambda: pg_run(True, write=True))
            except Exception as exc:
                log(f"PostgreSQL skipped: {exc}")
                results["postgres_error"] = str(exc)

        # flow overhead (issue 26): chords of 100 no-op children vs as many plain jobs, taking
        # turns (bench/flows.py, bench/results/flows.md)
        try:
            results["flows"] = fb.compare(url, 20 if q else 100, reps)
        except Exception as exc:  # a broken flow must not stop the whole run
            results["flows"] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"flows {results['flows']}")

        # rounds interleaved (antre, huey, dramatiq, antre, ...), every system's samples pooled:
        # a p99 of one 10 s round rests on its 20 slowest samples, so one round moves it a lot
        lat_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in one_names}
        for _ in range(reps):
            for name in one_names:
                r = (ab.latency(url, rate=200, seconds=args.latency_seconds) if name == "antre"
                     else pb.latency(url, name, 200, args.latency_seconds))
                lat_runs[name].append(r)
                log(f"latency {name} { {k: v for k, v in r.items() if k != 'samples'} }")
        results["latency"] = {name: ab.pooled_latency(runs) for name, runs in lat_runs.items()}
        log(f"memory run: {mem_n} jobs")
        results["memory"] = ab.memory(url, mem_n)
        log(f"memory {results['memory']}")

        # the headline rows and the peers, taking turns: each round runs Antre's two headline
        # configurations and every peer once
        peer_names = [] if args.skip_peers else [x for x in args.peers.split(",") if x]
        fns = dict(headline)
        for name in peer_names:
            k = max(200, int(peer_n * pb.PEERS[name].get("jobs_factor", 1.0)))
            fns["peer " + name] = lambda name=name, k=k: pb.run_peer(url, name, k)
        turns = taking_turns(reps, fns)
        for name in headline:
            rows[name] = turns[name]
            log(f"{name}: {rows[name].get('jobs_per_s')} jobs/s {rows[name].get('runs')} "
                f"cpu {rows[name].get('worker_cpu_us_per_job')} us/job "
                f"{rows[name].get('error', '')}")
        if not args.skip_peers:
            peers: dict[str, Any] = {}
            results["peers"] = peers
            for name in peer_names:
                peer = pb.PEERS[name]
                peers[name] = turns["peer " + name]
                peers[name]["version"] = pb.version(peer["venv"], pb.DISTS[peer["venv"]])
                log(f"peer {name}: {peers[name].get('jobs_per_s')} jobs/s "
                    f"{peers[name].get('runs')} cpu {peers[name].get('worker_cpu_us_per_job')} "
                    f"us/job {peers[name].get('error', '')}")
        if not args.skip_kill9:
            kill9: dict[str, Any] = {}
            results["kill9"] = kill9
            names = ["antre"] + ([] if args.skip_peers else
                                 [x for x in args.peers.split(",")
                                  if x and x not in ("rq-fork", "dramatiq-2p")])
            for name in names:
                try:
                    kill9[name] = pb.kill9_check(url, name, args.kill9_wait)
                except Exception as exc:
                    kill9[name] = {"result": f"check failed: {exc!r}", "verified": False}
                log(f"kill -9 {name}: {kill9[name]['result']}")
    finally:
        client.close()
        server.stop()
    results["elapsed_s"] = round(time.time() - started, 1)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
    with open(args.md, "w") as f:
        f.write(render(results, args.out))
    log(f"wrote {args.out} and {args.md} in {results['elapsed_s']} s")
    return 0


def _med(r: dict[str, Any], key: str = "jobs_per_s") -> int:
    """The median over the runs (for two runs, their mean)."""
    return round(r.get("median", r.get(key, 0)) or 0)


def _pct(x: float, ceiling: float) -> str:
    return f"{100 * x / ceiling:.0f}%" if ceiling else "-"


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _targets(res: dict[str, Any]) -> list[str]:
    """Issue 14's targets (ratios from this run, defaults as shipped), each with its figures."""
    rows = res.get("antre", {})
    noop1, noop2 = _med(rows.get(DEFAULTS_1, {})), _med(rows.get(DEFAULTS_2, {}))
    peers = {name: _med(r) for name, r in (res.get("peers") or {}).items() if not r.get("error")}
    keeping = {n: v for n, v in peers.items() if pb.PEERS[n]["keeps_job_in_redis"]}
    best_keeping = max(keeping.items(), key=lambda kv: kv[1], default=("-", 0))
    huey = peers.get("huey")
    out = ["## Targets (issues 14 and 23: defaults as shipped, ratios from this run)", "",
           "| target | figures | |", "|---|---|---|"]
    if huey:
        out.append(f"| no-op, 1 worker process >= 2x Huey | {noop1:,} vs {huey:,} = "
                   f"{noop1 / huey:.2f}x | {_met(noop1 >= 2 * huey)} |")
    if keeping:
        out.append(f"| no-op, both cores >= 3x the best peer that keeps jobs ({best_keeping[0]}"
                   f", its best configuration here) | {noop2:,} vs {best_keeping[1]:,} = "
                   f"{noop2 / max(1, best_keeping[1]):.2f}x | "
                   f"{_met(noop2 >= 3 * best_keeping[1])} |")
    lat = res.get("latency") or {}
    a_p99, h_p99 = (lat.get("antre") or {}).get("p99_ms"), (lat.get("huey") or {}).get("p99_ms")
    if a_p99 is not None and h_p99 is not None:
        out.append(f"| p99 enqueue-to-start at 200 jobs/s <= Huey's | {a_p99} ms vs {h_p99} ms "
                   f"| {_met(a_p99 <= h_p99)} |")
    single = res.get("single_enqueue") or {}
    a_one, h_one = _med(single.get("antre", {}), "enqueue_per_s"), \
        _med(single.get("huey", {}), "enqueue_per_s")
    if h_one:
        ratio = single.get("antre", {}).get("ratio_to_huey")
        paired = (f" (median of {single['antre'].get('blocks')} paired blocks; Antre/Huey in "
                  f"the same round: x{ratio[1]:.2f}, quartiles x{ratio[0]:.2f}-x{ratio[2]:.2f})"
                  if ratio else "")
        out.append(f"| single `enqueue` >= Huey's | {a_one:,} vs {h_one:,} jobs/s{paired} | "
                   f"{_met(a_one >= h_one)} |")
    many = _med(res.get("enqueue", {}), "enqueue_many_per_s")
    out.append(f"| `enqueue_many` >= 40,000 jobs/s | {many:,} | {_met(many >= 40_000)} |")
    grouped = _med(rows.get(GROUPED, {}))
    if grouped and noop1:
        out.append(f"| no-op with {GROUPS:,} distinct groups >= 70% of ungrouped, 1 process "
                   f"(issue 23; taking turns in this run) | {grouped:,} vs {noop1:,} = "
                   f"{grouped / noop1:.0%} | {_met(grouped >= 0.7 * noop1)} |")
    pg_lock = _med(rows.get(PG_LOCK, {}))
    if pg_lock:
        out.append(f"| PostgreSQL idempotency record + lock per job >= 1,500 jobs/s per process "
                   f"(defaults) | {pg_lock:,} | {_met(pg_lock >= 1_500)} |")
    every = [*rows.values(), *(res.get("peers") or {}).values()]
    listed = all(r.get("worker_cpu_us_per_job") for r in every if not r.get("error"))
    out.append(f"| each row lists worker CPU µs per job | see the tables | {_met(listed)} |")
    return out + [""]


def _enqueue_table(res: dict[str, Any]) -> list[str]:
    e = res.get("enqueue", {})
    many = _med(e, "enqueue_many_per_s")
    out = ["## Enqueue (the producer: jobs/s wall, µs of producer CPU per job)", "",
           "| system | measure | jobs/s | CPU µs/job | runs |", "|---|---|---:|---:|---|"]
    for name, r in (res.get("single_enqueue") or {}).items():
        if not isinstance(r, dict):
            continue
        how = "`app.enqueue(...)`" if name == "antre" else "its own send, e.g. `task()`"
        runs = (f"median of {r.get('blocks')} blocks of {r.get('block_size')}, quartiles "
                f"{r.get('quartiles_per_s')}" if r.get("blocks") else r.get("runs"))
        out.append(f"| {name} | one job per call ({how}) | {_med(r, 'enqueue_per_s'):,} | "
                   f"{r.get('enqueue_cpu_us', '-')} | {runs} |")
    out += [f"| antre | `app.enqueue_many`, {e.get('enqueue_many_chunk'):,} specs a call | {many:,} | "
            f"{e.get('enqueue_many_cpu_us', '-')} | {e.get('runs')} |", ""]
    return out


def _antre_table(res: dict[str, Any], ping: int) -> list[str]:
    out = ["## Antre: no-op processing", "",
           "The first rows are `antre worker app:app` as a user starts it: no flags, the default "
           "environment (INFO JSON logs to a file, scheduler and sweeper on), the handler "
           "returning a small result (`{\"ok\": true, \"i\": i}`); jobs produced with "
           "`app.enqueue_many`. Failures (retry, bury), Redis CPU per job and dead-job bytes, "
           "two revisions side by side: `bench/run --ab REV_A REV_B` (bench/cost.py). Each further row names what it changes.", "",
           "| configuration | jobs/s (median) | runs | per process | worker CPU µs/job | "
           "vs PING ceiling | log bytes/job | EVALSHA/job | round trips/job | Redis cmds/job |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in res.get("antre", {}).items():
        per = round(_med(r) / max(1, r.get("processes", 1)))
        out.append(f"| {name} | {_med(r):,} | {r.get('runs')} | {per:,} | "
                   f"{r.get('worker_cpu_us_per_job', '-')} | {_pct(per, ping)} | "
                   f"{r.get('log_bytes_per_job', '-')} | {r.get('evalsha_per_job', '-')} | "
                   f"{r.get('round_trips_per_job', '-')} | {r.get('redis_commands_per_job', '-')} |"
                   + (f" error: {r['error'][:200]}" if r.get("error") else ""))
    out += ["", "Worker CPU µs/job: user + system CPU of the worker's whole process tree "
            "(supervisor, children, their threads), from the first job finished to the last, "
            "divided by the jobs done in between (psutil). vs PING ceiling: jobs/s per process "
            "divided by single PINGs/s. Round trips/job: requests written by the worker process "
            "(a pipeline counts once), counted by wrapping redis-py's `send_packed_command` "
            "(only on the rows that show it, so the headline rows run unwrapped). Redis cmds/job: "
            "`total_commands_processed` delta / N, commands inside Lua scripts included.", ""]
    return out


def _latency_table(res: dict[str, Any]) -> list[str]:
    lat = res.get("latency", {})
    seconds = res.get("params", {}).get("latency_seconds", 10)
    out = ["## Enqueue-to-start latency", "",
           f"Producer paced at 200 jobs/s for {seconds} s (`--latency-seconds`), one worker "
           "process started as its docs start it; the handler records when it started. The "
           "systems take turns, one round each, `--reps` times; the percentiles are of all "
           "rounds' samples together, with each round's p99 beside them.", "",
           "| system | worker | samples | p50 ms | p90 ms | p99 ms | max ms | p99 per round |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for name, r in lat.items():
        out.append(f"| {name} | `{r.get('command', '')}` | {r.get('n')} | {r.get('p50_ms')} "
                   f"| {r.get('p90_ms')} | {r.get('p99_ms')} | {r.get('max_ms')} "
                   f"| {r.get('round_p99_ms', [r.get('p99_ms')])} |"
                   + (f" error: {r['error']}" if r.get("error") else ""))
    return out + [""]


def _peers_table(res: dict[str, Any]) -> list[str]:
    antre_rows, k9 = res.get("antre", {}), res.get("kill9", {})
    base_row = antre_rows.get(DEFAULTS_1, {})
    base = _med(base_row)
    out = ["## Side by side with the peers (same server, same machine, same run)", "",
           "N no-op jobs enqueued first, then drained; each worker started as its docs start it "
           "and at its default verbosity.", "",
           "| system | version | configuration | jobs/s (median) | runs | worker CPU µs/job | "
           "vs Antre (defaults, 1 process) | keeps the job in Redis while it runs | on kill -9 of "
           "the worker mid-job (docs) | kill -9 observed here (3 s job, whole worker killed, a "
           "fresh worker started) |", "|---|---|---|---:|---|---:|---:|---|---|---|",
           f"| **Antre** | {res['versions'].get('antre')} | `antre worker app:app` (defaults) | "
           f"{base:,} | {base_row.get('runs')} | {base_row.get('worker_cpu_us_per_job', '-')} | "
           "1.00x | yes (in-flight zset, fenced lease) | lease expires, the sweeper returns it to "
           "ready; after max_deliveries it is buried as poison (tested in bench/chaos) | "
           f"{k9.get('antre', {}).get('result', 'not checked')} |"]
    for name, r in res["peers"].items():
        peer = pb.PEERS[name]
        ratio = f"{_med(r) / base:.2f}x" if base else "-"
        out.append(f"| {name} | {r.get('version')} | {peer['note']} (`{r.get('command', '')}`) | "
                   f"{_med(r):,} | {r.get('runs')} | {r.get('worker_cpu_us_per_job', '-')} | "
                   f"{ratio} | {'yes' if peer['keeps_job_in_redis'] else '**no**'} | "
                   f"{peer['kill9']} | "
                   f"{k9.get(name.replace('rq-fork', 'rq-simple'), {}).get('result', 'not checked')} |"
                   + (f" error: {r['error'][:200]}" if r.get("error") else ""))
    return out + [""]


def _flows_table(res: dict[str, Any]) -> list[str]:
    """Issue 26's row: chords of 100 no-op children against as many plain jobs."""
    f = res.get("flows")
    if not f:
        return []
    if f.get("error"):
        return ["## Flows (issue 26)", "", f"Not measured: {f['error']}", ""]
    chord, plain = f["chord"], f["plain"]
    return ["## Flows (issue 26): a chord of 100 no-op children vs 100 plain jobs", "",
            f"{f['chords']} chords of {f['children']} no-op children and a no-op callback, "
            f"against {f['chords'] * f['children']:,} plain no-op jobs enqueued 100 per "
            "`enqueue_many`, each drained by `antre worker app:app` (defaults), the two taking "
            "turns (`bench/flows.py`; bench/results/flows.md).", "",
            "| jobs | jobs/s (median) | runs | worker CPU µs/job | Redis CPU µs/job |",
            "|---|---:|---|---:|---:|",
            f"| chords | {chord.get('jobs_per_s', 0):,} | {chord.get('runs')} | "
            f"{chord.get('worker_cpu_us_per_job')} | {chord.get('redis_cpu_us_per_job')} |",
            f"| plain | {plain.get('jobs_per_s', 0):,} | {plain.get('runs')} | "
            f"{plain.get('worker_cpu_us_per_job')} | {plain.get('redis_cpu_us_per_job')} |", "",
            f"Chords at {100 * f['ratio']:.0f}% of plain (target >= 50%): "
            f"{_met(bool(f['met']))}.", ""]


def render(res: dict[str, Any], json_path: str) -> str:
    m, v, c = res["machine"], res["versions"], res["ceiling"]
    ping = _med(c, "ping_per_s")
    out = ["# Antre benchmarks", "",
           f"Generated by `{res['command'].strip()}` on {res['date']} in {res['elapsed_s']} s. "
           "Re-run with that one command; figures taken while other work shares the machine "
           "are provisional.", "",
           f"- Machine: {m['nproc']} CPUs, {m['cpu']}; {m['platform']}; Python {m['python']}; "
           f"load average at start {m['loadavg_at_start']}",
           "- Versions: " + ", ".join(f"{k} {x}" for k, x in v.items()),
           f"- Parameters: {res['params']}; each configuration run {res['params']['reps']}x, the "
           "median kept (all runs listed). Antre's two headline rows and the peers take turns "
           "(one run of each per round), so the ratios the targets read come from runs made "
           "side by side; the single enqueue takes turns in blocks of 500.",
           "- Jobs/s = (jobs - 1) / (last finished - first finished), seen through "
           "`bench/lib/progress.py` (no extra round trip per job); the worker's start-up is excluded.",
           ""] + _targets(res) + [
           "## The ceiling (Redis round trips from one Python thread)", "",
           "| measure | per second |", "|---|---:|",
           f"| PING, one at a time | {ping:,} |",
           f"| PING, pipelined {c.get('pipeline_batch')} at a time (commands/s; run kept for the "
           f"median PING) | {c.get('pipelined_ping_per_s', 0):,} |",
           f"| PING runs | {c.get('runs')} |", ""]
    out += _enqueue_table(res) + _antre_table(res, ping) + _latency_table(res)
    out += _flows_table(res)
    mem = res.get("memory", {})
    out += ["## Worker memory over a long run", "",
            f"`antre worker app:app` (defaults), {mem.get('n', 0):,} no-op jobs "
            f"({mem.get('done', 0):,} done, {mem.get('seconds')} s); RSS of the worker child "
            "process.", "",
            "| start (after 5%) MB | middle MB | end MB | max MB |", "|---:|---:|---:|---:|",
            f"| {mem.get('rss_start_mb')} | {mem.get('rss_mid_mb')} | {mem.get('rss_end_mb')} | "
            f"{mem.get('rss_max_mb')} |", ""]
    if res.get("peers"):
        out += _peers_table(res)
    shown = os.path.abspath(json_path)
    if shown.startswith(ROOT + os.sep):
        shown = os.path.relpath(shown, ROOT)
    out += [f"Raw figures: `{shown}`.", ""]
    notes = os.path.join(ab.RESULTS, "run-notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            out += [f.read()]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
