"""The Schedules page, its API routes and its audited actions (pause, resume, run now); the
dead-letter page's retention line."""

from __future__ import annotations

import pytest

from antre.maintenance.retention import Retention, RetentionPolicy
from webtools import basic, post


MIN_MS = 60_000


@pytest.fixture
def sched(web):
    """A producer app with one schedule, published by one scheduler pass."""
    web.producer.periodic("*/5 * * * *", "reconcile_stock", payload={"w": "north"})
    web.producer.scheduler().run_once()
    return web


def test_the_page_lists_schedules_with_next_run_and_nav_link(sched):
    c = sched.client("viewer")
    html = c.get("/schedules/").get_data(as_text=True)
    assert 'href="/schedules/"' in html and "aria-current" in html
    assert 'data-schedule="reconcile_stock"' in html
    assert "cron */5 * * * * (UTC)" in html and "never run" in html
    assert "Run now" not in html  # a viewer sees no buttons


def test_an_empty_page_says_where_schedules_come_from(web):
    html = web.client("viewer").get("/schedules/").get_data(as_text=True)
    assert "No schedules yet" in html


def test_pause_and_resume_are_audited_posts(sched):
    c = sched.client("operator")
    resp = post(c, "/schedules/reconcile_stock/pause", {"reason": "stock migration"})
    assert resp.status_code == 303
    html = c.get("/schedules/").get_data(as_text=True)
    assert "paused by operator" in html and ">Resume<" in html
    entry = sched.audit("schedules.pause")[0]
    assert (entry.user, entry.outcome, entry.reason) == ("operator", "ok", "stock migration")
    sched.clock.advance(5 * MIN_MS)
    assert [r.outcome for r in sched.producer.scheduler().run_once()] == ["paused"]
    post(c, "/schedules/reconcile_stock/resume", {"reason": "done"})
    assert sched.audit("schedules.resume")[0].outcome == "ok"
    assert ">Pause<" in c.get("/schedules/").get_data(as_text=True)


def test_run_now_shows_the_run_on_the_page(sched):
    c = sched.client("operator")
    post(c, "/schedules/reconcile_stock/run-now", {"reason": "check"})
    job_id = sched.audit("schedules.run_now")[0].detail["job_id"]
    assert sched.q.get(job_id).payload == {"w": "north"}
    html = c.get("/schedules/").get_data(as_text=True)
    assert job_id[:12] in html and '<span class="tag">ready</span>' in html


def test_a_viewer_is_refused_and_the_refusal_audited(sched):
    resp = post(sched.client("viewer"), "/schedules/reconcile_stock/pause", {"reason": "x"})
    assert resp.status_code == 403
    assert sched.audit("schedules.pause")[0].outcome == "refused"


def test_a_post_without_csrf_token_changes_nothing(sched):
    c = sched.client("operator")
    resp = post(c, "/schedules/reconcile_stock/pause", {"reason": "x"}, csrf=False)
    assert resp.status_code in (400, 403)
    assert sched.svc.schedules.info("reconcile_stock").paused is False


def test_api_lists_and_acts(sched):
    c = sched.app.test_client()
    rows = c.get("/api/schedules", headers=basic("viewer")).get_json()["schedules"]
    assert rows[0]["name"] == "reconcile_stock" and rows[0]["paused"] is False
    resp = c.post("/api/schedules/reconcile_stock/pause", json={"reason": "api"},
                  headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["paused"] is True
    resp = c.post("/api/schedules/reconcile_stock/run-now", json={}, headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["job_id"]
    resp = c.post("/api/schedules/nope/run-now", json={}, headers=basic("operator"))
    assert resp.status_code == 404 and "no schedule named 'nope'" in resp.get_json()["message"]
    assert sched.audit("schedules.run_now")[0].outcome == "failed"


def test_the_dlq_page_says_what_retention_keeps(web):
    web.dead_job()
    html = web.client("viewer").get("/dlq/?queue=default").get_data(as_text=True)
    assert "Retention: keeps 30 days / 100,000 jobs." in html
    Retention(web.producer.redis).run("default", RetentionPolicy(dead_max_jobs=1))
    web.dead_job()
    Retention(web.producer.redis).run("default", RetentionPolicy(dead_max_jobs=1))
    html = web.client("viewer").get("/dlq/?queue=default").get_data(as_text=True)
    assert "keeps 30 days / 1 jobs; 1 dead job dropped so far, oldest first." in html
