"""The page of a running job offers Cancel to a role the action table allows (the action
``job.cancel``): a CSRF-protected POST through the action's route, audited, back to the page."""

from __future__ import annotations

from webtools import post


def test_a_running_jobs_page_offers_cancel_to_an_operator(web):
    web.q.enqueue("email", {}, idempotency_key="k1")
    (running,) = web.q.reserve("w1")
    url = f"/jobs/default/{running.id}"
    page = web.client("operator").get(url).get_data(as_text=True)
    assert "data-cancel-job" in page and ">Cancel this running job<" in page
    assert f'action="/queues/default/jobs/{running.id}/cancel"' in page
    assert 'name="csrf_token"' in page.split("data-cancel-job")[1].split("</form>")[0]
    assert "data-cancel-job" not in web.client("viewer").get(url).get_data(as_text=True)


def test_a_job_not_running_has_no_cancel_button(web):
    ready = web.q.enqueue("email", {}, idempotency_key="k1")
    page = web.client("operator").get(f"/jobs/default/{ready}").get_data(as_text=True)
    assert "data-cancel-job" not in page


def test_cancel_from_the_job_page_needs_csrf_is_audited_and_returns_to_the_page(web):
    web.q.enqueue("email", {}, idempotency_key="k1")
    (running,) = web.q.reserve("w1")
    c = web.client("operator")
    url = f"/jobs/default/{running.id}"
    action = f"/queues/default/jobs/{running.id}/cancel"
    refused = post(c, action, {"to": "dlq", "reason": "stuck", "next": url}, csrf=False)
    assert refused.status_code in (400, 403)
    assert running.id not in web.svc.cancels.pending("default")
    resp = post(c, action, {"to": "dlq", "reason": "stuck", "next": url})
    assert resp.status_code in (302, 303) and resp.headers["Location"] == url
    assert web.svc.cancels.pending("default")[running.id].by == "operator"
    assert [e.outcome for e in web.audit("job.cancel")] == ["ok"]


def test_a_job_being_cancelled_says_so_instead_of_offering_cancel_again(web):
    web.q.enqueue("email", {}, idempotency_key="k1")
    (running,) = web.q.reserve("w1")
    c = web.client("operator")
    url = f"/jobs/default/{running.id}"
    post(c, f"/queues/default/jobs/{running.id}/cancel", {"to": "discard", "reason": "stuck"})
    page = c.get(url).get_data(as_text=True)
    assert "data-cancelling" in page and "(by operator)" in page and "discarded" in page
    assert "data-cancel-job" not in page
    assert web.svc.cancels.of("default", running.id).to == "discard"
    assert web.svc.cancels.of("default", "no-such-job") is None
