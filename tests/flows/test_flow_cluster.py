"""A flow on a local 3-node Redis Cluster: all of a flow's keys share its queue's
hash tag, so storing it, settling its jobs, waiting for it and cancelling one are single-slot
scripts there too."""

from __future__ import annotations

import pytest
from redis.cluster import ClusterNode, RedisCluster

from antre import Antre
from antre.clock import ManualClock
from antre.flows import FlowReader

pytestmark = pytest.mark.cluster


@pytest.fixture
def rc(redis_cluster):
    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in redis_cluster],
                          decode_responses=True)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


@pytest.mark.parametrize("queue", ["orders", "q3"])
def test_a_chord_settles_and_a_flow_cancels_on_a_cluster(rc, queue):
    app = Antre(redis_client=rc, clock=ManualClock(), default_queue=queue)
    spec = lambda i: app.spec("t", {"i": i}, idempotency_key=f"k{i}")  # noqa: E731
    flow = app.chord([spec(1), spec(2)], spec("cb")).enqueue()
    q = app.queue()
    while jobs := q.reserve("w", count=10):
        q.ack_many([(job, job.payload["i"]) for job in jobs])
    assert flow.wait(1).state == "succeeded" and flow.results() == ["cb"]
    other = app.chain(spec(3), spec(4)).enqueue()
    assert other.cancel("alice").ended == 1
    assert FlowReader(rc).counts(queue) == {"running": 0, "waiting": 0, "failed": 0,
                                            "succeeded": 1, "cancelled": 1}
    assert rc.sismember("antre:queues", queue)
