"""The Flows pages in a real Chromium, against gunicorn, Redis and a real worker
pool: a chord whose charge fails is listed under Failed with its progress; its flow page lays
its jobs out by depth and links each to its job page, whose facts link back to the flow; the
operator replays the flow's dead job and the flow finishes. Screenshots at 1280 and 390 px
with data rows in the first screen."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from antre.flows import FlowReader

from .conftest import nav_link, screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000


def _chord(stack, ref: str):
    c = stack.client
    kids = [c.spec("echo", {"ref": f"{ref}-a"}, idempotency_key=f"browser:flow:{ref}:a"),
            c.spec("charge", {"ref": ref}, idempotency_key=f"browser:flow:{ref}:charge"),
            c.spec("echo", {"ref": f"{ref}-b"}, idempotency_key=f"browser:flow:{ref}:b")]
    close = c.spec("echo", {"ref": f"{ref}-close"}, idempotency_key=f"browser:flow:{ref}:close")
    return c.chord(kids, close).enqueue(description=f"order {ref} <b>paid</b>")


def test_a_failed_flow_from_the_list_to_a_job_and_back_then_replayed(stack, login):
    ref = stack.new_ref("order")
    flow = _chord(stack, ref)
    wait_until("the charge of the flow to fail", lambda: flow.status().state == "failed")
    page = login("operator", viewport={"width": 1280, "height": 800})
    nav_link(page, "Flows").click()
    expect(page.get_by_role("heading", name="Flows", exact=True)).to_be_visible()
    page.get_by_role("navigation", name="Flows by state").get_by_role(
        "link", name="Failed").click()
    row = page.locator(f"#live tr[data-flow='{flow.id}']")
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)
    expect(row).to_contain_text("2 done, 1 failed, 1 to go of 4")
    expect(row).to_contain_text("order " + ref + " <b>paid</b>")  # shown as text, escaped
    expect(row).to_contain_text(f"card declined for ref {ref}")
    screenshot(page, "flows-1280")

    row.get_by_role("link", name=flow.id).click()
    expect(page.get_by_role("heading", name=f"Flow {flow.id}")).to_be_visible()
    steps = page.locator("#live .flow-level")
    expect(steps).to_have_count(2)
    expect(steps.nth(0).locator(".flow-job")).to_have_count(3)
    expect(steps.nth(1)).to_contain_text("held")
    expect(page.locator("#live [data-failure]")).to_contain_text("died")
    screenshot(page, "flow-1280")

    charge = next(j for j in FlowReader(stack.r).tree("default", flow.id).jobs
                  if j.type == "charge")
    page.locator(f"#live li[data-job='{charge.id}']").get_by_role("link", name="charge").click()
    expect(page.get_by_role("heading", name=f"Job {charge.id}")).to_be_visible()
    expect(page.locator("#live [data-flow-link]")).to_contain_text(flow.id)
    page.locator("#live [data-flow-link]").get_by_role("link", name=flow.id).click()
    expect(page.get_by_role("heading", name=f"Flow {flow.id}")).to_be_visible()

    stack.fix(ref)
    page.locator("#live").get_by_placeholder("reason (for the audit log)").first.fill(
        "gateway fixed")
    page.get_by_role("button", name="Replay the failed jobs").click()
    page.locator("dialog.confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator(".flash.ok")).to_contain_text("1 dead job(s) of flow")
    wait_until("the replayed flow to finish", lambda: flow.status().state == "succeeded")
    expect(page.locator("#live [data-flow-state]")).to_have_text("succeeded",
                                                                 timeout=JOB_TIMEOUT_MS)


def test_the_flows_list_and_a_flow_at_390_px_show_rows_in_the_first_screen(stack, login):
    refs = [stack.new_ref("phone") for _ in range(3)]
    flows = [_chord(stack, r) for r in refs]
    wait_until("the flows to fail", lambda: all(f.status().state == "failed" for f in flows))
    page = login("viewer", viewport={"width": 390, "height": 844})
    page.goto("/flows/?queue=default&state=failed")
    first = page.locator(f"#live tr[data-flow='{flows[-1].id}']")
    expect(first).to_be_visible(timeout=JOB_TIMEOUT_MS)
    box = first.bounding_box()
    screenshot(page, "flows-390")
    assert box is not None and box["y"] < 844, box  # a data row in the first screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.goto(f"/flows/default/{flows[0].id}")
    job = page.locator("#live .flow-job").first
    expect(job).to_be_visible()
    screenshot(page, "flow-390")
    assert (job.bounding_box() or {"y": 9999})["y"] < 844
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
