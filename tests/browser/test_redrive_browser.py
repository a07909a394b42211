"""A redrive that stops itself, in Chromium on the real stack: a paced
replay of jobs that only fail again pauses itself and its progress row says why."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 30_000


def test_redrive_of_jobs_that_fail_again_pauses_and_says_why(stack, login):
    refs = [stack.new_ref("partner") for _ in range(8)]
    for ref in refs:
        stack.enqueue("notify_partner", ref)
    wait_until("eight notify_partner jobs to fail",
               lambda: set(refs) <= set(stack.marks("failed")))
    page = login("operator")
    page.goto("/dlq/?queue=default&type=notify_partner")
    expect(page.locator("p.dry-run")).to_contain_text("8 dead jobs match",
                                                      timeout=JOB_TIMEOUT_MS)
    form = page.locator("form.box", has=page.get_by_role("heading",
                                                        name="Replay at a bounded rate"))
    form.get_by_label("Rate").fill("4")
    form.locator("input[name=min_sample]").fill("2")
    form.locator("input[name=stop_pct]").fill("20")
    form.get_by_placeholder("reason (for the audit log)").fill("partner says fixed")
    form.get_by_role("button", name="Start replay of 8 jobs").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator(".flash.ok")).to_contain_text("pauses itself if more than 20%")

    row = page.locator("#bulk tbody tr[data-task]").first
    reason = row.locator(".paused-reason")
    expect(reason).to_contain_text(
        re.compile(r"paused: \d+ of \d+ replayed jobs failed again \(more than 20%\), \d+ died "
                   r"again in group permanent: Permanent: partner endpoint gone: <n> Gone; "
                   r"resume or cancel"), timeout=JOB_TIMEOUT_MS)
    expect(row.locator(".tag")).to_have_text("paused")
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    expect(row.get_by_role("button", name="Cancel")).to_be_visible()
    text = row.inner_text()
    replayed = int(re.search(r"(\d+) replayed / 8", text).group(1))
    assert replayed < 8  # it stopped before the end
    screenshot(page, "dlq-redrive-paused")
