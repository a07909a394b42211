"""``await app.aflow_wait(flow_id, timeout=)``: the flow wait from asyncio, on the
same wake list as ``flow.wait``, its BLMOVE sent on ``redis.asyncio`` (no thread held): it
returns once the settlement that finishes the flow runs (acked from the test while the
coroutine waits), with the same few commands however long it waited (INFO commandstats from a
second client); a finished flow answers at once; one that runs out raises ``FlowTimeout``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from antre import Antre
from antre.flows import FlowTimeout
from helpers import run_async
from test_wait import blocked, commands, finish, spec


async def await_finished(app: Antre, r: redis.Redis, flow_id: str, busy_s: float) -> Any:
    """The coroutine waits; meanwhile (on a thread: the loop stays free) the test waits for
    it to block, lets ``busy_s`` pass, and acks the flow's jobs."""
    def driver() -> None:
        blocked(r, 1)
        threading.Event().wait(busy_s)  # the flow "takes a while" (the wait is measured)
        finish(app)

    task = asyncio.create_task(app.aflow_wait(flow_id, timeout=30))
    await asyncio.to_thread(driver)
    return await asyncio.wait_for(task, 10)


def cost_of_a_wait(app: Antre, r: redis.Redis, busy_s: float) -> dict[str, int]:
    flow = app.chain(spec(app, 1), spec(app, 2)).enqueue()
    flow.status()

    async def main() -> Any:
        before = commands(r)
        row = await await_finished(app, r, flow.id, busy_s)
        return row, before

    row, before = run_async(main())
    assert row.state == "succeeded" and row.done == 2
    after = commands(r)
    # (a new loop's client, or a pool's extra connection, says hello and may ping: not part
    # of the wait)
    return {n: c - before.get(n, 0) for n, c in after.items()
            if c != before.get(n, 0) and not n.startswith(("client", "hello", "select", "ping"))}


def test_an_async_wait_returns_when_the_flow_finishes_with_a_bounded_cost(app, r):
    cost_of_a_wait(app, r, 0.05)  # scripts loaded, clients connected
    short = cost_of_a_wait(app, r, 0.05)
    long = cost_of_a_wait(app, r, 1.5)
    assert short == long
    assert short["blmove"] == 1  # one blocking command, no poll of the flow's state


def test_an_async_wait_on_a_finished_flow_answers_at_once_and_one_that_runs_out_raises(app):
    flow = app.chain(spec(app, 1)).enqueue()

    async def main() -> tuple[Any, Any]:
        with pytest.raises(FlowTimeout) as info:
            await app.aflow_wait(flow.id, timeout=0.05)
        finish(app)
        return info.value.status, await app.aflow_wait(flow.id, timeout=0)

    before, after = run_async(main())
    assert before is not None and before.state == "running"
    assert after.state == "succeeded"
    assert run_async(flow.await_(1)).state == "succeeded"  # the thread fallback, no client
