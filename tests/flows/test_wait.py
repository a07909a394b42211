"""``flow.wait(timeout=)``: woken by the settlement that finishes the flow (its wake
list), not by polling: the commands the server runs during a wait do not grow with its length
(counted with INFO commandstats from a second client); a finished flow answers at once, a
failed one too, and a wait that runs out raises ``FlowTimeout`` with the status."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from antre import Antre
from antre.flows import FlowTimeout
from helpers import wait_for


def spec(app: Antre, i: object) -> Any:
    return app.spec("t", {"i": i}, idempotency_key=f"k:{i}")


class Waiter(threading.Thread):
    def __init__(self, flow: Any, timeout: float = 30) -> None:
        super().__init__(daemon=True)
        self.flow, self.timeout = flow, timeout
        self.answer: Any = None
        self.start()

    def run(self) -> None:
        self.answer = self.flow.wait(self.timeout)


def blocked(r: redis.Redis, n: int) -> None:
    wait_for(lambda: int(r.info("clients")["blocked_clients"]) == n, what=f"{n} blocked")


def commands(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {name[len("cmdstat_"):]: int(v["calls"]) for name, v in stats.items()
            if not name.startswith("cmdstat_info")}


def finish(app: Antre) -> None:
    q = app.queue()
    while jobs := q.reserve("w", count=10):
        for job in jobs:
            q.ack(job, job.payload["i"])


def cost_of_a_wait(app: Antre, r: redis.Redis, busy_s: float) -> dict[str, int]:
    flow = app.chain(spec(app, 1)).enqueue()
    flow.status()  # (connections made: not part of the wait)
    before = commands(r)
    w = Waiter(flow)
    blocked(r, 1)
    threading.Event().wait(busy_s)  # the flow "takes a while" (real time: the wait is measured)
    finish(app)
    w.join(10)
    assert w.answer.state == "succeeded"
    after = commands(r)
    return {n: c - before.get(n, 0) for n, c in after.items() if c != before.get(n, 0)}


def test_a_wait_costs_the_same_commands_however_long_it_waits(app, r):
    cost_of_a_wait(app, r, 0.05)  # scripts loaded
    short = cost_of_a_wait(app, r, 0.05)
    long = cost_of_a_wait(app, r, 1.5)
    assert short == long
    assert short["blmove"] == 1  # one blocking command, no poll of the flow's state


def test_a_finished_or_failed_flow_answers_at_once_and_every_waiter_wakes(app, r):
    flow = app.chord([spec(app, 1), spec(app, 2)], spec(app, 3)).enqueue()
    waiters = [Waiter(flow), Waiter(flow)]
    blocked(r, 2)
    finish(app)
    for w in waiters:
        w.join(10)
        assert w.answer.state == "succeeded"
    assert flow.wait(0).state == "succeeded"  # the token stays for later waiters
    failing = app.chain(spec(app, 4), spec(app, 5)).enqueue()
    (job,) = app.queue().reserve("w")
    app.queue().bury(job, reason="no")
    assert failing.wait(1).state == "failed"


def test_a_wait_that_runs_out_raises_with_the_status(app):
    flow = app.chain(spec(app, 1)).enqueue()
    with pytest.raises(FlowTimeout) as info:
        flow.wait(0.05)
    assert info.value.status is not None and info.value.status.state == "running"
