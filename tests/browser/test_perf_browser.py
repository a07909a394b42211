"""The performance pages in Chromium on the real stack, at 1280 and 390 px,
and absolute times reachable by keyboard."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 30_000
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def _ran_echo_jobs(stack, n: int) -> list[str]:
    refs = [stack.new_ref("perf") for _ in range(n)]
    for ref in refs:
        stack.enqueue("echo", ref)
    wait_until("the echo jobs to run", lambda: set(refs) <= set(stack.marks("done")))
    return refs


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_type_page_draws_its_figures_and_fits(stack, login, viewport):
    _ran_echo_jobs(stack, 3)
    page = login("viewer", viewport=viewport)
    page.goto("/types/?window=1h")
    row = page.locator("#live tr[data-type='echo']")
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)  # the worker's heartbeat wrote them
    runs = int(row.locator("td[data-label='Runs']").inner_text())
    assert runs >= 3
    row.get_by_role("link", name="echo").click()
    expect(page.get_by_role("heading", name="echo performance")).to_be_visible()
    expect(page.locator("figure.chart .plot")).to_have_count(2, timeout=JOB_TIMEOUT_MS)
    expect(page.locator("tr[data-window='24h'] td[data-label='Runs']")).to_have_text(
        re.compile(r"^\d+$"))
    expect(page.locator("tr.marker-deploy").first).to_contain_text("workers on")
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"/types/echo scrolls sideways: {widths}"
    first_chart = page.locator("figure.chart").first.bounding_box()
    assert first_chart and first_chart["y"] < viewport["height"] * 1.5
    screenshot(page, f"types-echo-{viewport['width']}")


def test_absolute_times_are_reachable_by_keyboard(stack, login):
    _ran_echo_jobs(stack, 1)
    page = login("viewer", viewport=WIDE)
    page.goto("/types/echo?window=24h")
    when = page.locator("#live tr.marker-deploy time.when").first
    expect(when).to_have_text(re.compile(r"ago$|^just now$"), timeout=JOB_TIMEOUT_MS)
    for _ in range(60):  # tab through the page until the time has the focus
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.matches("
                         "'#live tr.marker-deploy time.when')"):
            break
    else:
        pytest.fail("no relative time was reached by Tab")
    shown = page.evaluate("getComputedStyle(document.activeElement, '::after').content")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown), shown
    screenshot(page, "keyboard-absolute-time")
