"""``flow.cancel`` through the JSON API: an operator cancels a flow, a viewer is
refused, a finished flow is a 409; each is audited."""

from __future__ import annotations

from webtools import basic

from antre.flows import FlowReader


def test_an_operator_cancels_a_flow_through_the_api(web):
    p = web.producer
    flow = p.chord([p.spec("t", {"i": i}, idempotency_key=f"k{i}") for i in range(3)],
                   p.spec("cb", {}, idempotency_key="cb")).enqueue()
    api = web.app.test_client()
    url = f"/api/queues/default/flows/{flow.id}/cancel"
    assert api.post(url, json={"reason": "x"}, headers=basic("viewer")).status_code == 403
    resp = api.post(url, json={"reason": "wrong batch", "to": "discard"},
                    headers=basic("operator"))
    assert resp.status_code == 200, resp.get_json()
    assert flow.status().state == "cancelled" and flow.status().cancelled_by == "operator"
    states = [j.state for j in FlowReader(p.redis).tree("default", flow.id).jobs]
    assert states == ["ready", "ready", "ready", "gone"]  # the held callback: discarded
    again = api.post(url, json={"reason": "again"}, headers=basic("operator"))
    assert again.status_code == 409
    assert api.post("/api/queues/default/flows/nope/cancel", json={},
                    headers=basic("operator")).status_code == 404
    assert sorted(e.outcome for e in web.audit("flow.cancel")) == [
        "failed", "failed", "ok", "refused"]


def test_a_cancel_to_nowhere_is_a_400_naming_the_choices_for_a_job_and_a_flow(web):
    p = web.producer
    flow = p.chord([p.spec("t", {}, idempotency_key="k")], p.spec("cb", {},
                                                                  idempotency_key="cb")).enqueue()
    job_id = p.queue("default").enqueue("t", {}, idempotency_key="j")
    p.queue("default").reserve("w")
    api = web.app.test_client()
    for url in (f"/api/queues/default/flows/{flow.id}/cancel",
                f"/api/queues/default/jobs/{job_id}/cancel"):
        resp = api.post(url, json={"reason": "x", "to": "nowhere"}, headers=basic("operator"))
        assert resp.status_code == 400, (url, resp.get_json())
        assert "to must be one of dlq, discard" in str(resp.get_json()), resp.get_json()
    assert flow.status().state == "running" and not p.queue("default").get(job_id).cancel
    assert [e.outcome for e in web.audit("flow.cancel")] == ["refused"]
    assert [e.outcome for e in web.audit("job.cancel")] == ["refused"]
