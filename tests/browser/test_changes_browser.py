"""What changed before an incident, in Chromium on the real stack: a group paused now (the
incident) whose slots an operator lowered a minute before, and a worker version first seen as
it began; the incident's card names both first, the section axe-clean and inside the
page at 1280 and 390 px."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from antre.clock import ManualClock
from antre.control.pause import Pauses
from antre.groups.control import GroupControl
from antre.observe.registry import WorkerRegistry

from .conftest import screenshot
from .test_accessibility import _violations

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def paused_group(stack):
    group = stack.new_ref("tenant")
    now = int(time.time() * 1000)
    stack.enqueue("echo", stack.new_ref("changes"))  # (the queue is known)
    GroupControl(stack.r, ManualClock(now - 60_000)).set_slots(
        "default", group, 1, by="bob", reason="<b>protect</b> the db")
    # the canary starts in the same ms as the pause (the stack's own workers started before)
    WorkerRegistry(stack.r, ManualClock(now)).record_start(
        "w-canary", "canary-host", f"build-{group}", package="9.9.9", queues=["default"])
    pauses = Pauses(stack.r, clock=ManualClock(now))
    pauses.pause_group("default", group, "carol", "tenant misbehaves")
    try:
        yield group
    finally:
        pauses.resume_group("default", group)
        GroupControl(stack.r).clear_slots("default", group)


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_the_incident_card_names_the_group_limit_and_the_new_version_first(
        stack, login, paused_group, viewport):
    page = login("viewer", viewport=viewport, bypass_csp=True)  # (axe is injected)
    page.goto("/incident/")
    card = page.locator(f"article[data-incident='paused|default/group={paused_group}']")
    expect(card).to_be_visible(timeout=JOB_TIMEOUT_MS)
    summary = card.locator("details.changed summary")
    expect(summary).to_contain_text(f"group {paused_group} limited to 1 slots")  # the first
    summary.click()
    changes = card.locator("li.change")
    expect(changes.nth(0)).to_be_visible()
    expect(changes.nth(0)).to_contain_text(f"group {paused_group} limited to 1 slots")
    expect(changes.nth(0)).to_contain_text("<b>protect</b> the db")  # shown as text
    expect(changes.nth(0)).to_contain_text("touches its group")
    expect(changes.nth(1)).to_contain_text(f"antre 9.9.9, build-{paused_group} first seen")
    assert card.locator("li.change b").count() == 0
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"/incident/ scrolls sideways: {widths}"
    assert _violations(page) == []
    screenshot(page, f"incident-changes-{viewport['width']}")
