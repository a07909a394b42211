"""The finder and the job timeline in a real Chromium: paste a job id into the header's box,
land on the job, read its timeline after a failure, a replay by the logged-in operator and a
success (the worker pool really runs the job each time)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000


def test_paste_a_job_id_into_the_finder_and_read_its_whole_life(stack, login):
    ref = stack.new_ref("find")
    job_id = stack.enqueue("charge", ref)
    wait_until("the worker to run and fail the charge job", lambda: ref in stack.marks("failed"))

    page = login("operator")
    page.wait_for_load_state("load")  # the deferred scripts (finder.js among them) have run
    page.keyboard.press("/")  # focuses the finder box from anywhere on the page
    box = page.get_by_role("searchbox", name="Find a job by id, idempotency key or payload field")
    expect(box).to_be_focused()
    box.fill(job_id)
    box.press("Enter")
    expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    assert page.url.endswith(f"/jobs/default/{job_id}")
    events = page.locator("#timeline tr.event")
    expect(events.last).to_have_attribute("data-kind", "buried")
    expect(page.locator("#timeline tr.ev-buried")).to_contain_text(f"card declined for ref {ref}")
    screenshot(page, "timeline-after-failure")

    stack.fix(ref)
    page.locator("#live").get_by_placeholder("reason (for the audit log)").first.fill(
        "gateway fixed, finder browser test")
    page.get_by_role("button", name="Replay this job").click()
    expect(page.locator(".flash.ok")).to_contain_text(f"job {job_id} replayed")

    queue = stack.client.queue("default")
    wait_until("the worker to finish the replayed job", lambda: queue.get(job_id).state == "done")
    page.goto(f"/find?q={job_id}")
    expect(events.last).to_have_attribute("data-kind", "completed", timeout=JOB_TIMEOUT_MS)
    kinds = [events.nth(i).get_attribute("data-kind") for i in range(events.count())]
    assert kinds == ["enqueued", "reserved", "buried", "replayed", "reserved", "completed"]
    replayed = page.locator("#timeline tr.ev-replayed")
    expect(replayed.locator("td.actor")).to_have_text("operator")
    expect(replayed).to_contain_text("gateway fixed, finder browser test")
    worker = page.locator("#timeline tr.ev-completed td.actor")
    expect(worker).to_contain_text(":")  # host:pid:nonce of the worker process
    screenshot(page, "timeline-after-replay-and-success")

    page.get_by_role("link", name="Audit entries for this job").click()
    expect(page.locator("#live")).to_contain_text("dlq.replay")


def test_payload_search_from_the_finder_box_lists_hits_as_they_come(stack, login):
    ref = stack.new_ref("search")
    order = abs(hash(ref)) % 10_000_000
    job_id = stack.enqueue("flaky_fetch", ref, order={"id": order})
    wait_until("the flaky job to be retried", lambda: stack.client.queue("default").get(job_id)
               .attempt >= 1)

    page = login("viewer")
    box = page.get_by_role("searchbox", name="Find a job by id, idempotency key or payload field")
    box.fill(f"order.id={order}")
    box.press("Enter")
    hits = page.locator("#search-hits tr.hit")
    expect(hits).to_have_count(1, timeout=JOB_TIMEOUT_MS)
    expect(hits.first).to_contain_text(job_id)
    expect(page.locator("#search-hits td.search-done")).to_contain_text("Search finished")
    screenshot(page, "payload-search")
    hits.first.get_by_role("link", name=job_id).click()
    expect(page.locator("#timeline tr.ev-failed").first).to_contain_text("retryable")


def test_finder_pages_do_not_scroll_sideways_on_a_phone(stack, login):
    ref = stack.new_ref("phone")
    job_id = stack.enqueue("charge", ref)
    wait_until("the charge job to fail", lambda: ref in stack.marks("failed"))
    page = login("viewer", viewport={"width": 390, "height": 844})
    for url in (f"/jobs/default/{job_id}", "/find?q=ref=" + ref, "/browse/default/dead",
                "/browse/default/ready", "/inflight/?queue=default&sort=silent"):
        page.goto(url)
        page.wait_for_load_state("networkidle")
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"{url} scrolls sideways at 390 px: {widths}"


def test_the_job_page_shows_a_running_jobs_progress_and_refreshes_it(stack, login):
    ref = stack.new_ref("progress")
    job_id = stack.enqueue("slow_report", ref, seconds=20)
    wait_until("the worker to start the report", lambda: ref in stack.marks("started"))
    page = login("viewer")
    page.goto(f"/jobs/default/{job_id}")
    shown = page.locator("#live dd.job-progress")
    expect(shown.locator("progress")).to_be_visible(timeout=JOB_TIMEOUT_MS)
    expect(shown).to_contain_text("<step> ")  # the handler's text, shown as text
    expect(shown).to_contain_text("%")
    first = shown.locator(".progress-of").get_attribute("data-progress")
    # the live region is re-read every 2 s while the job runs: the bar moves without a reload
    expect(shown.locator(".progress-of")).not_to_have_attribute("data-progress", first or "",
                                                                 timeout=JOB_TIMEOUT_MS)
    screenshot(page, "job-progress")
