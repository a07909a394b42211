"""Incident controls in the dashboard and the API: pause / resume with the banner, delete one
job, purge a filtered set; bad input is a clear 4xx, changes nothing and is audited."""

from __future__ import annotations

from webtools import basic, htmx, post


from antre.control.purge import PurgeFilter


def fill(web, n=5, job_type="email"):
    return [web.q.enqueue(job_type, {"i": i, "tenant": f"t{i % 2}"},
                          idempotency_key=f"{job_type}:{i}:{web.clock()}") for i in range(n)]


def test_pause_from_the_queue_page_shows_who_and_why_and_holds(web):
    """The pause form sits in the queue's own box (not in every overview row, not
    in a banner on every page)."""
    fill(web, 3)
    c = web.client("operator")
    assert "pause-form" not in c.get("/", headers=htmx()).get_data(as_text=True)
    assert "pause-form" in c.get("/inflight/?queue=default").get_data(as_text=True)
    resp = post(c, "/queues/default/pause", {"reason": "bad deploy <b>",
                                             "next": "/inflight/?queue=default"},
                follow_redirects=True)
    body = resp.get_data(as_text=True)
    assert 'data-paused="default"' in body and "bad deploy &lt;b&gt;" in body
    assert "by operator" in body
    assert web.q.reserve("w1", 10) == []
    overview = c.get("/", headers=htmx()).get_data(as_text=True)
    assert ">paused<" in overview.replace("</span>", "<")  # the row's tag
    assert 'data-paused="default"' not in overview  # no banner elsewhere
    assert 'data-incident="paused|default"' in c.get("/incident/").get_data(as_text=True)
    for page in ("/inflight/?queue=default", "/scheduled/?queue=default", "/dlq/?queue=default"):
        assert "paused-note" in c.get(page).get_data(as_text=True), page
    metrics = c.get("/metrics").get_data(as_text=True)
    assert 'antre_paused{job_type="*",queue="default"} 1.0' in metrics
    post(c, "/queues/default/resume", {"reason": "fixed"})
    assert len(web.q.reserve("w1", 10)) == 3
    entries = [(e.action, e.outcome, e.reason) for e in web.audit()
               if e.action.startswith("queue.")]
    assert ("queue.pause", "ok", "bad deploy <b>") in entries
    assert ("queue.resume", "ok", "fixed") in entries


def test_pause_one_type_through_the_api(web):
    fill(web, 2, "email")
    fill(web, 2, "sms")
    c = web.app.test_client()
    op = basic("operator")
    resp = c.post("/api/queues/default/pause", json={"type": "email", "reason": "smtp down"},
                  headers=op)
    assert resp.status_code == 200 and resp.get_json()["paused"]["job_type"] == "email"
    assert [j.type for j in web.q.reserve("w1", 10)] == ["sms", "sms"]
    listed = c.get("/api/pauses", headers=basic("viewer")).get_json()["paused"]
    assert [(p["queue"], p["job_type"], p["by"]) for p in listed] == [
        ("default", "email", "operator")]
    resp = c.post("/api/queues/default/resume", json={"type": "email", "reason": "ok"},
                  headers=op)
    assert resp.get_json()["unparked"] == 2
    assert [j.type for j in web.q.reserve("w1", 10)] == ["email", "email"]


def test_bad_pause_input_is_refused_audited_and_changes_nothing(web):
    fill(web, 1)
    c = web.app.test_client()
    op = basic("operator")
    cases = [("/api/queues/default/pause", {"reason": ""}, 400, "reason is required"),
             ("/api/queues/nosuch/pause", {"reason": "x"}, 400, "no queue 'nosuch'"),
             ("/api/queues/default/pause", {"type": "nosuch", "reason": "x"}, 400,
              "no job type 'nosuch'"),
             ("/api/queues/default/resume", {"reason": "x"}, 409, "is not paused")]
    for url, body, status, message in cases:
        resp = c.post(url, json=body, headers=op)
        assert resp.status_code == status, (url, body)
        assert message in resp.get_json()["message"]
    assert web.svc.pauses.all() == []
    outcomes = [e.outcome for e in web.audit() if e.action in ("queue.pause", "queue.resume")]
    assert len(outcomes) == 4 and "ok" not in outcomes
    c.post("/api/queues/default/pause", json={"reason": "x"}, headers=op)
    again = c.post("/api/queues/default/pause", json={"reason": "y"}, headers=op)
    assert again.status_code == 409 and "already paused" in again.get_json()["message"]
    assert web.svc.pauses.get("default", None).reason == "x"


def test_delete_one_scheduled_job_and_refuse_a_running_one(web):
    (sched,) = [web.q.enqueue("email", {}, idempotency_key="k1", delay_s=60)]
    web.q.enqueue("email", {}, idempotency_key="k2")
    (running,) = web.q.reserve("w1")
    c = web.client("operator")
    resp = post(c, f"/queues/default/jobs/{sched}/delete", {"reason": "bad payload"},
                follow_redirects=True)
    assert "deleted from scheduled" in resp.get_data(as_text=True)
    assert web.q.get(sched) is None
    resp = web.app.test_client().post(f"/api/queues/default/jobs/{running.id}/delete", json={},
                                      headers=basic("operator"))
    assert resp.status_code == 409 and "it is inflight" in resp.get_json()["message"]
    assert web.q.where(running.id) == ["inflight"]
    outcomes = [e.outcome for e in web.audit("job.delete")]
    assert sorted(outcomes) == ["failed", "ok"]


def test_purge_page_dry_run_confirmation_and_paced_task(web):
    fill(web, 6)
    c = web.client("operator")
    page = c.get("/purge/?queue=default&source=ready&field=tenant&value=t1")
    assert "<strong>3 jobs</strong> match" in page.get_data(as_text=True)
    form = {"source": "ready", "field": "tenant", "value": "t1", "rate": "100",
            "maximum": "10", "reason": "bad tenant"}
    resp = post(c, "/purge/default/start", {**form, "confirm": "2"}, follow_redirects=True)
    assert "not confirmed" in resp.get_data(as_text=True)
    assert web.svc.bulk.list("default", kind="purge") == []
    post(c, "/purge/default/start", {**form, "confirm": "3"})
    (task,) = web.svc.bulk.list("default", kind="purge")
    assert (task.total, task.user, task.reason) == (3, "operator", "bad tenant")
    web.clock.advance(1000)
    assert web.svc.bulk.step_all() == 3
    assert web.svc.reads.queue_info("default").ready == 3
    tasks = c.get("/purge/?queue=default", headers=htmx()).get_data(as_text=True)
    assert "3 removed / 3" in tasks
    (entry,) = [e for e in web.audit("purge.start") if e.outcome == "ok"]
    assert entry.detail["dry_run"] == 3 and "payload.tenant=t1" in entry.target


def test_purge_api_count_start_control_and_refusals(web):
    fill(web, 4)
    c = web.app.test_client()
    op, viewer = basic("operator"), basic("viewer")
    count = c.get("/api/queues/default/purge/count?source=ready&type=email", headers=viewer)
    assert count.get_json()["count"] == 4
    nothing = c.post("/api/queues/default/purges",
                     json={"source": "ready", "type": "sms", "rate": 10, "confirm": "purge"},
                     headers=op)
    assert nothing.status_code == 400 and "no job matches" in nothing.get_json()["message"]
    bad = c.post("/api/queues/default/purges",
                 json={"source": "ready", "group": "g", "rate": 10, "confirm": "purge"},
                 headers=op)
    assert bad.status_code == 400 and "error group" in bad.get_json()["message"]
    resp = c.post("/api/queues/default/purges",
                  json={"source": "ready", "rate": 1, "confirm": "purge", "reason": "flood"},
                  headers=op)
    task = resp.get_json()["task"]
    assert resp.status_code == 200 and task["total"] == 4 and task["kind"] == "purge"
    for op_name, state in (("pause", "paused"), ("resume", "running"),
                           ("cancel", "cancelled")):
        r = c.post(f"/api/queues/default/purges/{task['id']}/{op_name}", json={}, headers=op)
        assert r.get_json()["task"]["state"] == state
    listed = c.get("/api/queues/default/purges", headers=viewer).get_json()["tasks"]
    assert [t["state"] for t in listed] == ["cancelled"]
    assert web.svc.purger.count("default", PurgeFilter("ready")) == 4  # nothing was removed
    refused = [e.outcome for e in web.audit("purge.start") if e.outcome != "ok"]
    assert refused == ["refused", "refused"]


def test_breaker_reset_through_the_api(web):
    from antre.limits.admission import Limits
    breaker = Limits(web.svc.redis, web.clock).breaker("psp", failure_threshold=1)
    breaker.record_failure()
    c = web.app.test_client()
    resp = c.post("/api/flow/breakers/psp/reset", json={"reason": "psp back"},
                  headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["before"] == "open"
    assert breaker.state().state == "closed"
    assert c.post("/api/flow/breakers/nope/reset", json={},
                  headers=basic("operator")).status_code == 404
    assert [e.outcome for e in web.audit("flow.reset_breaker")] == ["failed", "ok"]


def test_cancel_a_running_job_from_the_in_flight_page_and_the_api(web):
    web.q.enqueue("email", {}, idempotency_key="k1")
    (running,) = web.q.reserve("w1")
    done = web.q.enqueue("email", {}, idempotency_key="k2")
    c = web.client("operator")
    page = c.get("/inflight/?queue=default").get_data(as_text=True)
    assert ">Cancel selected<" in page
    resp = post(c, f"/queues/default/jobs/{running.id}/cancel", {"to": "dlq", "reason": "stop"},
                follow_redirects=True)
    assert "cancel of job" in resp.get_data(as_text=True)
    assert web.svc.cancels.pending("default")[running.id].by == "operator"
    api = web.app.test_client()
    resp = api.post(f"/api/queues/default/jobs/{done}/cancel", json={"reason": "x"},
                    headers=basic("operator"))
    assert resp.status_code == 409 and "not running" in resp.get_json()["message"]
    resp = api.post(f"/api/queues/default/jobs/{running.id}/cancel", json={"to": "bin"},
                    headers=basic("operator"))
    assert resp.status_code == 400
    assert sorted(e.outcome for e in web.audit("job.cancel")) == ["failed", "ok", "refused"]


def test_the_in_flight_page_marks_a_job_cancelling_since_its_request(web):
    """A read model field (``JobRow.cancel_at`` / ``cancel_by``), shown on the row."""
    web.q.enqueue("email", {}, idempotency_key="k1")
    web.q.enqueue("email", {}, idempotency_key="k2")
    first, other = web.q.reserve("w1", 2)
    c = web.client("operator")
    assert "cancelling since" not in c.get("/inflight/?queue=default").get_data(as_text=True)
    asked_at = web.clock()
    post(c, f"/queues/default/jobs/{first.id}/cancel", {"to": "dlq", "reason": "stop"})
    rows = {row.id: row for row in web.svc.reads.inflight("default").rows}
    assert (rows[first.id].cancel_at, rows[first.id].cancel_by) == (asked_at, "operator")
    assert rows[first.id].cancelling and not rows[other.id].cancelling
    page = c.get("/inflight/?queue=default").get_data(as_text=True)
    assert page.count("cancelling since") == 1 and "(by operator)" in page
    assert f'data-ms="{asked_at}"' in page.split("cancelling since", 1)[1][:400]


def test_cancel_and_delete_from_the_action_bars(web):
    web.q.enqueue("email", {}, idempotency_key="k1")
    (running,) = web.q.reserve("w1")
    later = web.q.enqueue("email", {}, idempotency_key="k2", delay_s=60)
    c = web.client("operator")
    resp = post(c, "/inflight/default/selected",
                {"op": "cancel", "to": "discard", "reason": "runaway",
                 "ids": f"{running.epoch}:{running.id}", "seconds": "30"})
    assert resp.status_code in (200, 303)
    assert web.svc.cancels.pending("default")[running.id].to == "discard"
    resp = post(c, "/scheduled/default/selected", {"op": "delete", "reason": "bad",
                                                   "ids": later})
    assert resp.status_code in (200, 303) and web.q.get(later) is None
    assert [e.outcome for e in web.audit("job.cancel")] == ["ok"]
    assert [e.outcome for e in web.audit("job.delete")] == ["ok"]


def _abandoned(web, key):
    """A delivery began its effect, its lease ran out, then Redis lost the job (FLUSHALL)."""
    web.q.enqueue("charge", {}, idempotency_key=key)
    (job,) = web.q.reserve("w1")
    web.svc.idempotency.begin(key, "fp", "charge", job.id, job.epoch, "w1", web.clock() - 1)
    web.producer.redis.flushall()
    return job.id


def test_an_abandoned_record_is_shown_and_resolved_by_an_operator_only(web):
    job_id = _abandoned(web, "order:5")
    _abandoned(web, "order:6")
    viewer, operator = web.client("viewer"), web.client("operator")
    found = viewer.get("/find?q=order:5")  # no job left: the finder leads to its record
    assert found.status_code == 303 and found.location.endswith("/idempotency/?key=order:5")
    page = viewer.get("/idempotency/?key=order:5").get_data(as_text=True)
    assert 'id="abandoned"' in page and f"the owner lease of job {job_id} expired" in page
    assert "Mark failed" not in page  # a viewer sees it, cannot resolve it
    api = web.app.test_client().get("/api/idempotency?key=order:5",
                                    headers=basic("viewer")).get_json()
    assert api["status"] == "processing" and api["abandoned"]["since_ms"] == web.clock() - 1
    assert post(viewer, "/idempotency/resolve",
                {"key": "order:5", "to": "failed", "reason": "x"}).status_code == 403
    assert post(operator, "/idempotency/resolve", {"key": "order:5", "to": "failed",
                                                   "reason": "x"}, csrf=False).status_code in (
        400, 403)
    assert "Mark failed" in operator.get("/idempotency/?key=order:5").get_data(as_text=True)
    resp = post(operator, "/idempotency/resolve",
                {"key": "order:5", "to": "failed", "reason": "never charged"})
    assert resp.status_code == 303
    assert web.svc.idempotency.lookup("order:5").status == "failed"
    page = operator.get("/idempotency/?key=order:5").get_data(as_text=True)
    assert "marked failed" in page and 'id="abandoned"' not in page
    c = web.app.test_client()
    ok = c.post("/api/idempotency/resolve", json={"key": "order:6", "to": "reset",
                                                  "reason": "resend"}, headers=basic("operator"))
    assert ok.status_code == 200 and ok.get_json()["to"] == "reset"
    assert web.svc.idempotency.lookup("order:6") is None
    again = c.post("/api/idempotency/resolve", json={"key": "order:6", "to": "reset"},
                   headers=basic("operator"))
    assert again.status_code == 409 and "not abandoned" in again.get_json()["message"]
    assert c.post("/api/idempotency/resolve", json={"key": "order:6", "to": "gone"},
                  headers=basic("operator")).status_code == 400
    entries = [(e.user, e.action, e.target, e.outcome)
               for e in web.svc.audit.list(action="idempotency.resolve")]
    assert ("operator", "idempotency.resolve", "order:5", "ok") in entries
    assert ("operator", "idempotency.resolve", "order:6", "ok") in entries
    assert ("operator", "idempotency.resolve", "order:6", "failed") in entries  # 409
    assert ("operator", "idempotency.resolve", "order:6", "refused") in entries  # bad 'to'
    assert ("viewer", "idempotency.resolve", "/idempotency/resolve", "refused") in entries
