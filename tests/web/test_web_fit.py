"""Pages that fit and read right, at the HTTP level: the header's links
grouped, pause out of the overview rows, the error groups' own tab, a filter named by its
error, attempts, durations and ages that read right, long lock keys cut with the full value
kept."""

from __future__ import annotations

import re

from markupsafe import escape

from webtools import htmx, post


def test_the_header_groups_its_links_and_puts_settings_in_a_menu(web):
    page = web.client("admin").get("/").get_data(as_text=True)
    nav = page[page.index('<nav id="nav"'):page.index("</nav>")]
    top = nav[:nav.index('<details class="navmenu">')]
    assert len(re.findall(r"<a href=", top)) == 9  # incidents + 8 main pages (Groups, Flows among them)
    more = nav[nav.index('<details class="navmenu">'):]
    for label in ("Schedules", "Idempotency", "Purge", "Audit log", "Users"):
        assert f">{label}</a>" in more
    settings = page[page.index('<details class="navmenu settings">'):]
    assert 'id="pref-theme"' in settings and "Log out" in settings


def test_error_groups_have_their_own_tab_and_a_filter_is_named_by_its_error(web):
    for _ in range(3):
        web.dead_job("email", error="smtp timeout talking to mx1.example.com")
    c = web.client("operator")
    group = web.svc.reads.error_groups("default")[0]
    dlq = c.get("/dlq/?queue=default").get_data(as_text=True)
    assert "<h2>Error groups</h2>" not in dlq and "/errors/?queue=default" in dlq
    tab = c.get("/errors/?queue=default").get_data(as_text=True)
    sig = str(escape(group.signature))  # '<n>' for the number taken out: escaped
    assert f'data-group="{group.group}"' in tab and sig in tab
    assert f"/dlq/?queue=default&amp;group={group.group}" in tab
    filtered = c.get(f"/dlq/?queue=default&group={group.group}").get_data(as_text=True)
    assert f'error &#34;{sig}&#34;' in filtered and f"group={group.group}</em>" not in filtered
    post(c, "/dlq/default/bulk", {"group": group.group, "rate": "1", "maximum": "3",
                                  "reason": "smtp back"})
    (task,) = web.svc.bulk.list("default")
    assert task.description == f'error "{group.signature}"'
    assert str(escape(task.description)) in c.get("/dlq/tasks?queue=default").get_data(
        as_text=True)


def test_attempts_durations_and_ages_read_right(web):
    job_id = web.q.enqueue("email", {"to": "a@x"}, idempotency_key="fit:done")
    (job,) = web.q.reserve("w1")
    web.clock.advance(4500)
    web.q.ack(job, result={"ok": True})
    c = web.client("viewer")
    page = c.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert "attempt 1/" in page and "0/" not in page.split("<dt>Attempts</dt>")[1][:40]
    assert "delay ms" not in page and "ran ms" not in page
    overview = c.get("/", headers=htmx()).get_data(as_text=True)
    assert "none ready" in overview and ">0.0s<" not in overview


def test_pause_is_in_the_queue_box_not_in_overview_rows(web):
    web.q.enqueue("email", {}, idempotency_key="fit:pause")
    op = web.client("operator")
    assert "pause-form" not in op.get("/", headers=htmx()).get_data(as_text=True)
    for url in ("/inflight/?queue=default", "/scheduled/?queue=default", "/dlq/?queue=default"):
        assert "pause-form" in op.get(url).get_data(as_text=True), url


def test_a_long_lock_key_is_cut_with_the_full_value_on_focus(web):
    key = "tenant:eu-west-1:invoice:" + "k" * 150
    lock = web.svc.locks.acquire(key, 60_000, owner="t")
    try:
        page = web.client("operator").get("/locks/").get_data(as_text=True)
        assert f'<code class="long-key" tabindex="0" title="{key}">{key}</code>' in page
        assert "release-form" in page
    finally:
        web.svc.locks.release(lock)


def test_charts_break_at_a_gap_in_the_samples(web):
    """Samples every 10 s, then 18 minutes without any (the pool was stopped), then more: the
    lines get a null inside the gap and the rate right after it is null, not an average."""
    import json

    from antre.observe import sampling

    web.q.enqueue("email", {}, idempotency_key="fit:chart")
    for _ in range(6):
        sampling.take(web.producer.redis, web.clock)
        web.clock.advance(10_000)
    stopped_at = web.clock()
    web.clock.advance(18 * 60_000)
    for _ in range(6):
        sampling.take(web.producer.redis, web.clock)
        web.clock.advance(10_000)
    body = web.client("viewer").get("/charts?queue=default&window=1h",
                                    headers=htmx()).get_data(as_text=True)
    depth, rates = (json.loads(f) for f in re.findall(r"data-chart='([^']*)'", body))
    ready = depth["data"][0]
    assert ready["name"] == "ready" and ready["connectgaps"] is False
    holes = [x for x, y in zip(ready["x"], ready["y"]) if y is None]
    assert len(holes) == 1 and stopped_at - 10_000 < holes[0] < stopped_at + 18 * 60_000
    assert ready["y"].count(None) == 1 and len(ready["y"]) == 13
    acked = rates["data"][0]
    assert acked["y"].count(None) == 2  # inside the gap, and the first rate after it
