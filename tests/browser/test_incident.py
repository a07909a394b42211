"""Incident controls in a real Chromium, against gunicorn, Redis and a real worker pool: an
operator pauses the queue during traffic (the banner says who, when and why; the ready count
grows and nothing of it starts), resumes it, then cancels a running job and finds it in the
dead-letter queue with the reason.

Waits are Playwright's bounded ``expect`` or ``wait_until`` on Redis; no fixed sleeps.
"""

from __future__ import annotations

import re

import pytest

from playwright.sync_api import expect

from .conftest import screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000


def test_operator_pauses_during_traffic_resumes_and_cancels_a_running_job(stack, login):
    q = stack.client.queue()
    page = login("operator")
    expect(page.locator("#live td.pause-cell[data-queue='default']")).to_be_visible()
    expect(page.locator("#live .pause-form")).to_have_count(0)  # not in the overview rows
    page.goto("/inflight/?queue=default")
    box = page.locator("section.pause-box")
    box.get_by_text("Pause queue default").click()
    box.get_by_placeholder("why (required)").fill("bad deploy of the mailer, browser test")
    box.get_by_role("button", name="Pause").click()
    banner = page.locator(".paused-note[data-paused='default']")
    expect(banner).to_contain_text("queue default")
    expect(banner).to_contain_text("by operator")
    expect(banner).to_contain_text("bad deploy of the mailer, browser test")
    expect(banner).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))

    # traffic goes on while paused: it waits in the ready list and nothing of it starts
    refs = [stack.new_ref("traffic") for _ in range(6)]
    for ref in refs:
        stack.enqueue("echo", ref)
    wait_until("the workers to look at the queue (wake tokens taken)",
               lambda: stack.r.llen(q.keys.wake) == 0)
    assert not set(refs) & set(stack.marks("done"))
    assert int(stack.r.llen(q.keys.ready)) >= 6
    page.goto("/")
    row = page.locator("#live table.grid tbody tr", has=page.locator("td.pause-cell"))
    expect(row.first.locator("td").nth(1)).to_have_text(re.compile(r"^([6-9]|\d\d+)$"),
                                                        timeout=JOB_TIMEOUT_MS)
    expect(row.first.locator("td.pause-cell .tag")).to_have_text("paused")
    screenshot(page, "incident-paused")
    assert not set(refs) & set(stack.marks("done"))

    # resume from the queue's page: everything that waited runs, once
    page.goto("/inflight/?queue=default")
    banner.get_by_placeholder("reason (for the audit log)").fill("mailer fixed, browser test")
    banner.get_by_role("button", name="Resume").click()
    expect(page.locator(".flash.ok")).to_contain_text("default resumed")
    expect(page.locator(".paused-note")).to_have_count(0)
    wait_until("the traffic to run after the resume", lambda: set(refs) <= set(stack.marks("done")))
    assert all(stack.marks("done").count(ref) == 1 for ref in refs)

    # cancel a running job from the in-flight page
    ref = stack.new_ref("report")
    job_id = stack.enqueue("slow_report", ref, seconds=120)
    wait_until("the slow job to start", lambda: ref in stack.marks("started"))
    page.get_by_role("navigation").get_by_role("link", name="In flight").click()
    job_row = page.locator(f"#live tr[data-row='{job_id}']")
    expect(job_row).to_be_visible(timeout=JOB_TIMEOUT_MS)
    page.get_by_role("checkbox", name=f"Select job {job_id}").check()
    bar = page.locator("#live .action-bar")
    bar.get_by_label("Reason").fill("runaway report, browser test")
    bar.get_by_label("Cancelled jobs go").select_option("dlq")
    bar.get_by_role("button", name="Cancel selected").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator("#live .result.ok")).to_contain_text("1 job asked to stop")
    wait_until("the worker to stop the job", lambda: getattr(q.get(job_id), "state", "") == "dead")
    page.get_by_role("navigation").get_by_role("link", name="Dead letters").click()
    page.goto("/dlq/?queue=default&type=slow_report")
    dead_row = page.locator("#live table.grid tbody tr", has=page.locator(f"code:text-is('{job_id}')"))
    expect(dead_row).to_contain_text("cancelled by operator: runaway report, browser test",
                                      timeout=JOB_TIMEOUT_MS)
    screenshot(page, "incident-cancelled-in-dlq")
    assert ref not in stack.marks("done")
    # the job's timeline records the request (who, why) and ends with the cancel
    page.goto(f"/jobs/default/{job_id}")
    events = page.locator("#timeline tbody tr.event")
    expect(events.last).to_have_attribute("data-kind", "cancelled", timeout=JOB_TIMEOUT_MS)
    asked = page.locator("#timeline tbody tr[data-kind='cancel_requested']")
    expect(asked).to_contain_text("operator")
    expect(asked).to_contain_text("runaway report, browser test")


def test_a_cancelled_handler_that_ignores_the_flag_is_marked_then_dead_with_its_timeline(stack,
                                                                                       login):
    """A sync handler that ignores ``ctx.cancelled``; the
    in-flight row says "cancelling since" while its grace runs, then the job is in the DLQ
    (within the grace + a heartbeat) and its timeline ends with the cancel."""
    q = stack.client.queue()
    ref = stack.new_ref("stubborn")
    job_id = stack.enqueue("stubborn_report", ref, seconds=40)
    wait_until("the stubborn job to start", lambda: ref in stack.marks("started"))
    page = login("operator")
    page.goto("/inflight/?queue=default")
    expect(page.locator(f"#live tr[data-row='{job_id}']")).to_be_visible(timeout=JOB_TIMEOUT_MS)
    page.get_by_role("checkbox", name=f"Select job {job_id}").check()
    bar = page.locator("#live .action-bar")
    bar.get_by_label("Reason").fill("stuck export, browser test")
    bar.get_by_label("Cancelled jobs go").select_option("dlq")
    bar.get_by_role("button", name="Cancel selected").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator("#live .result.ok")).to_contain_text("1 job asked to stop")
    mark = page.locator(f"#live tr[data-row='{job_id}'] .cancelling")
    expect(mark).to_contain_text("cancelling since")
    expect(mark).to_contain_text("(by operator)")
    screenshot(page, "inflight-cancelling")
    wait_until("the worker to abandon the job", lambda: getattr(q.get(job_id), "state", "")
               == "dead", timeout=60)
    assert ref not in stack.marks("done")  # abandoned, not finished
    page.goto(f"/jobs/default/{job_id}")
    events = page.locator("#timeline tbody tr.event")
    expect(events.last).to_have_attribute("data-kind", "cancelled", timeout=JOB_TIMEOUT_MS)
    expect(page.locator("#timeline tbody tr[data-kind='cancel_requested']")).to_contain_text(
        "stuck export, browser test")
