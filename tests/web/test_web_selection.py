"""Acting on selected rows: one POST for the ticked jobs, one audit entry per job, the refreshed
partial with the result in place for htmx, a flash and a redirect without scripts."""

from __future__ import annotations

from webtools import basic, htmx, post



def test_replay_three_selected_dead_jobs_in_one_htmx_post(web):
    ids = [web.dead_job(key=f"sel-{i}") for i in range(4)]
    c = web.client("operator")
    resp = post(c, "/dlq/default/selected", {"op": "replay", "ids": ids[:3],
                                             "reason": "smtp back"}, headers=htmx())
    assert resp.status_code == 200
    body = resp.get_data(as_text=True)
    assert "<html" not in body  # the partial only: htmx swaps it into the live region
    assert 'role="status" tabindex="-1">3 jobs replayed' in body
    for job_id in ids[:3]:
        assert f'data-row="{job_id}"' not in body
        assert web.q.where(job_id) == ["ready"]
    assert f'data-row="{ids[3]}"' in body and "1 dead job" in body
    entries = web.audit("dlq.replay")
    assert sorted(e.target for e in entries) == sorted(f"default/{i}" for i in ids[:3])
    assert {(e.user, e.reason, e.outcome) for e in entries} == {("operator", "smtp back", "ok")}


def test_selection_without_scripts_redirects_with_a_message(web):
    ids = [web.dead_job(key=f"nojs-{i}") for i in range(2)]
    c = web.client("operator")
    resp = post(c, "/dlq/default/selected", {"op": "discard", "ids": ids, "reason": "junk"})
    assert resp.status_code == 303 and resp.headers["Location"].endswith("/dlq/?queue=default")
    page = c.get(resp.headers["Location"]).get_data(as_text=True)
    assert "2 jobs discarded" in page
    assert [web.q.where(i) for i in ids] == [[], []]
    assert len(web.audit("dlq.discard")) == 2


def test_a_row_that_moved_meanwhile_is_reported_not_hidden(web):
    ids = [web.dead_job(key=f"moved-{i}") for i in range(2)]
    web.q.replay(ids[0])  # someone else was quicker
    c = web.client("operator")
    resp = post(c, "/dlq/default/selected", {"op": "replay", "ids": ids}, headers=htmx())
    body = resp.get_data(as_text=True)
    assert resp.status_code == 200
    assert "1 job replayed; 1 job not" in body
    assert f"job {ids[0]} is not in the dead-letter queue" in body
    assert [e.outcome for e in web.audit("dlq.replay")].count("failed") == 1


def test_bad_selections_are_4xx_with_what_to_do(web):
    web.dead_job(key="bad-1")
    c = web.client("operator")
    resp = post(c, "/dlq/default/selected", {"op": "replay"})
    assert resp.status_code == 400 and "tick the jobs" in resp.get_data(as_text=True)
    resp = post(c, "/dlq/default/selected", {"op": "explode", "ids": ["x"]})
    assert resp.status_code == 400 and "replay" in resp.get_data(as_text=True)
    resp = post(c, "/dlq/default/selected", {"op": "replay", "ids": [str(i) for i in range(501)]})
    assert resp.status_code == 400 and "at most 500" in resp.get_data(as_text=True)
    resp = post(c, "/inflight/default/selected", {"ids": ["nope"], "seconds": "30"})
    assert resp.status_code == 400 and "&lt;epoch&gt;:&lt;job id&gt;" in resp.get_data(as_text=True)


def test_viewer_selection_is_refused_and_audited(web):
    job_id = web.dead_job(key="viewer-1")
    c = web.client("viewer")
    resp = post(c, "/dlq/default/selected", {"op": "replay", "ids": [job_id]}, headers=htmx())
    assert resp.status_code == 403
    assert web.q.where(job_id) == ["dead"]
    assert [e.outcome for e in web.audit("dlq.selected")] == ["refused"]


def test_extend_selected_leases_checks_each_epoch(web):
    for i in range(2):
        web.q.enqueue("email", {"n": i}, idempotency_key=f"lease-{i}")
    jobs = [web.q.reserve("w1")[0] for _ in range(2)]
    rows = [f"{jobs[0].epoch}:{jobs[0].id}", f"{jobs[1].epoch + 7}:{jobs[1].id}"]  # 2nd is stale
    c = web.client("operator")
    resp = post(c, "/inflight/default/selected", {"ids": rows, "seconds": "600",
                                                  "reason": "slow smtp"}, headers=htmx())
    body = resp.get_data(as_text=True)
    assert "1 job extended; 1 job not" in body and "lease changed under you" in body
    assert web.q.get(jobs[0].id).deadline >= web.clock() + 600_000
    assert [e.outcome for e in web.audit("inflight.extend")].count("ok") == 1


def test_run_selected_scheduled_retries_now(web):
    ids = []
    for i in range(2):
        web.q.enqueue("email", {"n": i}, idempotency_key=f"sched-{i}")
        (job,) = web.q.reserve("w1")
        web.q.retry(job, delay_ms=600_000, error="smtp timeout")
        ids.append(job.id)
    c = web.client("operator")
    resp = post(c, "/scheduled/default/selected", {"op": "run_now", "ids": ids},
                headers=htmx())
    assert "2 jobs moved to the ready list" in resp.get_data(as_text=True)
    assert [web.q.where(i) for i in ids] == [["ready"], ["ready"]]
    assert len(web.audit("scheduled.run_now")) == 2


def test_the_api_mirrors_the_selection(web):
    ids = [web.dead_job(key=f"api-{i}") for i in range(3)]
    c = web.app.test_client()
    op = basic("operator")
    resp = c.post("/api/queues/default/selection/replay",
                  json={"ids": ids[:2] + ["gone"], "reason": "api batch"}, headers=op)
    assert resp.status_code == 409  # one of them was not dead: nothing hidden
    body = resp.get_json()
    assert body["done"] == ids[:2] and len(body["problems"]) == 1
    assert body["message"] == "2 jobs replayed; 1 job not"
    assert len([e for e in web.audit("dlq.replay") if e.reason == "api batch"]) == 3
    resp = c.post("/api/queues/default/selection/discard", json={"ids": [ids[2]]}, headers=op)
    assert resp.status_code == 200 and web.q.where(ids[2]) == []
    resp = c.post("/api/queues/default/selection/replay", json={"ids": "x"}, headers=op)
    assert resp.status_code == 400 and "ids" in resp.get_json()["error"]
    resp = c.post("/api/queues/default/selection/replay", json={"ids": [ids[0]]},
                  headers=basic("viewer"))
    assert resp.status_code == 403
    spec = c.get("/api/openapi.json", headers=op).get_json()
    ids_schema = (spec["paths"]["/api/queues/{queue}/selection/replay"]["post"]["requestBody"]
                  ["content"]["application/json"]["schema"]["properties"]["ids"])
    assert ids_schema == {"type": "array", "items": {"type": "string"}}


def test_the_api_extends_selected_leases(web):
    web.q.enqueue("email", {}, idempotency_key="api-lease")
    (job,) = web.q.reserve("w1")
    c = web.app.test_client()
    resp = c.post("/api/queues/default/selection/extend",
                  json={"ids": [f"{job.epoch}:{job.id}"], "seconds": 120},
                  headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["done"] == [job.id]
    assert web.q.get(job.id).deadline >= web.clock() + 120_000
