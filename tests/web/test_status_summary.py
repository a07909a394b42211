"""The overview's data is one typed read model (``StatusSummary``) that the page, the JSON API
and ``antre status`` all read."""

from __future__ import annotations

import dataclasses

import pytest
from webtools import basic


from antre.observe import sampling
from antre.engine.locks import LockBusy
from antre.observe.readmodels import StatusSummary
from antre.observe.status import status_summary


def test_page_api_and_summary_agree(web):
    web.q.enqueue("email", {}, idempotency_key="s-1")
    sampling.take(web.producer.redis, web.clock)
    web.clock.advance(60_000)
    web.q.enqueue("email", {}, idempotency_key="s-2")
    (job,) = web.q.reserve("w1")
    web.q.ack(job)
    sampling.take(web.producer.redis, web.clock)
    held = web.svc.locks.acquire("sku:1", 600_000, owner="a")
    for _ in range(2):
        with pytest.raises(LockBusy):
            web.svc.locks.acquire("sku:1", 600_000, owner="b")
    web.svc.locks.release(held)

    summary = status_summary(web.svc.redis, web.clock, locks=web.svc.locks)
    assert isinstance(summary, StatusSummary)
    assert summary.rates["default"].acked == pytest.approx(1.0)  # one ack in one minute
    assert (summary.conflicts_5m, summary.conflicts_1h, summary.conflicts_total) == (2, 2, 2)
    assert [(c.key, c.last_5m, c.last_1h, c.total) for c in summary.contention] == [
        ("sku:1", 2, 2, 2)]

    api = web.app.test_client().get("/api/overview", headers=basic("viewer")).get_json()
    assert api["rates"]["default"]["acked"] == pytest.approx(1.0)
    assert api["contention"] == [dataclasses.asdict(c) for c in summary.contention]
    assert api["overview"]["queues"][0]["name"] == "default"

    page = web.client("viewer").get("/").get_data(as_text=True)
    assert "2<small> in 5 min</small> · 2<small> in 1 h</small> · 2<small> ever</small>" in page
    assert "<code>sku:1</code></td><td>2</td><td>2</td><td>2</td>" in page


def test_the_overview_shows_a_banner_when_redis_can_evict_jobs(web):
    page = web.client("viewer").get("/").get_data(as_text=True)
    assert 'id="eviction-banner"' not in page  # noeviction: nothing to say
    web.producer.redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        page = web.client("viewer").get("/").get_data(as_text=True)
        api = web.app.test_client().get("/api/overview", headers=basic("viewer")).get_json()
    finally:
        web.producer.redis.config_set("maxmemory-policy", "noeviction")
    assert 'id="eviction-banner"' in page
    assert "maxmemory-policy is allkeys-lru" in page and "noeviction" in page
    assert api["memory"]["policy"] == "allkeys-lru" and api["memory"]["evicts"] is True
