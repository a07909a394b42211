"""``bench/rescue.py``: how soon a killed worker's job runs again, and how many jobs run twice
under SIGSTOP pauses, with the lease only (``ANTRE_WORKER_PAUSE_TOLERANCE_S=off``: the rescuer
off, as before it existed) and with the rescuer on its defaults, side by side.

    .venv/bin/python bench/rescue.py                      # 3 kills each, pauses 0.5..5 s x 2
    .venv/bin/python bench/rescue.py --kills 5 --pauses 1,2 --pause-trials 3

Two pools (``antre_worker worker bench.apps.rescue:app --processes 2 --threads 1``, the
defaults otherwise: 1 s heartbeat, 30 s lease), each on its own embedded Redis, one per
setting; the trials alternate between them (paired, interleaved). A kill trial: a ``hold`` job
starts, its process gets kill -9, the figure is the time from the kill to the job's second
start (the other process takes it). A pause trial: the job's process is stopped (SIGSTOP)
for P seconds mid-job and continued; a duplicate run is a second start of the job. Writes
bench/results/rescue.json and bench/results/rescue.md (with the CPU model and the load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antre.embedded import EmbeddedRedis
from antre.engine.queue import RESCUE_WALK, JobSpec, Queue
from antre.observe.finder import Finder
from bench.lib import antre_bench as ab
from bench.lib import faults

STARTED = "bench:rescue:started"
SETTINGS = {"lease only (before)": "off", "rescuer, defaults (after)": None}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


class Side:
    """One pool on its own Redis, with one setting of the tolerance."""

    def __init__(self, name: str, tolerance: str | None, out_dir: str,
                 processes: int = 2) -> None:
        self.name = name
        self.processes = processes
        self.server = EmbeddedRedis(tcp=True).start()
        self.r = redis.Redis.from_url(self.server.url, decode_responses=True)
        self.q = Queue(self.r, "default")
        self.env = ab._env(self.server.url, ANTRE_LOG_LEVEL="WARNING")
        self.env.pop("ANTRE_WORKER_PAUSE_TOLERANCE_S", None)
        if tolerance is not None:
            self.env["ANTRE_WORKER_PAUSE_TOLERANCE_S"] = tolerance
        slug = "lease" if tolerance == "off" else "rescuer"
        self.log = open(os.path.join(out_dir, f"rescue-{slug}.log"), "ab")  # noqa: SIM115
        self.start_pool()

    def start_pool(self) -> None:
        self.pool = subprocess.Popen(
            [sys.executable, "-m", "antre_worker", "worker", "bench.apps.rescue:app",
             "--processes", str(self.processes), "--threads", "1"], cwd=ROOT, env=self.env,
            stdout=self.log, stderr=self.log, start_new_session=True)

    def ready(self, timeout: float = 60, processes: int = 2) -> None:
        """The pool's children up for a second and beating."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(faults.children(self.pool.pid, 1.0)) == processes and \
                    self.r.zcard(self.q.keys.beats) >= processes:
                return
            time.sleep(0.1)
        raise SystemExit(f"{self.name}: the pool's processes did not come up")

    def starts(self, job_id: str) -> list[dict[str, Any]]:
        return [s for s in map(json.loads, self.r.lrange(STARTED, 0, -1)) if s["id"] == job_id]

    def wait_start(self, job_id: str, n: int, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.starts(job_id)
            if len(got) >= n:
                return got[n - 1]
            time.sleep(0.005)
        raise SystemExit(f"{self.name}: job {job_id} did not start {n} times in {timeout}s")

    def wait_done(self, job_id: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.q.get(job_id).state == "done":
                return
            time.sleep(0.02)
        raise SystemExit(f"{self.name}: job {job_id} not done in {timeout}s")

    def by(self, job_id: str) -> list[str]:
        return [f"{e.actor}: {e.details.get('reason', e.details.get('outcome', ''))}"
                for e in Finder(self.r).timeline("default", job_id).events if e.kind == "swept"]

    def kill_trial(self, lock: bool = False) -> dict[str, Any]:
        """``lock``: the job has a lock_key (its business lock, 30 s TTL, held by the killed
        process)."""
        self.ready()
        job_id = self.q.enqueue("hold", {"first_s": 120, "again_s": 0.05},
                                idempotency_key=os.urandom(8).hex(),
                                lock_key=f"acct:{os.urandom(4).hex()}" if lock else None)
        first = self.wait_start(job_id, 1)
        time.sleep(0.5)
        t_kill = time.time()
        os.kill(first["pid"], signal.SIGKILL)
        second = self.wait_start(job_id, 2)
        self.wait_done(job_id)
        return {"rerun_s": round(second["t"] - t_kill, 3), "swept": self.by(job_id)}

    def pause_trial(self, pause_s: float) -> dict[str, Any]:
        self.ready()
        job_id = self.q.enqueue("hold", {"first_s": pause_s + 2, "again_s": pause_s + 2},
                                idempotency_key=os.urandom(8).hex())
        first = self.wait_start(job_id, 1)
        time.sleep(0.3)
        os.kill(first["pid"], signal.SIGSTOP)
        time.sleep(pause_s)
        os.kill(first["pid"], signal.SIGCONT)
        self.wait_done(job_id)
        time.sleep(0.5)  # a duplicate's own start, if any, is in by now
        return {"pause_s": pause_s, "runs": len(self.starts(job_id)), "swept": self.by(job_id)}

    def close(self) -> None:
        ab.stop([self.pool])
        self.server.stop()
        self.log.close()


def scan_cost(n: int, lost: int = 10) -> dict[str, Any]:
    """The rescue script's cost with ``n`` jobs in flight of which ``lost`` are the lost
    process's (it looks at every in-flight job's owner): the server's time for the call."""
    server = EmbeddedRedis(tcp=True).start()
    try:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        q = Queue(r, "default")
        q.enqueue_many(JobSpec("hold", {}, f"s{i}") for i in range(n))
        q.reserve("w-lost", lost)
        while q.reserve("w-live", 1000):
            pass
        r.zadd(q.keys.beats, {"w-lost": 0})
        r.config_resetstat()
        t0 = time.perf_counter()
        res = q.rescue([("w-lost", 0)], 1)
        wall_ms = (time.perf_counter() - t0) * 1000
        stats = r.info("commandstats")
        calls = {k: v for k, v in stats.items() if k.startswith(("cmdstat_fcall", "cmdstat_evalsha"))}
        usec = sum(v["usec"] for v in calls.values())
        ncalls = sum(v["calls"] for v in calls.values())
        return {"in_flight": n, "lost_jobs": lost, "returned": sum(x.returned for x in res),
                "calls": ncalls, "server_ms": round(usec / 1000, 2),
                "per_call_ms": round(usec / 1000 / max(1, ncalls), 2),
                "wall_ms": round(wall_ms, 2)}
    finally:
        server.stop()


def whole_pool(reps: int, out_dir: str) -> list[dict[str, Any]]:
    """The whole pool killed (``os.killpg``: supervisor, its duties and its worker) mid-job and
    a fresh pool started at once, for each setting in turn: the rescuer that would have
    returned the job died with the pool, and the new pool's watches a whole tolerance before it
    judges anyone (its view of Redis had a gap)."""
    out = []
    for _ in range(reps):
        for name, tolerance in SETTINGS.items():
            side = Side(name, tolerance, out_dir, processes=1)
            try:
                side.ready(processes=1)
                job_id = side.q.enqueue("hold", {"first_s": 120, "again_s": 0.05},
                                        idempotency_key=os.urandom(8).hex())
                side.wait_start(job_id, 1)
                time.sleep(0.5)
                t_kill = time.time()
                os.killpg(side.pool.pid, signal.SIGKILL)
                side.pool.wait(10)
                side.start_pool()
                second = side.wait_start(job_id, 2)
                out.append({"setting": name, "rerun_s": round(second["t"] - t_kill, 3),
                            "swept": side.by(job_id)})
                ab.log(f"whole pool killed, {name}: {out[-1]}")
            finally:
                side.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--pauses", default="0.5,1,1.5,2,3,5")
    p.add_argument("--pause-trials", type=int, default=2)
    p.add_argument("--scan", default="1000,10000,100000",
                   help="in-flight counts to time one rescue call at")
    p.add_argument("--whole-pool", type=int, default=2,
                   help="trials per setting with the whole pool killed and a fresh one started")
    p.add_argument("--scan-only", action="store_true",
                   help="only time the rescue call; the trials' figures are kept from "
                        "bench/results/rescue.json")
    a = p.parse_args()
    results = os.path.join(ROOT, "bench", "results")
    out_dir = os.path.join(ab.HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    if a.scan_only:
        with open(os.path.join(results, "rescue.json")) as f:
            kept = json.load(f)
        kept["scan"] = [scan_cost(int(n)) for n in a.scan.split(",") if n]
        kept["whole_pool"] = whole_pool(a.whole_pool, out_dir)
        kept["scan_command"] = " ".join(["bench/rescue.py", *sys.argv[1:]])
        kept["scan_load"] = load()
        write(results, kept)
        return 0
    pauses = [float(x) for x in a.pauses.split(",") if x]
    before = {"cpu": cpu_model(), "load_before": load(),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    sides = {name: Side(name, tol, out_dir) for name, tol in SETTINGS.items()}
    kills: dict[str, list[dict[str, Any]]] = {n: [] for n in sides}
    locked: dict[str, list[dict[str, Any]]] = {n: [] for n in sides}
    paused: dict[str, list[dict[str, Any]]] = {n: [] for n in sides}
    try:
        for side in sides.values():
            side.ready()
        for i in range(a.kills):
            for name, side in sides.items():
                kills[name].append(side.kill_trial())
                ab.log(f"kill {i + 1}, {name}: {kills[name][-1]}")
            for name, side in sides.items():
                locked[name].append(side.kill_trial(lock=True))
                ab.log(f"kill {i + 1} (lock_key), {name}: {locked[name][-1]}")
        for pause_s in pauses:
            for _ in range(a.pause_trials):
                for name, side in sides.items():
                    paused[name].append(side.pause_trial(pause_s))
                    ab.log(f"pause {pause_s}s, {name}: {paused[name][-1]}")
    finally:
        for side in sides.values():
            side.close()
    scans = [scan_cost(int(n)) for n in a.scan.split(",") if n]
    pools = whole_pool(a.whole_pool, out_dir)
    for row in scans:
        ab.log(f"rescue call: {row}")
    result = {**before, "scan": scans, "whole_pool": pools, "load_after": load(), "command": " ".join(["bench/rescue.py", *sys.argv[1:]]),
              "kills": kills, "kills_lock_key": locked, "pauses": paused,
              "summary": {name: {
                  "rerun_s_median": statistics.median(t["rerun_s"] for t in kills[name]),
                  "rerun_s_max": max(t["rerun_s"] for t in kills[name]),
                  "lock_key_rerun_s_median": statistics.median(t["rerun_s"]
                                                               for t in locked[name]),
                  "duplicates_by_pause": {str(ps): sum(t["runs"] - 1 for t in paused[name]
                                                       if t["pause_s"] == ps) for ps in pauses},
              } for name in sides}}
    write(results, result)
    print(json.dumps(result["summary"], indent=1))
    return 0


def write(results: str, result: dict[str, Any]) -> None:
    with open(os.path.join(results, "rescue.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(results, "rescue.md"), "w") as f:
        f.write(markdown(result))


def markdown(res: dict[str, Any]) -> str:
    names = list(res["summary"])
    pauses = list(res["summary"][names[0]]["duplicates_by_pause"])
    lines = [
        "# Recovery after kill -9: the rescuer against the lease alone", "",
        f"`{res['command']}` (`.venv/bin/python bench/rescue.py`), {res['when']}.", "",
        (f"CPU: {res['cpu']}. Load before: `{res['load_before']}`; after: "
         f"`{res['load_after']}`."), "",
        ("Two pools (`antre_worker worker bench.apps.rescue:app --processes 2 --threads 1`, "
         "otherwise as shipped: 1 s heartbeat, 30 s lease, the duties on), each on its own "
         "embedded Redis: one with `ANTRE_WORKER_PAUSE_TOLERANCE_S=off` (the rescuer off: the "
         "lease alone, as before it existed), one with the default (3.5 s). Trials alternate "
         "between them."), "",
        "## kill -9 mid-job to the job's second start", "",
        "| setting | job | each trial (s) | median (s) | max (s) | returned by |",
        "|---|---|---|---|---|---|"]
    for what, field_name in (("plain", "kills"), ("with a lock_key (30 s lock TTL)",
                                                  "kills_lock_key")):
        for n in names:
            rows = res.get(field_name, {}).get(n) or []
            if not rows:
                continue
            ts = [t["rerun_s"] for t in rows]
            by = sorted({s.split(":")[0] for t in rows for s in t["swept"]})
            lines.append(f"| {n} | {what} | {', '.join(f'{t:.2f}' for t in ts)} | "
                         f"{statistics.median(ts):.2f} | {max(ts):.2f} | {', '.join(by)} |")
    reps = len(res["pauses"][names[0]]) // max(1, len(pauses))
    lines += ["", (f"## Duplicate runs under a SIGSTOP of the job's process mid-job "
                   f"({reps} trials per pause)"), "",
              "| setting | " + " | ".join(f"{p} s" for p in pauses) + " |",
              "|---|" + "---|" * len(pauses)]
    for n in names:
        d = res["summary"][n]["duplicates_by_pause"]
        lines.append(f"| {n} | " + " | ".join(str(d[p]) for p in pauses) + " |")
    lines += ["", ("A duplicate run is a second start of the job: the paused process was "
                   "taken for lost and its job ran elsewhere; when it woke its ack was refused "
                   "(lease epoch bumped: `lease_lost` in its log) and the job is done once."), "",
              ("## A rescue's cost (every in-flight job of the partition is looked at, "
               f"{RESCUE_WALK:,} per script call)"), "",
              ("| in flight | lost jobs | calls | Redis time, all calls (ms) | per call (ms) "
               "| wall (ms) |"), "|---|---|---|---|---|---|"]
    for row in res["scan"]:
        lines.append(f"| {row['in_flight']:,} | {row['lost_jobs']} | {row.get('calls', 1)} | "
                     f"{row['server_ms']} | {row.get('per_call_ms', row['server_ms'])} | "
                     f"{row.get('wall_ms', row.get('round_trip_ms'))} |")
    if res.get("whole_pool"):
        lines += ["", ("## The whole pool killed mid-job (supervisor, duties and its one "
                       "worker: `killpg`), a fresh pool started at once"), "",
                  "| setting | kill to the job's second start (s) | returned by |", "|---|---|---|"]
        for row in res["whole_pool"]:
            by = ", ".join(sorted({x.split(":")[0] for x in row["swept"]}))
            lines.append(f"| {row['setting']} | {row['rerun_s']:.2f} | {by} |")
        lines += ["", ("The rescuer died with the pool; the new pool's rescuer, whose view of "
                       "Redis had a gap, watches for a whole tolerance before it judges anyone.")]
    if "scan_command" in res:
        lines += ["", (f"The last two tables: `{res['scan_command']}` (the trials above kept "
                       f"from the full run), load `{res['scan_load']}`.")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
