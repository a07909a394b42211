"""``bench/cluster_scale``: one queue over a 6-node Redis Cluster, workers on two hosts (issue 29
item 4's measurement).

    bench/cluster_scale                              # 20,000 jobs; p1 and p3, interleaved x2
    bench/cluster_scale --jobs 50000 --layouts p1 p3 p6 q3 --rounds 3

The set-up is ``bench/lib/cluster_harness.py``: 3 masters + 3 replicas of ``redis-server`` on a
bridge, and two network namespaces ("hosts"), each running ``antre worker
bench.apps.cluster:app --processes P --threads T``. A layout is ``pN``: the queue ``default``
with N partitions (``Antre(partitions=N)``), or ``qN``: N separate queues chosen so their hash
tags land on different masters (what a user could do without partitions; jobs dealt round
robin). Each trial: flush, enqueue the jobs with ``enqueue_many`` (chunks of 1,000) before the
pools start, start the pools, count the acks. The rate is taken between 10% and 90% of the jobs
acked (the pools' start-up is outside it), and so is each node's Redis CPU (INFO cpu
``used_cpu_user + used_cpu_sys`` deltas) and the workers' CPU (their process trees). Layouts are
interleaved in each round, so a change in the machine's load hits all of them alike: compare
rates within one run only. Writes bench/results/cluster-scale.json and the scale
section of bench/results/cluster.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.lib.antre_bench import TreeCpu  # noqa: E402
from bench.lib.cluster_harness import Harness, log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNK = 1_000


def load_app(url: str, partitions: int) -> Any:
    """The bench app as a producer in this process imports it, for ``partitions``."""
    import importlib
    os.environ["BENCH_REDIS_URL"], os.environ["BENCH_PARTITIONS"] = url, str(partitions)
    os.environ.pop("BENCH_DATABASE_URL", None)
    import bench.apps.cluster as mod
    return importlib.reload(mod).app


def spread_queues(h: Harness, app: Any, n: int) -> list[str]:
    """``n`` queue names whose hash tags land on ``n`` different masters (as far as there are
    masters; round robin over them after that)."""
    masters = [m.addr for m in h.masters()]
    by_master: dict[str, list[str]] = {m: [] for m in masters}
    i = 0
    while min(len(v) for v in by_master.values()) < -(-n // len(masters)):
        name = f"q{i}"
        by_master[h.master_of(app.queue(name).keys.ready).addr].append(name)
        i += 1
    return [by_master[masters[j % len(masters)]][j // len(masters)] for j in range(n)]


def acked(app: Any, queues: list[str]) -> int:
    """Jobs acked so far over every partition of ``queues``."""
    import bench.apps.cluster as mod
    total = 0
    for name in queues:
        for q in mod.partitions(name):
            stats = q.stats()
            total += stats.get("acked", 0) + stats.get("deduplicated", 0)
    return total


def trial(h: Harness, layout: str, a: argparse.Namespace) -> dict[str, Any]:
    kind, count = layout[0], int(layout[1:])
    partitions = count if kind == "p" else 1
    app = load_app(h.cluster_url, partitions)
    client = h.client()
    client.flushall(target_nodes=client.PRIMARIES)
    queues = spread_queues(h, app, count) if kind == "q" else ["default"]
    masters = h.masters()
    cpu0 = h.cpu_s(masters)
    t0 = time.monotonic()
    run = f"{layout}-{int(time.time())}"
    specs: dict[str, list[Any]] = {q: [] for q in queues}
    for i in range(a.jobs):
        specs[queues[i % len(queues)]].append(
            app.spec("noop", {"i": i}, idempotency_key=f"{run}:{i}"))
    for q, batch in specs.items():
        for start in range(0, len(batch), CHUNK):
            app.enqueue_many(batch[start:start + CHUNK], queue=q)
    enqueue_s = time.monotonic() - t0
    cpu1 = h.cpu_s(masters)
    env = {"BENCH_REDIS_URL": h.cluster_url, "ANTRE_REDIS_URL": h.cluster_url,
           "BENCH_PARTITIONS": str(partitions), "ANTRE_LOG_LEVEL": "WARNING"}
    extra = ["--queues", ",".join(queues)]
    pools = [h.start_pool(host, "bench.apps.cluster:app", a.processes, a.threads,
                          {**env, "BENCH_HOST": host.name},
                          os.path.join(a.work_dir, f"scale-{layout}-{host.name}.log"), extra)
             for host in h.hosts]
    cpu = TreeCpu(*[p.pid for p in pools])
    marks: dict[str, Any] = {}
    deadline = time.monotonic() + a.timeout
    done = 0
    while time.monotonic() < deadline:
        done = acked(app, queues)
        if "lo" not in marks and done >= a.jobs * 0.1:
            marks["lo"] = (time.monotonic(), done, h.cpu_s(masters), cpu.total(),
                           commands(masters))
        if "lo" in marks and done >= a.jobs * 0.9:
            marks["hi"] = (time.monotonic(), done, h.cpu_s(masters), cpu.total(),
                           commands(masters))
            break
        if any(p.poll() is not None for p in pools):
            break
        time.sleep(0.05)
    h.stop_pools()
    done = acked(app, queues)
    client.close()
    if "hi" not in marks:
        return {"layout": layout, "error": f"only {done}/{a.jobs} acked in {a.timeout}s"}
    (t_lo, n_lo, c_lo, w_lo, k_lo), (t_hi, n_hi, c_hi, w_hi, k_hi) = marks["lo"], marks["hi"]
    jobs = n_hi - n_lo
    per_node = {m.addr: round((c_hi[m.addr] - c_lo[m.addr]) / jobs * 1e6, 1) for m in masters}
    busy = sum(per_node.values())
    return {
        "layout": layout, "queues": queues, "partitions": partitions, "jobs": a.jobs,
        "rate_jobs_s": round(jobs / (t_hi - t_lo)),
        "redis_cpu_us_per_job_by_master": per_node,
        "redis_cpu_us_per_job": round(busy, 1),
        "busiest_master_share": round(max(per_node.values()) / busy, 2) if busy else None,
        # one Redis core's worth of the busiest master: the queue's ceiling on this layout
        "ceiling_jobs_s": round(1e6 / max(per_node.values())) if busy else None,
        "redis_commands_per_job": round((k_hi - k_lo) / jobs, 2),
        "redis_cpu_s_by_master": {m.addr: round(c_hi[m.addr] - c_lo[m.addr], 2)
                                  for m in masters},
        "worker_cpu_us_per_job": round((w_hi - w_lo) / jobs * 1e6),
        "enqueue_jobs_s": round(a.jobs / enqueue_s),
        "enqueue_redis_cpu_us_per_job_by_master": {
            m.addr: round((cpu1[m.addr] - cpu0[m.addr]) / a.jobs * 1e6, 1) for m in masters},
        "window_s": round(t_hi - t_lo, 2), "acked_at_end": done,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def commands(nodes: list[Any]) -> int:
    return sum(int(n.client().info("stats")["total_commands_processed"]) for n in nodes)


def summary(trials: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for layout in dict.fromkeys(t["layout"] for t in trials):
        ok = [t for t in trials if t["layout"] == layout and "error" not in t]
        if not ok:
            continue
        out[layout] = {
            "rate_jobs_s (median)": round(statistics.median(t["rate_jobs_s"] for t in ok)),
            "redis_cpu_us_per_job (median)": round(statistics.median(
                t["redis_cpu_us_per_job"] for t in ok), 1),
            "busiest_master_share (median)": statistics.median(
                t["busiest_master_share"] for t in ok),
            "ceiling_jobs_s (median)": round(statistics.median(t["ceiling_jobs_s"] for t in ok)),
            "redis_commands_per_job (median)": round(statistics.median(
                t["redis_commands_per_job"] for t in ok), 2),
            "worker_cpu_us_per_job (median)": round(statistics.median(
                t["worker_cpu_us_per_job"] for t in ok)),
            "trials": len(ok)}
    return out


def render(res: dict[str, Any]) -> str:
    lines = ["## Scale: one queue over the cluster (`bench/cluster_scale`)", "",
             f"`{res['command']}` on {res['date']}; {res['machine']['nproc']} CPUs "
             f"({res['machine']['cpu']}), shared with other work: load average "
             f"{res['load_avg_start']} at the start, {res['load_avg_end']} at the end. "
             f"{res['params']['jobs']:,} no-op jobs (a small result returned) per trial, "
             f"workers on {res['params']['hosts']} hosts x {res['params']['processes']} "
             f"process(es) x {res['params']['threads']} threads; layouts interleaved, "
             f"{res['params']['rounds']} rounds. Rates are wall-clock on a loaded 2-core "
             "machine: read them as ratios within this run.", "",
             "| layout | jobs/s (median) | Redis CPU µs/job (all masters) | busiest master's "
             "share | ceiling: 1 s of the busiest master's CPU (jobs/s) | Redis commands/job "
             "| worker CPU µs/job | trials |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for layout, s in res["summary"].items():
        lines.append(f"| {describe(layout)} | {s['rate_jobs_s (median)']:,} | "
                     f"{s['redis_cpu_us_per_job (median)']} | "
                     f"{s['busiest_master_share (median)']:.0%} | "
                     f"{s['ceiling_jobs_s (median)']:,} | {s['redis_commands_per_job (median)']} | "
                     f"{s['worker_cpu_us_per_job (median)']} | {s['trials']} |")
    lines += ["", "Each trial's Redis CPU per job on each master (µs, processing window):", "",
              "| trial | layout | " + " | ".join(f"master {i + 1}" for i in range(3))
              + " | jobs/s | load |", "|---|---|" + "---:|" * 5]
    for n, t in enumerate(res["trials"], start=1):
        if "error" in t:
            lines.append(f"| {n} | {describe(t['layout'])} | {t['error']} |")
            continue
        per = list(t["redis_cpu_us_per_job_by_master"].values())
        lines.append(f"| {n} | {describe(t['layout'])} | " + " | ".join(str(v) for v in per)
                     + f" | {t['rate_jobs_s']:,} | {t['load_avg'][0]} |")
    return "\n".join(lines) + "\n"


def describe(layout: str) -> str:
    n = int(layout[1:])
    if layout[0] == "p":
        return f"1 queue, {n} partition{'s' if n > 1 else ''}"
    return f"{n} separate queues"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/cluster_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--layouts", nargs="+", default=["p1", "p3"],
                   help="pN: one queue, N partitions; qN: N queues on different masters")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--processes", type=int, default=1, help="worker processes per host")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--keep", action="store_true", help="leave the set-up running")
    p.add_argument("--out", default=os.path.join(HERE, "results", "cluster-scale.json"))
    p.add_argument("--md", default=os.path.join(HERE, "results", "cluster.md"),
                   help="'' to leave it")
    args = p.parse_args(argv)
    for layout in args.layouts:
        if layout[:1] not in ("p", "q") or not layout[1:].isdigit() or int(layout[1:]) < 1:
            p.error(f"--layouts: {layout!r} is not pN or qN (e.g. p1 p3 q3)")
    return args


def write_md(path: str, section: str, text: str) -> None:
    """Replaces (or adds) the ``## <section>...`` part of bench/results/cluster.md, keeping the
    rest."""
    head = ("# Antre on a Redis Cluster (issue 29 items 4 and 5)\n\n"
            "A local 6-node Redis Cluster (3 masters + 3 replicas, redis-server 7.0) and worker "
            "pools on two network namespaces, made by `bench/lib/cluster_harness.py`. Every "
            "process of it, the six Redis servers included, shares one 2-core VM with other "
            "work, so a wall rate here is bound by those 2 cores, not by a Redis core: the "
            "figures that carry over to real nodes are where the Redis CPU goes (each master's "
            "share) and the ceiling it sets, one second of the busiest master's CPU divided by "
            "its CPU per job. Redis commands per job count every command the masters ran in "
            "the window, idle workers' waits included.\n\n")
    parts: dict[str, str] = {}
    if os.path.exists(path):
        with open(path) as f:
            body = f.read()
        for chunk in body.split("\n## ")[1:]:
            parts[chunk.split(":", 1)[0]] = "## " + chunk.rstrip() + "\n"
    parts[section] = text
    with open(path, "w") as f:
        f.write(head + "\n".join(parts[k] for k in sorted(parts, key=lambda s: s != "Scale")))


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    from bench.run import machine
    started = [round(x, 2) for x in os.getloadavg()]
    trials = []
    with Harness(hosts=a.hosts, keep=a.keep) as h:
        a.work_dir = h.work_dir
        for r in range(a.rounds):
            for layout in a.layouts:
                log(f"round {r + 1}/{a.rounds}: {describe(layout)}")
                t = trial(h, layout, a)
                log(json.dumps(t))
                trials.append(t)
    res = {"command": "bench/cluster_scale " + " ".join(argv if argv is not None
                                                         else sys.argv[1:]),
           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "machine": machine(), "load_avg_start": started,
           "load_avg_end": [round(x, 2) for x in os.getloadavg()],
           "params": {k: v for k, v in vars(a).items() if k not in ("out", "md", "work_dir")},
           "summary": summary(trials), "trials": trials}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    text = render(res)
    if a.md:
        write_md(a.md, "Scale", text)
    print(text)
    return 0 if all("error" not in t for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
