"""A flow's results read a page at a time: a big batch's ``results()`` and
``iter_results()`` never read its whole jobs' list or every result in one command; ``offset``
and ``limit`` page them; a group's exits page the same way."""

from __future__ import annotations

import pytest

from antre.errors import InvalidJob
from antre.flows import read


def calls(r, name: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def settle_all(app) -> None:
    q = app.queue()
    while jobs := q.reserve("w", count=100):
        for job in jobs:
            q.ack(job, job.payload["i"])


def test_a_big_batchs_results_are_read_a_page_at_a_time(app, monkeypatch):
    monkeypatch.setattr(read, "RESULTS_PAGE", 7)
    with app.batch(on_complete=app.spec("t", {"i": "end"}, idempotency_key="end")) as b:
        b.add(*[app.spec("t", {"i": i}, idempotency_key=f"k{i}") for i in range(30)])
    settle_all(app)
    r = app.redis
    r.config_resetstat()
    assert b.results() == list(range(30))  # the callback is no member: not in its results
    # 31 ids in the jobs' list (30 members + on_complete): 5 pages, each one LRANGE + HMGET
    assert calls(r, "lrange") == 5 and calls(r, "hmget") == 1 + 5
    r.config_resetstat()
    it = b.iter_results()
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    assert calls(r, "lrange") == 1  # lazily: one page read so far
    assert b.results(offset=12, limit=5) == [12, 13, 14, 15, 16]
    assert b.results(offset=29) == [29] and b.results(offset=40) == []
    assert list(b.iter_results(offset=25)) == [25, 26, 27, 28, 29]
    with pytest.raises(InvalidJob, match="offset"):
        b.results(offset=-1)
    with pytest.raises(InvalidJob, match="limit"):
        b.results(limit="3")


def test_a_groups_results_page_over_its_exits(app, monkeypatch):
    monkeypatch.setattr(read, "RESULTS_PAGE", 4)
    flow = app.parallel([app.spec("t", {"i": i}, idempotency_key=f"g{i}")
                      for i in range(10)]).enqueue()
    settle_all(app)
    app.redis.config_resetstat()
    assert flow.results() == list(range(10))
    assert calls(app.redis, "hmget") == 1 + 3  # the flow's fields, then three pages of results
    assert flow.results(offset=8) == [8, 9]
