"""A queue's published partition count that is no count (letters, out of range, a hash) is
refused with a clear error and a safe fallback: the queue goes on (enqueue, reserve, ack),
its readers count it, ``partitions_grow.lua`` leaves the value alone, and ``antre status``
reports the queue instead of saying Redis is unreachable."""

from __future__ import annotations

import json
import logging

import pytest

from antre import Antre
from antre.engine import keys, partitions
from antre_cli.main import main

GARBAGE = {
    "letters": lambda r, k: r.set(k, "abc"),
    "too many": lambda r, k: r.set(k, "999999"),
    "zero": lambda r, k: r.set(k, "0"),
    "a hash": lambda r, k: r.hset(k, "n", "3"),
}


@pytest.mark.parametrize("configured", [1, 3])
@pytest.mark.parametrize("what", sorted(GARBAGE))
def test_a_garbage_partition_count_is_refused_and_the_queue_goes_on(
        redis_url, r, clock, caplog, what, configured):
    key = keys.QueueKeys("billing").partition_count
    GARBAGE[what](r, key)
    partitions._REFUSED.clear()  # (said once per process: here, once per test)
    app = Antre(redis_url=redis_url, clock=clock, partitions=configured)
    with caplog.at_level(logging.ERROR, logger="antre.partitions"):
        job_id = app.enqueue("charge", {}, idempotency_key="c1", queue="billing")
        q = app.job_queue("billing", job_id)
        (job,) = q.reserve("w1")
        assert q.ack_many([(job, None)]) == []
        assert partitions.published(r, "billing") == 1  # a reader's fallback
    assert any("partition count of queue 'billing'" in m and "is ignored" in m
               for m in caplog.messages)
    assert r.type(key) == ("hash" if what == "a hash" else "string")  # left as it is
    assert r.hlen(key) if what == "a hash" else r.get(key) == {"letters": "abc",
                                                                 "too many": "999999",
                                                                 "zero": "0"}[what]


@pytest.mark.parametrize("what", sorted(GARBAGE))
def test_status_reports_a_queue_whose_partition_count_is_garbage(
        monkeypatch, redis_url, r, capsys, what):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    app = Antre(redis_url=redis_url)
    app.enqueue("charge", {}, idempotency_key="c1", queue="billing")
    GARBAGE[what](r, keys.QueueKeys("billing").partition_count)
    assert main(["status", "--json"]) == 0
    captured = capsys.readouterr()
    assert "unreachable" not in captured.err
    assert "billing" in json.dumps(json.loads(captured.out))


@pytest.mark.parametrize("raw,n", [("1", 1), ("256", 256), ("257", None), ("03", 3),
                                   ("-1", None), ("1.5", None), ("٣", None), (b"7", 7)])
def test_parse_count_takes_only_whole_numbers_in_range(raw, n):
    assert partitions.parse_count(raw) == n
