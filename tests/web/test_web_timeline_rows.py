"""The job page's timeline: checkpoints and a worker's extensions in a row
read as one row with their count and last time; past the cap a "dropped" row counts the
events between the first ones and the newest; times are keyboard-focusable."""

from __future__ import annotations


def test_coalesced_and_dropped_rows_on_the_job_page(web):
    q = web.q
    job_id = q.enqueue("t", {}, idempotency_key="tl-web")
    (job,) = q.reserve("host:1:a")
    for step in range(30):
        web.clock.advance(500)
        q.checkpoint(job, {"step": step})
    q.ack(job, {})
    page = web.client("viewer").get(f"/jobs/default/{job_id}").get_data(as_text=True)
    row = page[page.index('data-kind="checkpoint"'):]
    row = row[:row.index("</tr>")]
    assert '<small class="count">×30</small>' in row and 'class="coalesced">last' in row
    assert page.count('data-kind="checkpoint"') == 1

    other = q.enqueue("t", {}, idempotency_key="tl-web-2")
    for _ in range(60):
        (job,) = q.reserve("host:1:a")
        q.snooze(job, 0, "rate_limited")
    page = web.client("viewer").get(f"/jobs/default/{other}").get_data(as_text=True)
    assert '<span class="tag">dropped</span> <small>21 events between these</small>' in page
    assert "events between the first ones and the newest were dropped" in page


def test_relative_times_take_the_keyboard_focus(web):
    web.dead_job()
    page = web.client("viewer").get("/dlq/?queue=default").get_data(as_text=True)
    assert '<time class="when"' in page and 'tabindex="0">' in page
