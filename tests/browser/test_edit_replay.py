"""Replay with an edited payload in Chromium: a charge died for a bad ref; the
operator opens the job, edits the payload to the fixed ref, sees the diff in a dry run, replays
it with a reason, and the worker pool runs the edited payload once; the original stays on the
job's timeline."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000


def test_edit_dry_run_and_replay_from_the_job_page(stack, login):
    bad, good = stack.new_ref("typo"), stack.new_ref("fixed")
    job_id = stack.enqueue("charge", bad)
    wait_until("the charge to die", lambda: getattr(stack.client.queue().get(job_id), "state",
                                                    "") == "dead")
    stack.fix(good)
    page = login("operator")
    page.goto(f"/dlq/default/{job_id}")
    page.get_by_role("link", name="Edit the payload and replay…").click()
    expect(page.get_by_role("heading", name="Edit and replay")).to_be_visible()
    box = page.get_by_label("Payload (JSON)")
    assert json.loads(box.input_value()) == {"ref": bad}
    box.fill(json.dumps({"ref": good}, indent=2))
    page.get_by_role("button", name="Dry run").click()
    result = page.locator("section.dry-run-result")
    expect(result.locator("pre.diff .del")).to_contain_text(bad)
    expect(result.locator("pre.diff .add")).to_contain_text(good)
    expect(result).to_contain_text("A replay would run handler charge")
    screenshot(page, "edit-replay-dry-run")
    assert stack.client.queue().get(job_id).state == "dead"  # a dry run changes nothing

    form = page.locator("form.replay-edited")  # offered for exactly what was dry-run
    form.get_by_label("Reason", exact=False).fill("wrong ref typed by support, browser test")
    form.get_by_role("button", name="Replay with this payload").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator(".flash.ok")).to_contain_text("replayed with the edited payload")
    wait_until("the edited job to run", lambda: good in stack.marks("done"))
    assert stack.marks("done").count(good) == 1
    page.reload()
    replayed = page.locator("#timeline tr[data-kind='replayed']")
    expect(replayed).to_contain_text("original payload")
    expect(replayed).to_contain_text(bad)
    screenshot(page, "edit-replay-timeline")
    entry = stack.client.audit.list(limit=20, action="dlq.replay_edited")[0]
    assert (entry.user, entry.outcome) == ("operator", "ok") and good in entry.detail["diff"]
