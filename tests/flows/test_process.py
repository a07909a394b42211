"""A chord through real worker processes: ``kill -9`` of the worker running one of
its children mid-flow; the lease is swept (the sweeper's clock advanced in the test, never
slept for), a new worker finishes the flow, and the callback is enqueued and run exactly once
with every child's result in order."""

from __future__ import annotations

import json

import redis

from antre import Antre
from antre.clock import ManualClock, system_ms
from antre.engine.queue import Queue
from helpers import spawn, wait_for

APP = "tests.apps.flows:app"


def child(redis_url: str, tmp_path, *extra: str):
    return spawn(redis_url, ["antre_worker.child", APP, "--threads", "2", "--prefetch", "1",
                             "--heartbeat", "0.2", *extra], tmp_path / "worker.log")


def test_kill_9_mid_flow_the_callback_runs_once_with_every_result(redis_url, r, tmp_path,
                                                                   procs):
    producer = Antre(redis_url=redis_url)
    parts = [producer.spec("part", {"i": i, "hold": i == 2}, idempotency_key=f"part:{i}")
             for i in range(5)]
    flow = producer.chord(parts, producer.spec("collect", {}, idempotency_key="collect")
                          ).enqueue()
    p = child(redis_url, tmp_path)
    procs.append(p)
    wait_for(lambda: flow.status().done == 4 and r.lrange("flows:runs", 0, -1), timeout=90,
             what="four parts done, the held one running")
    assert any(run.startswith("2:1:") for run in r.lrange("flows:runs", 0, -1))
    p.kill()  # kill -9 while part 2 runs
    p.wait(10)
    assert flow.status().state == "running" and r.get("flows:callback_runs") is None
    later = Queue(redis.Redis.from_url(redis_url, decode_responses=True), "default",
                  clock=ManualClock(system_ms() + 31_000))
    assert later.sweep().requeued == 1
    p2 = child(redis_url, tmp_path, "--burst")
    procs.append(p2)
    assert p2.wait(90) == 0
    status = flow.status()
    assert (status.state, status.done, status.pending) == ("succeeded", 6, 0)
    assert r.get("flows:callback_runs") == "1"
    assert json.loads(r.get("flows:callback_got")) == [0, 10, 20, 30, 40]
    assert flow.results() == [100]
