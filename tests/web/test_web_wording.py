"""The dashboard's words: a bulk replay names its error group by the group's error (not its
hash), a delay of nothing is "now", and a flow's job counts attempts from 1 ("not run yet"
before its first)."""

from __future__ import annotations

from webtools import post


def _dead_group(web):
    web.dead_job("email", error="smtp down: 421 try later")
    return web.svc.reads.error_groups("default")[0].group


def test_replay_now_names_its_error_group_by_its_error(web):
    group = _dead_group(web)
    resp = post(web.client("operator"), "/dlq/default/replay-now",
                {"maximum": "5", "group": group, "reason": "smtp back"}, follow_redirects=True)
    page = resp.get_data(as_text=True)
    assert "replayed 1 dead jobs (error &#34;permanent: smtp down: &lt;n&gt; try later&#34;)" in page
    assert f"group={group}" not in page


def test_a_bulk_replay_names_its_error_group_by_its_error(web):
    group = _dead_group(web)
    resp = post(web.client("operator"), "/dlq/default/bulk",
                {"group": group, "rate": "5", "maximum": "10", "reason": "smtp back"},
                follow_redirects=True)
    page = resp.get_data(as_text=True)
    assert "jobs match (error &#34;permanent: smtp down: &lt;n&gt; try later&#34;)" in page
    assert f"group={group}" not in page


def test_an_immediate_enqueue_shows_its_delay_as_now(web):
    ready = web.q.enqueue("email", {}, idempotency_key="now:1")
    page = web.client("viewer").get(f"/jobs/default/{ready}").get_data(as_text=True)
    timeline = page[page.index('id="timeline"'):]
    assert "<small>delay</small> now" in timeline and "0.0s" not in timeline
    later = web.q.enqueue("email", {}, idempotency_key="later:1", delay_s=90)
    page = web.client("viewer").get(f"/jobs/default/{later}").get_data(as_text=True)
    assert "<small>delay</small> 1m30s" in page[page.index('id="timeline"'):]
