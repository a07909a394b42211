"""Time to drain on the overview and the Groups page in Chromium on the real stack (its worker
pool samples the queues): the column is there, each queue's cell says something, and both pages
stay axe-clean and inside the page at 1280 and 390 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until
from .test_accessibility import _violations

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_the_time_to_drain_column_fits_and_is_axe_clean(stack, login, viewport):
    refs = [stack.new_ref("drain") for _ in range(3)]
    for ref in refs:
        stack.enqueue("echo", ref)
    wait_until("the echo jobs to run", lambda: set(refs) <= set(stack.marks("done")))
    page = login("viewer", viewport=viewport, bypass_csp=True)  # (axe is injected)
    for url, cell in (("/", "td.drain-cell[data-queue='default']"),
                      ("/groups/?queue=default", "th:text-is('Time to drain')")):
        page.goto(url)
        expect(page.locator(cell).first).to_be_attached(timeout=JOB_TIMEOUT_MS)
        if url == "/":
            expect(page.locator("th:text-is('Time to drain')")).to_have_count(1)
            assert page.locator(cell).first.inner_text().strip() != ""
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"{url} scrolls sideways: {widths}"
        assert _violations(page) == [], url
        screenshot(page, f"drain-{url.strip('/').split('?')[0] or 'overview'}-{viewport['width']}")
