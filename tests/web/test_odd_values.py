"""Odd values get a 400 with a message, never a 500: a CSRF token that is not ASCII, a JSON
integer too big for a float parameter, a rate of thousands of digits, a lone surrogate in an
edited payload or a current password."""

from __future__ import annotations

from webtools import PASSWORD, basic, csrf_of


def test_a_csrf_token_that_is_not_ascii_is_refused_not_a_500(web):
    c = web.app.test_client()
    c.get("/login")
    resp = c.post("/login", data={"username": "admin", "password": PASSWORD,
                                  "csrf_token": "jeton-été"})
    assert resp.status_code == 400
    op = web.client("operator")
    assert csrf_of(op)
    resp = op.post("/queues/default/pause", data={"csrf_token": "ünïcode"})
    assert resp.status_code == 400
    assert web.svc.pauses.get("default", None) is None


def test_a_huge_json_integer_in_a_float_parameter_is_a_400(web):
    c = web.app.test_client()
    resp = c.post("/api/queues/default/groups/tenant:7/slots",
                  data='{"slots": 2, "revert_after_s": 1' + "0" * 400 + "}",
                  content_type="application/json", headers=basic("operator"))
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "revert_after_s" in resp.get_json()["error"]


def test_a_rate_of_thousands_of_digits_is_a_400(web):
    c = web.app.test_client()
    resp = c.post("/api/queues/default/groups/tenant:7/limit",
                  json={"rate": "9" * 5000 + "/s", "reason": "load"}, headers=basic("operator"))
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "bad rate" in resp.get_json()["message"]
    resp = c.post("/api/queues/default/groups/tenant:7/limit",
                  json={"rate": "5/" + "9" * 5000 + "s", "reason": "load"},
                  headers=basic("operator"))
    assert resp.status_code == 400 and "bad rate" in resp.get_json()["message"]


def test_a_lone_surrogate_in_an_edited_payload_is_a_400(web):
    job_id = web.dead_job()
    c = web.app.test_client()
    resp = c.post(f"/api/queues/default/jobs/{job_id}/replay-edited",
                  data='{"payload": "{\\"to\\": \\"\\ud800\\"}", "reason": "r"}',
                  content_type="application/json", headers=basic("operator"))
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "surrogate" in resp.get_json()["error"]
    assert web.q.where(job_id) == ["dead"]


def test_a_lone_surrogate_in_the_current_password_is_a_refusal(web):
    c = web.app.test_client()
    resp = c.post("/api/account/password",
                  data='{"current_password": "\\ud800", "new_password": "another long one 9"}',
                  content_type="application/json", headers=basic("viewer"))
    assert resp.status_code in (400, 403), resp.get_data(as_text=True)
    assert web.svc.users.verify("viewer", PASSWORD) is not None


def test_an_escaped_lone_surrogate_inside_an_edited_payload_is_a_refusal(web):
    job_id = web.dead_job()
    resp = web.app.test_client().post(
        f"/api/queues/default/jobs/{job_id}/replay-edited",
        json={"payload": '{"to": "\\ud800"}', "reason": "r"}, headers=basic("operator"))
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "surrogate" in resp.get_json()["message"]
    assert web.q.where(job_id) == ["dead"]
