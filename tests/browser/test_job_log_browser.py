"""A job's own log on its job page in Chromium, served by the real stack (the worker pool ran
the handler in another process): the three lines in order, their markup shown as text, the
section axe-clean and inside the page at 1280 and 390 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until
from .test_accessibility import _violations

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 30_000
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_the_job_page_shows_the_lines_its_handler_logged(stack, login, viewport):
    ref = stack.new_ref("diary")
    job_id = stack.enqueue("diary", ref)
    wait_until("the diary job to run", lambda: ref in stack.marks("done"))
    page = login("viewer", viewport=viewport, bypass_csp=True)  # (axe is injected)
    page.goto(f"/jobs/default/{job_id}")
    rows = page.locator("#joblog tr.logline")
    expect(rows).to_have_count(3, timeout=JOB_TIMEOUT_MS)
    expect(rows.nth(0)).to_contain_text(f"opened the ledger for {ref}")
    expect(rows.nth(1)).to_contain_text("<em>two</em> entries look odd")  # text, not markup
    expect(rows.nth(1)).to_contain_text("WARNING")
    expect(rows.nth(2)).to_contain_text("closed the ledger")
    assert page.locator("#joblog em").count() == 0
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"the job page scrolls sideways: {widths}"
    assert _violations(page) == []
    screenshot(page, f"job-log-{viewport['width']}")
