"""Replay with an edited payload: the dry run shows the diff, the handler and
the idempotency record; the replay needs the operator role, CSRF and a reason, is audited with
the diff, keeps the original on the timeline, and is refused for a key that already completed
unless a new key is given."""

from __future__ import annotations

import json

from webtools import post


def _dead(web, key="edit:1"):
    return web.dead_job("email", payload={"to": "a@x", "n": 1}, error="bad address", key=key)


def _edit(c, job_id, payload, follow_redirects=False, **extra):
    data = {"payload": json.dumps(payload), **extra}
    return post(c, f"/jobs/default/{job_id}/edit/replay", data,
                follow_redirects=follow_redirects)


def test_dry_run_shows_the_diff_and_the_record_and_changes_nothing(web):
    job_id = _dead(web)
    op = web.client("operator")
    form = op.get(f"/jobs/default/{job_id}/edit").get_data(as_text=True)
    assert "&#34;to&#34;: &#34;a@x&#34;" in form  # the payload, pretty, escaped
    page = post(op, f"/jobs/default/{job_id}/edit", {
        "payload": json.dumps({"to": "b@x", "n": 1})}).get_data(as_text=True)
    assert '<span class="del">-  &#34;to&#34;: &#34;a@x&#34;</span>' in page
    assert '<span class="add">+  &#34;to&#34;: &#34;b@x&#34;</span>' in page
    assert "Idempotency record of edit:1" in page
    assert web.q.get(job_id).state == "dead" and web.q.get(job_id).payload["to"] == "a@x"
    bad = post(op, f"/jobs/default/{job_id}/edit", {"payload": "{nope"})
    assert "the payload is not JSON" in bad.get_data(as_text=True)
    assert "Replay with this payload</button>" not in bad.get_data(as_text=True)
    assert "Replay with this payload</button>" in page  # offered for what was dry-run


def test_replay_edited_runs_the_new_payload_keeps_the_original_and_is_audited(web):
    job_id = _dead(web)
    op = web.client("operator")
    resp = _edit(op, job_id, {"to": "b@x", "n": 1}, reason="typo in the address")
    assert resp.status_code == 303
    job = web.q.get(job_id)
    assert (job.state, job.payload, job.attempt) == ("ready", {"to": "b@x", "n": 1}, 0)
    page = op.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert "original payload" in page and "a@x" in page  # on the timeline
    entry = web.audit("dlq.replay_edited")[0]
    assert (entry.user, entry.outcome, entry.reason) == ("operator", "ok",
                                                         "typo in the address")
    assert '-  "to": "a@x"' in entry.detail["diff"] and '+  "to": "b@x"' in entry.detail["diff"]
    (reserved,) = web.q.reserve("w1")
    assert reserved.payload == {"to": "b@x", "n": 1}


def test_roles_csrf_and_reason(web):
    job_id = _dead(web)
    assert _edit(web.client("viewer"), job_id, {"to": "b@x"}, reason="x").status_code == 403
    op = web.client("operator")
    assert post(op, f"/jobs/default/{job_id}/edit/replay",
                {"payload": "{}", "reason": "x"}, csrf=False).status_code == 400
    resp = _edit(op, job_id, {"to": "b@x"}, follow_redirects=True)  # no reason
    assert "the reason is required" in resp.get_data(as_text=True)
    assert web.q.get(job_id).state == "dead"
    outcomes = [(e.user, e.outcome) for e in web.audit("dlq.replay_edited")]
    assert ("viewer", "refused") in outcomes and ("operator", "refused") in outcomes


def test_the_api_and_its_dry_run(web):
    from webtools import basic
    job_id = _dead(web, key="edit:api")
    c = web.app.test_client()
    url = f"/api/queues/default/jobs/{job_id}/replay-edited"
    resp = c.post(url, json={"payload": '{"to": "c@x", "n": 1}', "reason": "api fix"},
                  headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["key"] == "edit:api"
    assert web.q.get(job_id).payload == {"to": "c@x", "n": 1}
    assert c.post(url, json={"payload": "{}", "reason": "x"},
                  headers=basic("viewer")).status_code == 403


def test_a_completed_key_is_refused_unless_a_new_key_is_given(web):
    job_id = _dead(web, key="edit:done")
    from antre.stores.idempotency import fingerprint
    svc = web.svc.idempotency
    svc.begin("edit:done", fingerprint("email", {}), "email", job_id, 1, "w1",
              web.clock() + 30_000)
    svc.complete(None, "edit:done", 1, {"sent": True}, job_id=job_id)
    op = web.client("operator")
    resp = _edit(op, job_id, {"to": "b@x", "n": 1}, reason="resend", follow_redirects=True)
    assert "already completed" in resp.get_data(as_text=True)
    assert web.q.get(job_id).state == "dead"
    assert web.audit("dlq.replay_edited")[0].outcome == "refused"
    resp = _edit(op, job_id, {"to": "b@x", "n": 1}, reason="resend", new_key="edit:done:2")
    assert resp.status_code == 303
    job = web.q.get(job_id)
    assert (job.state, job.idempotency_key) == ("ready", "edit:done:2")
    assert web.client("viewer").get("/find?q=edit:done:2").headers["Location"].endswith(
        f"/jobs/default/{job_id}")  # the finder knows the new key


def test_a_failed_key_is_reset_so_the_edited_payload_is_not_a_mismatch(web):
    from antre.stores.idempotency import fingerprint
    job_id = _dead(web, key="edit:failed")
    svc = web.svc.idempotency
    svc.begin("edit:failed", fingerprint("email", {"to": "a@x", "n": 1}), "email", job_id, 1,
              "w1", web.clock() + 30_000)
    assert svc.fail("edit:failed", 1, "bad address", True, job_id=job_id)
    assert svc.lookup("edit:failed").status == "failed"
    op = web.client("operator")
    dry = post(op, f"/jobs/default/{job_id}/edit", {
        "payload": json.dumps({"to": "b@x", "n": 1})}).get_data(as_text=True)
    assert "the failed record is reset first" in dry
    assert _edit(op, job_id, {"to": "b@x", "n": 1}, reason="fixed").status_code == 303
    assert svc.lookup("edit:failed") is None  # the next delivery claims it afresh
    assert web.audit("dlq.replay_edited")[0].detail["reset_failed_key"] is True


def test_the_dry_run_is_a_post_and_the_payload_is_in_no_url(web):
    job_id = _dead(web, key="edit:post")
    op = web.client("operator")
    form = op.get(f"/jobs/default/{job_id}/edit").get_data(as_text=True)
    assert 'form method="post" action="/jobs/default/' + job_id + '/edit"' in form
    ignored = op.get(f"/jobs/default/{job_id}/edit", query_string={"payload": '{"to": "z"}'})
    assert "section class=\"dry-run-result\"" not in ignored.get_data(as_text=True)
    assert post(op, f"/jobs/default/{job_id}/edit", {"payload": "{}"},
                csrf=False).status_code == 400  # a POST: the CSRF token is asked for


def test_every_character_of_a_new_key_is_checked(web):
    job_id = _dead(web, key="edit:chars")
    op = web.client("operator")
    for bad in ("k" * 150 + "{x}", "k" * 120 + "é", "a{b}", "k" * 201):
        resp = _edit(op, job_id, {"to": "b@x", "n": 1}, reason="r", new_key=bad)
        assert resp.status_code == 303
        assert web.q.get(job_id).state == "dead", bad
        assert "the new idempotency key must be" in web.audit("dlq.replay_edited")[0].detail[
            "message"]


def test_a_new_key_another_job_completed_is_refused(web):
    from antre.stores.idempotency import fingerprint
    svc = web.svc.idempotency
    done = _dead(web, key="edit:other")
    svc.begin("edit:other", fingerprint("email", {}), "email", done, 1, "w1",
              web.clock() + 30_000)
    svc.complete(None, "edit:other", 1, {"sent": True}, job_id=done)
    job_id = _dead(web, key="edit:mine")
    op = web.client("operator")
    dry = post(op, f"/jobs/default/{job_id}/edit", {"payload": json.dumps({"to": "b@x"}),
                                                    "new_key": "edit:other"})
    assert f"key edit:other already completed the effect of job {done}" in dry.get_data(
        as_text=True)
    resp = _edit(op, job_id, {"to": "b@x", "n": 1}, reason="resend", new_key="edit:other")
    assert resp.status_code == 303 and web.q.get(job_id).state == "dead"
    assert web.audit("dlq.replay_edited")[0].outcome == "refused"
