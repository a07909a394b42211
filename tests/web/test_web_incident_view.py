"""The incident view (issue 25 item 1): nothing about queues before login, open problems
ranked with their evidence and action, acknowledge / silence (operator, CSRF, audited) and
per-queue thresholds (admin)."""

from __future__ import annotations

from antre.observe.alerts import AlertEngine

from webtools import htmx, post


def fire_dlq_alert(web, queue_name="payments-eu", n=3):
    """``n`` dead jobs in ``queue_name`` and a DLQ-growth rule that fires above 1."""
    from antre.observe.alerts import dlq_growth
    q = web.producer.queue(queue_name)
    engine = AlertEngine(web.producer.redis, web.clock, rules=[dlq_growth(1, 300)])
    q.enqueue("charge", {"i": -1}, idempotency_key=f"first:{web.clock()}")  # the queue exists
    engine.check()  # the first point, before the spike
    web.clock.advance(1000)
    for i in range(n):
        q.enqueue("charge", {"i": i}, idempotency_key=f"k{i}:{web.clock()}")
        (job,) = q.reserve("w1")
        q.bury(job, reason="permanent failure", error="card declined: do not honor (05)",
               traceback="Traceback: boom")
        web.clock.advance(5)
    events = engine.check()
    assert [e.rule for e in events] == ["dlq_growth"]
    return engine


def test_nothing_about_queues_reaches_the_login_page(web):
    fire_dlq_alert(web, "payments-eu")
    anon = web.app.test_client()
    for url in ("/login", "/login?next=/dlq/"):
        page = anon.get(url).get_data(as_text=True)
        assert "payments-eu" not in page and "dead-lettered" not in page, url
        assert "banner alert" not in page and "incident-count" not in page, url
    assert "payments-eu" not in anon.get("/", follow_redirects=True).get_data(as_text=True)
