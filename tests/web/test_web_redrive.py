"""The redrive guard and replay to another queue on the dashboard and the API: the
start form's threshold and target, the progress row saying why it paused, resume and
cancel through the table's entries, audited."""

from __future__ import annotations

from webtools import basic, htmx, post


def fail_again(web, n: int) -> None:
    """The next ``n`` ready jobs fail again (reserved and buried with the same error)."""
    for job in web.q.reserve("w1", n):
        web.q.bury(job, reason="permanent failure", error="smtp down")


def test_guard_pauses_and_the_row_says_why_then_resume_and_cancel(web):
    for _ in range(30):
        web.dead_job()
    c = web.client("operator")
    resp = post(c, "/dlq/default/bulk", {"rate": 5, "maximum": 30, "stop_pct": 25,
                                         "min_sample": 10, "reason": "relay back?"},
                follow_redirects=True)
    assert "pauses itself if more than 25% of the replayed jobs fail again" in (
        resp.get_data(as_text=True))
    (task,) = web.svc.bulk.list("default")
    assert (task.stop_pct, task.min_sample, task.target) == (25.0, 10, "")
    for _ in range(2):
        web.clock.advance(1000)
        web.svc.bulk.step_all()
    fail_again(web, 10)
    web.clock.advance(1000)
    assert web.svc.bulk.step_all() == 0
    row = c.get("/dlq/tasks?queue=default", headers=htmx()).get_data(as_text=True)
    assert "paused: 10 of 10 replayed jobs failed again (more than 25%), 10 died again " \
           "in group permanent: smtp down; resume or cancel" in row
    assert ">Resume<" in row and ">Cancel<" in row and "10 failed again" in row
    post(c, f"/dlq/default/bulk/{task.id}/resume", {"reason": "fixed the relay"})
    resumed = web.svc.bulk.get("default", task.id)
    assert resumed.state == "running" and not resumed.paused_reason
    post(c, f"/dlq/default/bulk/{task.id}/cancel")
    assert web.svc.bulk.get("default", task.id).state == "cancelled"
    assert [e.action for e in web.audit() if e.action.startswith("dlq.bulk_replay")] == [
        "dlq.bulk_replay.cancel", "dlq.bulk_replay.resume", "dlq.bulk_replay.start"]


def test_replay_to_an_unknown_queue_is_refused_naming_those_that_exist(web):
    web.dead_job()
    web.producer.queue("slow").enqueue("t", {}, idempotency_key="slow-known")
    c = web.client("operator")
    resp = post(c, "/dlq/default/bulk", {"rate": 5, "maximum": 5, "to_queue": "nope"},
                follow_redirects=True)
    assert "unknown queue &#39;nope&#39; to replay into: pass one of default, slow" in (
        resp.get_data(as_text=True))
    assert web.svc.bulk.list("default") == []
    api = c.post("/api/queues/default/replays", json={"rate": 5, "maximum": 5,
                                                      "to_queue": "<b>x</b>"},
                 headers=basic("operator"))
    assert api.status_code == 400 and "pass one of default, slow" in api.get_json()["message"]
    ok = c.post("/api/queues/default/replays", json={"rate": 5, "maximum": 5,
                                                     "to_queue": "slow", "stop_pct": 50},
                headers=basic("operator"))
    assert ok.status_code == 200, ok.get_json()
    task = ok.get_json()["task"]
    assert task["target"] == "slow" and task["stop_pct"] == 50
    assert ("into queue slow (jobs of a fair-share group keep their group, its slots "
            "(group_concurrency) and its rate in queue slow; an operator's override or pause "
            "of a group in queue default does not follow them)") in ok.get_json()["message"]
    web.clock.advance(1000)
    assert web.svc.bulk.step_all() == 1
    assert web.svc.reads.queue_info("slow").ready == 2
    assert web.svc.reads.count_dead("default") == 0


def test_the_dlq_form_offers_the_guard_and_the_other_queues(web):
    web.dead_job()
    web.producer.queue("slow").enqueue("t", {}, idempotency_key="slow-known")
    page = web.client("operator").get("/dlq/?queue=default").get_data(as_text=True)
    assert 'name="stop_pct" value="20"' in page and 'name="min_sample" value="20"' in page
    assert '<option value="slow">slow</option>' in page
    assert '<option value="default">' not in page  # its own queue is the empty choice
