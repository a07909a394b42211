"""What waiting for a result costs (issue 26): ``app.result(key).wait(timeout)`` beside the
polling loop it replaces (``app.result(key)`` every 50 ms until it is final), taking turns in
one run (this VM's speed drifts, so the two are measured interleaved).

Each round: a job is enqueued and reserved (it "runs" for ``--run-s`` seconds); a producer
thread waits for it; the harness acks it through the queue's own call and takes the time from
just before the ack to the moment the producer has the final status (wake latency: the ack's
round trip, the wake, the producer's final read). Commands: every command the server ran during
the round (INFO commandstats; those the scripts call included, INFO itself left out), the ack's
own among them.

    PYTHONPATH=$PWD python3 bench/experiments/result_wait.py [--rounds 20] [--run-s 0.5]

Prints a Markdown table (quoted in bench/experiments/wait.md).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import redis

from antre import Antre
from antre.embedded import EmbeddedRedis

POLL_S = 0.05


def commands(r: redis.Redis) -> int:
    return sum(int(v["calls"]) for name, v in r.info("commandstats").items()
               if not name.startswith("cmdstat_info"))


def wait_for_blocked(r: redis.Redis) -> None:
    while int(r.info("clients")["blocked_clients"]) < 1:
        time.sleep(0.001)


def one_round(app: Antre, r: redis.Redis, key: str, how: str, run_s: float) -> tuple[float, int]:
    app.enqueue("work", {}, idempotency_key=key)
    (job,) = app.queue().reserve("w1")
    got: dict[str, Any] = {}
    before = commands(r)

    def producer() -> None:
        if how == "wait":
            answer = app.result(key).wait(30)
        else:
            answer = app.result(key)
            while not answer.final:
                time.sleep(POLL_S)
                answer = app.result(key)
        got["at"] = time.perf_counter()
        got["status"] = answer.status

    t = threading.Thread(target=producer)
    t.start()
    if how == "wait":
        wait_for_blocked(r)  # (INFO only)
    time.sleep(run_s)  # the job runs
    acked = time.perf_counter()
    app.queue().ack(job, {"ok": True})
    t.join()
    assert got["status"] == "completed"
    return (got["at"] - acked) * 1000, commands(r) - before


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--run-s", type=float, default=0.5)
    args = ap.parse_args()
    server = EmbeddedRedis(tcp=True).start()
    try:
        app = Antre(redis_url=server.url)
        r = redis.Redis.from_url(server.url, decode_responses=True)
        for how in ("wait", "poll"):  # warm-up: scripts loaded, connections made
            one_round(app, r, f"warm:{how}", how, 0.05)
        out: dict[str, list[tuple[float, int]]] = {"wait": [], "poll": []}
        for i in range(args.rounds):
            for how in (("wait", "poll") if i % 2 == 0 else ("poll", "wait")):
                out[how].append(one_round(app, r, f"{how}:{i}", how, args.run_s))
    finally:
        server.stop()
    print(f"{args.rounds} rounds each, interleaved; the job runs {args.run_s:g} s; "
          f"polling every {POLL_S * 1000:g} ms\n")
    print("| producer | wake latency median ms | p90 ms | worst ms | commands per job (median) |")
    print("|---|---:|---:|---:|---:|")
    for how, label in (("wait", "`app.result(key).wait(30)`"),
                       ("poll", f"`app.result(key)` every {POLL_S * 1000:g} ms")):
        lat = sorted(x for x, _ in out[how])
        cmds = statistics.median(n for _, n in out[how])
        print(f"| {label} | {statistics.median(lat):.2f} | {lat[int(len(lat) * 0.9) - 1]:.2f} "
              f"| {lat[-1]:.2f} | {cmds:g} |")


if __name__ == "__main__":
    main()
