"""A Redis Cluster failover is an outage the worker rides out: redis-py
raises CLUSTERDOWN / an uncovered slot / TRYAGAIN once its own retries are spent, and none of
them is a ConnectionError. Before they counted as Redis down, a failover's CLUSTERDOWN went up
through an ack and ended the runner thread (bench/cluster_chaos found it); the system test
tests/system/test_cluster_faults.py kills a real master under a real pool."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ClusterDownError, ResponseError, SlotNotCoveredError, TryAgainError

from antre_worker.health import RedisHealth


@pytest.mark.parametrize("error", [ClusterDownError("The cluster is down"),
                                   SlotNotCoveredError('Slot "42" is not covered by the cluster.'),
                                   TryAgainError("Multiple keys request during rehashing")])
def test_a_failover_error_is_retried_as_an_outage(error, caplog):
    health, calls = RedisHealth("redis://10.0.0.1:7000/0"), []

    def ack():
        calls.append(1)
        if len(calls) < 3:
            raise error
        return "acked"

    with caplog.at_level(logging.WARNING, logger="antre.worker"):
        assert health.call(ack) == "acked"
    assert len(calls) == 3 and not health.down
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events == ["redis_down", "redis_up"]


def test_a_plain_error_reply_is_not_an_outage():
    health = RedisHealth("redis://10.0.0.1:7000/0")

    def bad():
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    with pytest.raises(ResponseError):
        health.call(bad)
    assert not health.down
