"""The Limits table and a group's pause in a real Chromium, against gunicorn,
Redis and a real worker pool: an operator overrides a job type's slots and rate with a reason
and a revert time, sees it in the table and in the audit log, and ends it; pauses one group
from its page (a job of it is parked by the worker, not run), then resumes it (the job runs).
At 390 px the table is cards: no sideways scroll of the page, its form in reach. axe-core finds
nothing serious or critical on the Groups page with an override in place."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from antre.engine.keys import QueueKeys

from .conftest import screenshot, wait_until
from .test_accessibility import _violations

pytestmark = pytest.mark.browser

WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
GATE = "type:notify_partner"  # a type no other browser test needs to run on time


def _limits_row(page: Any) -> Any:
    row = page.locator(f"#live tr[data-gate='{GATE}']")
    expect(row).to_be_visible(timeout=20_000)  # the worker declared its handlers' types
    return row


def _set_override(page: Any, reason: str) -> None:
    row = _limits_row(page)
    form = row.locator("form").first
    form.get_by_placeholder("reason (for the audit log)").fill(reason)
    form.get_by_label("Slots").fill("7")
    form.get_by_label("Rate").fill("100/s")
    form.get_by_label("Revert after (s)").fill("600")
    form.get_by_role("button", name="Override").click()
    expect(page.locator(".flash.ok")).to_contain_text(
        "type notify_partner in default: 7 slots, rate 100/s for 600 s")


def _no_sideways_scroll(page: Any, where: str) -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{where} scrolls sideways: {widths}"


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_an_operator_overrides_a_limit_sees_it_audited_and_ends_it(stack, login, viewport):
    page = login("operator", viewport=viewport)
    page.goto("/groups/?queue=default")
    reason = f"browser {viewport['width']}: partner asked <b>for</b> a pause"
    _set_override(page, reason)
    row = _limits_row(page)
    expect(row.locator("td[data-col='slots']")).to_contain_text("7")
    expect(row.locator("td[data-col='rate']")).to_contain_text("100/s")
    override = row.locator("td[data-col='override']")
    expect(override).to_contain_text(f"by operator: {reason}")  # the markup shown as text
    expect(override).to_contain_text("reverts at")
    over = stack.client.redis.hget(QueueKeys("default").gate_overrides, GATE)
    assert over and over.startswith("7|") and over.endswith("|100/1000")  # what reserve reads
    _no_sideways_scroll(page, "/groups/ with an override")
    if viewport["width"] == PHONE["width"]:
        box = row.bounding_box()
        assert box and box["width"] <= PHONE["width"], box  # a card, not a wide row
        button = row.get_by_role("button", name="End override")
        button.scroll_into_view_if_needed()
        bbox = button.bounding_box()
        assert bbox and bbox["x"] + bbox["width"] <= PHONE["width"], bbox
    screenshot(page, f"limits-override-{viewport['width']}")

    page.goto("/audit/")
    entry = page.locator("tr", has_text="limit.set").filter(has_text=reason).first
    expect(entry).to_be_visible()
    expect(entry).to_contain_text(f"default/{GATE}")

    page.goto("/groups/?queue=default")
    row = _limits_row(page)
    clear = row.locator("form", has=page.get_by_role("button", name="End override"))
    clear.get_by_placeholder("reason (for the audit log)").fill("partner is back")
    clear.get_by_role("button", name="End override").click()
    expect(page.locator(".flash.ok")).to_contain_text("override ended")
    expect(_limits_row(page).locator("td[data-col='override']")).to_have_text("none")
    assert stack.client.redis.hget(QueueKeys("default").gate_overrides, GATE) is None
    page.goto("/audit/")
    expect(page.locator("tr", has_text="limit.clear").filter(
        has_text="partner is back").first).to_be_visible()


def test_an_operator_pauses_and_resumes_one_group_from_its_page(stack, login):
    group = stack.new_ref("tenant")
    page = login("operator", viewport=WIDE)
    page.goto(f"/groups/default/{group}")
    expect(page.get_by_role("heading", name=f"Group {group}")).to_be_visible()
    box = page.locator("#live .box")
    box.locator("form").first.get_by_placeholder("reason (for the audit log)").fill(
        "checking their data")
    box.get_by_role("button", name="Pause this group").click()
    expect(page.locator(".flash.ok")).to_contain_text(f"group {group} in default paused")
    expect(page.locator("#live dl.facts")).to_contain_text("paused")

    ref = stack.new_ref("grouped")
    job_id = stack.client.enqueue("echo", {"ref": ref}, idempotency_key=f"browser:grp:{ref}",
                                  group=group)
    parked = QueueKeys("default").parked(f"group={group}")  # (a paused group's parked list)
    wait_until("the worker to park the paused group's job",
               lambda: stack.r.lpos(parked, job_id) is not None, timeout=30)
    assert ref not in stack.marks("done")

    page.reload()
    box = page.locator("#live .box")
    box.locator("form").first.get_by_placeholder("reason (for the audit log)").fill("all good")
    box.get_by_role("button", name="Resume this group").click()
    expect(page.locator(".flash.ok")).to_contain_text(f"group {group} in default resumed")
    wait_until("the resumed group's job to run", lambda: ref in stack.marks("done"), timeout=30)
    page.goto("/audit/")
    for action, why in (("group.pause", "checking their data"), ("group.resume", "all good")):
        expect(page.locator("tr", has_text=action).filter(has_text=why).first).to_be_visible()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_groups_page_with_an_override_has_no_serious_axe_violation(stack, login, scheme):
    page = login("operator", color_scheme=scheme, bypass_csp=True, viewport=PHONE)
    page.goto("/groups/?queue=default")
    _set_override(page, f"axe {scheme}")
    found = _violations(page)
    screenshot(page, f"limits-axe-{scheme}")
    row = _limits_row(page)
    clear = row.locator("form", has=page.get_by_role("button", name="End override"))
    clear.get_by_role("button", name="End override").click()
    expect(page.locator(".flash.ok")).to_contain_text("override ended")
    assert not found, f"axe-core on /groups/ ({scheme}):\n" + "\n".join(found)
