"""The incident view: nothing about queues before login, open problems
ranked with their evidence and action, acknowledge / silence (operator, CSRF, audited) and
per-queue thresholds (admin)."""

from __future__ import annotations

from antre.engine import keys
from antre.observe.alerts import AlertEngine

from webtools import basic, post


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
    assert anon.get("/incident/").status_code in (302, 401)
    assert anon.get("/api/incidents").status_code == 401


def _open_breaker(web, name="downstream:psp"):
    from antre.limits.admission import Limits
    Limits(web.producer.redis, web.clock).breaker(name, 1, 60, 30).record_failure()


def test_the_view_ranks_problems_with_evidence_and_the_action_that_helps(web):
    fire_dlq_alert(web, "payments-eu")
    _open_breaker(web)
    op = web.client("operator")
    post(op, "/queues/payments-eu/pause", {"reason": "psp outage"})
    page = op.get("/incident/").get_data(as_text=True)
    order = [page.index(f'data-incident="{i}"') for i in
             ("dlq_growth|payments-eu", "breaker_open|downstream:psp", "paused|payments-eu")]
    assert order == sorted(order)  # critical, major, minor
    assert "permanent: card declined: do not honor (&lt;n&gt;)" in page  # the top error group, readable
    group = web.svc.reads.error_groups("payments-eu")[0]
    assert f"/dlq/?queue=payments-eu&amp;group={group.group}" in page  # replay it there
    assert ">Replay this error group<" in page
    assert "/queues/payments-eu/resume" in page and ">Resume<" in page
    assert "/flow/breakers/downstream%3Apsp/reset" in page and ">Close breaker<" in page
    # the header: a count that opens the view, no banner
    assert 'class="incident-count critical"' in page and 'data-count="3"' in page
    assert "banner alert" not in op.get("/dlq/?queue=payments-eu").get_data(as_text=True)
    listed = web.client().get("/api/incidents", headers=basic("viewer")).get_json()
    assert listed["count"] == 3 and listed["worst"] == "critical"
    assert listed["open"][0]["groups"][0]["count"] == 3


def test_a_viewer_sees_the_view_but_no_action_forms(web):
    fire_dlq_alert(web)
    page = web.client("viewer").get("/incident/").get_data(as_text=True)
    assert 'data-incident="dlq_growth|payments-eu"' in page
    assert ">Acknowledge<" not in page and "/incident/thresholds" not in page


def test_acknowledge_needs_operator_csrf_and_a_reason_and_is_audited(web):
    fire_dlq_alert(web)
    ident = {"id": "dlq_growth|payments-eu"}
    viewer = web.client("viewer")
    assert post(viewer, "/incident/ack", {**ident, "reason": "mine"}).status_code == 403
    op = web.client("operator")
    assert post(op, "/incident/ack", {**ident, "reason": "mine"},
                csrf=False).status_code == 400
    post(op, "/incident/ack", ident)  # no reason: refused
    assert 'data-count="1"' in op.get("/incident/").get_data(as_text=True)
    resp = post(op, "/incident/ack", {**ident, "reason": "on it, psp ticket 42"},
                follow_redirects=True)
    body = resp.get_data(as_text=True)
    assert "acknowledged until it resolves" in body
    assert 'data-count="0"' in body and "Acknowledged by <strong>operator</strong>" in body
    assert "on it, psp ticket 42" in body
    entries = [(e.user, e.action, e.outcome, e.reason) for e in web.audit()
               if e.action == "incident.ack"]
    assert ("operator", "incident.ack", "ok", "on it, psp ticket 42") in entries
    assert ("viewer", "incident.ack", "refused", "mine") in entries
    assert ("operator", "incident.ack", "refused", "mine") in entries  # the CSRF refusal
    assert ("operator", "incident.ack", "refused", None) in entries  # no reason


def test_an_acknowledgement_ends_with_its_episode(web):
    engine = fire_dlq_alert(web)
    op = web.client("operator")
    post(op, "/incident/ack", {"id": "dlq_growth|payments-eu", "reason": "seen"})
    web.clock.advance(301_000)
    engine.check()  # resolved: the window passed
    web.clock.advance(1000)
    fire_dlq_alert(web)  # a new episode
    assert 'data-count="1"' in op.get("/incident/").get_data(as_text=True)


def test_silence_lasts_its_duration_and_holds_back_the_webhook(web):
    from antre.observe.alerts import dlq_growth
    sent = []
    engine = fire_dlq_alert(web)
    op = web.client("operator")
    resp = post(op, "/incident/silence", {"id": "dlq_growth|payments-eu", "for": "1 hour",
                                          "reason": "known, fix deploying"})
    assert resp.status_code == 303
    web.producer.redis.hdel(keys.alerts(), "dlq_growth|payments-eu")  # a fresh episode
    hooked = AlertEngine(web.producer.redis, web.clock, rules=[dlq_growth(1, 300)],
                         webhook_url="http://hooks.invalid/x", post=lambda u, b: sent.append(b))
    hooked.check()
    assert sent == []  # silenced: the firing waits
    assert 'data-count="0"' in op.get("/incident/").get_data(as_text=True)
    web.clock.advance(3_600_001)
    assert 'data-count="1"' in op.get("/incident/").get_data(as_text=True)
    assert engine is not None
    entry = web.audit("incident.silence")[0]
    assert (entry.user, entry.outcome, entry.reason) == ("operator", "ok", "known, fix deploying")
    post(op, "/incident/silence", {"id": "dlq_growth|payments-eu", "for": "forever",
                                   "reason": "x"})
    assert web.audit("incident.silence")[0].outcome == "refused"


def test_an_admin_overrides_a_threshold_for_one_queue(web):
    from antre.observe.alerts import AlertThresholds, dlq_growth
    engine = fire_dlq_alert(web, "payments-eu")
    form = {"queue": "payments-eu", "field": "dlq_growth_max", "value": "100",
            "reason": "this queue is noisy"}
    assert post(web.client("operator"), "/incident/thresholds", form).status_code == 403
    admin = web.client("admin")
    assert post(admin, "/incident/thresholds", {**form, "value": "lots"}).status_code == 303
    assert AlertThresholds(web.producer.redis).all() == {}
    assert post(admin, "/incident/thresholds", form).status_code == 303
    assert AlertThresholds(web.producer.redis).all() == {("payments-eu", "dlq_growth_max"): 100}
    events = engine.check()
    assert [(e.rule, e.status) for e in events] == [("dlq_growth", "resolved")]
    page = admin.get("/incident/").get_data(as_text=True)
    assert 'data-threshold="payments-eu|dlq_growth_max"' in page and 'value="100"' in page
    actions = [(e.user, e.outcome, e.target) for e in web.audit("alerts.threshold")]
    assert ("admin", "ok", "payments-eu/dlq_growth_max") in actions
    assert ("admin", "refused", "payments-eu/dlq_growth_max") in actions
    assert ("operator", "refused", "/incident/thresholds") in actions or any(
        u == "operator" and o == "refused" for u, o, _ in actions)
    # another queue keeps the default
    other = AlertEngine(web.producer.redis, web.clock, rules=[dlq_growth(1, 300)])
    assert AlertThresholds(web.producer.redis).rules_for(other.rules, "orders") == {}


def test_acknowledge_through_the_api_and_the_cli_names(web):
    from webtools import basic
    fire_dlq_alert(web)
    c = web.app.test_client()
    resp = c.post("/api/incidents/ack", json={"id": "dlq_growth|payments-eu",
                                              "reason": "api on it"}, headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["ok"]
    assert c.get("/api/incidents", headers=basic("viewer")).get_json()["count"] == 0
    resp = c.post("/api/alerts/thresholds", json={"queue": "payments-eu",
                                                  "field": "dlq_growth_max", "value": "5"},
                  headers=basic("operator"))
    assert resp.status_code == 403


def test_a_lease_stuck_past_its_deadline_is_a_critical_incident(web):
    web.q.enqueue("email", {}, idempotency_key="stuck:1")
    (job,) = web.q.reserve("w-dead")
    op = web.client("operator")
    assert 'data-incident="stuck_leases|default"' not in op.get("/incident/").get_data(
        as_text=True)  # a running lease is no problem
    web.clock.advance(job.deadline - web.clock() + 31_000)  # nobody swept it
    page = op.get("/incident/").get_data(as_text=True)
    assert 'data-incident="stuck_leases|default"' in page
    assert "1 in-flight jobs of queue default are past their lease deadline" in page
    assert "/inflight/?queue=default&amp;sort=deadline" in page


def test_worker_restarts_after_a_hard_timeout_name_the_handler_and_what_to_change(web):
    from antre.observe.registry import WorkerRegistry
    reg = WorkerRegistry(web.producer.redis, web.clock)
    for n in range(2):
        reg.record_restart(f"h:{n}", "h", "hard_timeout", job_type="nightly_report", timeout_s=90)
    page = web.client("viewer").get("/incident/").get_data(as_text=True)
    assert 'data-incident="worker_restarts|hard_timeout|nightly_report"' in page
    assert "Worker processes restarting" in page
    assert "handler nightly_report exceeds its timeout of 90 s" in page
    assert "Raise timeout_s of nightly_report or fix the handler" in page
    data = web.client("viewer").get("/api/incidents").get_json()
    assert any(i["kind"] == "worker_restarts" for i in data["open"])
