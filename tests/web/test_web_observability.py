"""/metrics, the alert banner and the flow-control panel of the dashboard."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from webtools import basic, post

from antre.observe.alerts import AlertEngine
from antre.limits.admission import CircuitBreaker, Limits



def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_need_a_user_and_parse(web):
    anon = web.app.test_client()
    assert anon.get("/metrics").status_code in (302, 401)
    web.dead_job()
    web.q.enqueue("email", {}, idempotency_key="m1")
    resp = anon.get("/metrics", headers=basic("viewer"))
    assert resp.status_code == 200 and resp.content_type.startswith("text/plain")
    values = samples(resp.get_data(as_text=True))
    assert values[("antre_dlq_count", (("queue", "default"),))] == 1
    assert values[("antre_queue_depth", (("queue", "default"), ("state", "ready")))] == 1


def test_firing_alert_shows_as_the_header_count_and_in_the_incident_view(web):
    """No full-width banner; a count in the header opens the incident view."""
    web.q.enqueue("email", {}, idempotency_key="stuck")  # ready, and no live worker
    events = AlertEngine(web.producer.redis, web.clock).check()
    assert any(e.rule == "no_live_worker" for e in events)
    viewer = web.client("viewer")
    page = viewer.get("/").get_data(as_text=True)
    assert 'class="banner alert"' not in page
    assert 'class="incident-count critical"' in page and 'data-count="1"' in page
    view = viewer.get("/incident/").get_data(as_text=True)
    assert 'data-incident="no_live_worker|*"' in view and "no live worker while 1 jobs" in view


def test_open_breaker_is_shown_and_an_operator_can_close_it(web):
    flow = Limits(web.producer.redis, web.clock)
    breaker: CircuitBreaker = flow.breaker("downstream:smtp", 1, 60, 30)
    breaker.record_failure()
    assert breaker.state().state == "open"
    viewer = web.client("viewer").get("/").get_data(as_text=True)
    assert "downstream:smtp" in viewer and ">Close breaker<" not in viewer
    op = web.client("operator")
    assert ">Close breaker<" in op.get("/").get_data(as_text=True)
    resp = post(op, "/flow/breakers/downstream:smtp/reset", {"reason": "provider is back"})
    assert resp.status_code == 303
    assert breaker.state().state == "closed"
    entry = web.audit("flow.reset_breaker")[0]
    assert (entry.outcome, entry.reason, entry.user) == ("ok", "provider is back", "operator")


def test_viewer_cannot_close_a_breaker(web):
    flow = Limits(web.producer.redis, web.clock)
    flow.breaker("downstream:smtp", 1, 60, 30).record_failure()
    resp = post(web.client("viewer"), "/flow/breakers/downstream:smtp/reset")
    assert resp.status_code == 403
    assert flow.breakers()[0].state == "open"
    assert web.audit("flow.reset_breaker")[0].outcome == "refused"


def test_the_workers_page_shows_each_processs_completed_key_cache_hit_rate(web):
    from antre.observe.registry import WorkerInfo, WorkerRegistry

    registry = WorkerRegistry(web.producer.redis, web.clock)
    registry.beat(WorkerInfo(id="w-page", host="h", cache_hits=1, cache_misses=3))
    registry.beat(WorkerInfo(id="w-none", host="h"))
    page = web.client("viewer").get("/workers/").get_data(as_text=True)
    assert "Cache hits" in page and "25% <small>of 4</small>" in page
    row = page.split("<code>w-none</code>", 1)[1].split("</tr>", 1)[0]
    assert "—" in row and "%" not in row  # no lookups yet: no rate
