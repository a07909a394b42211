"""The incident view in Chromium: a burst of dead letters fires the DLQ
alert; the header (one row at 1280 px) counts it and opens the incident view, where the card
shows the top error group and the action that helps; the operator acknowledges it with a
reason and the count drops. Screenshots at 1280x800 (light, dark) and 390x844 of the incident
view, DLQ, in-flight, job, locks and groups pages: their first screen shows data rows, not
banners."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from antre.observe.alerts import AlertEngine, AlertQuiet, AlertThresholds
from antre.groups.control import GroupControl

from .conftest import SCREENSHOTS, screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def dlq_spike(stack):
    """12 dead ``charge`` jobs in a few seconds (the DLQ rule fires above 10 in 5 min), a
    running report and a held lock with a long key, so each page has rows."""
    # a clean slate for the rule: no silence or per-queue threshold left by an earlier test
    AlertQuiet(stack.r).clear("dlq_growth|default")
    AlertThresholds(stack.r).set("default", "dlq_growth_max", "")
    engine = AlertEngine(stack.r, rules=stack.client.alert_config.rules())
    engine.check()  # a point before the burst
    refs = [stack.new_ref("spike") for _ in range(12)]
    ids = [stack.enqueue("charge", ref) for ref in refs]
    slow_ref = stack.new_ref("report")
    slow_id = stack.enqueue("slow_report", slow_ref, seconds=60)
    lock = stack.client.locks.acquire("tenant:eu-west-1:invoice:2026-12:" + "x" * 90, 60_000,
                                      owner="browser-test")
    # a group an operator holds (0 slots): its jobs wait in its line, a row on the Groups page
    groups = GroupControl(stack.r)
    groups.set_slots("default", "tenant:shots", 0, "browser-test", "held for the screenshots")
    for i in range(3):
        stack.client.enqueue("echo", {"ref": stack.new_ref("held")},
                             idempotency_key=f"browser:held:{stack.new_ref('k')}",
                             group="tenant:shots")
    try:
        wait_until("the burst to fail", lambda: set(refs) <= set(stack.marks("failed"))
                   and slow_ref in stack.marks("started"))
        # the handler marks a job failed before the worker buries it (its batch settles after):
        # the rule counts burials, so wait for all 12 dead (a readiness bound, not a timing: a
        # loaded CI machine settles slowly)
        q = stack.client.queue()
        wait_until("the burst to be dead-lettered", lambda: all(
            q.get(i) is not None and q.get(i).state == "dead" for i in ids), timeout=60.0)
        wait_until("the alert to fire", lambda: any(
            e.rule == "dlq_growth" for e in engine.check()) or any(
            a.id == "dlq_growth|default" for a in engine.active()), timeout=60.0)
        yield {"dead": ids[0], "slow": slow_id}
    finally:
        stack.client.locks.release(lock)
        groups.clear_slots("default", "tenant:shots")
        stack.r.delete("antre:{alerts}:quiet")
        AlertQuiet(stack.r).clear("dlq_growth|default")


def _first_row_on_first_screen(page, selector: str, height: int) -> None:
    row = page.locator(selector).first
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)
    box = row.bounding_box()
    assert box and box["y"] + box["height"] <= height, (selector, box)


def test_the_header_count_opens_the_incident_view_and_ack_quiets_it(stack, login, dlq_spike):
    page = login("operator", viewport=DESKTOP)
    header = page.locator("header.top").bounding_box()
    assert header and header["height"] < 60, header  # one row at 1280 px
    count = page.locator("header a.incident-count")
    expect(count).to_have_class("incident-count critical")
    count.click()
    expect(page.get_by_role("heading", name="Incidents")).to_be_visible()
    card = page.locator("article.incident[data-incident='dlq_growth|default']")
    expect(card).to_contain_text("Dead letters growing")
    expect(card.locator("table.groups")).to_contain_text("card declined for ref")
    _first_row_on_first_screen(page, "article.incident[data-incident='dlq_growth|default']", 800)
    replay = card.get_by_role("link", name="Replay this error group")
    assert "group=" in (replay.get_attribute("href") or "")
    screenshot(page, "incident-view-1280-light")

    card.get_by_label("why, for the audit log", exact=False).fill("psp ticket 42, browser test")
    card.get_by_role("button", name="Acknowledge").click()
    expect(page.locator(".flash.ok")).to_contain_text("acknowledged until it resolves")
    quiet = page.locator("article.incident[data-incident='dlq_growth|default'] .quiet")
    expect(quiet).to_contain_text("Acknowledged by operator")
    expect(quiet).to_contain_text("psp ticket 42, browser test")
    expect(page.locator("header a.incident-count .count")).not_to_have_attribute(
        "data-count", str(int(count.locator(".count").get_attribute("data-count") or 0) + 1))
    entry = [e for e in stack.client.audit.list(limit=50, action="incident.ack")][0]
    assert (entry.user, entry.outcome) == ("operator", "ok")


@pytest.mark.parametrize("scheme,viewport", [("light", DESKTOP), ("dark", DESKTOP),
                                             ("light", PHONE)])
def test_first_screens_show_rows_not_banners(stack, login, dlq_spike, scheme, viewport):
    page = login("operator", viewport=viewport, color_scheme=scheme)
    tag = f"{viewport['width']}-{scheme}"
    h = viewport["height"]
    pages = [
        ("/incident/", "article.incident"),
        ("/dlq/?queue=default", "#live tbody tr[data-row]"),  # the newest dead job
        ("/inflight/?queue=default", "#live tbody tr[data-row]"),  # the first lease
        (f"/jobs/default/{dlq_spike['dead']}", "dl.facts"),
        ("/locks/", "#live table.grid tbody tr"),
        ("/groups/?queue=default", "tr[data-group='tenant:shots']"),
    ]
    for url, row in pages:
        page.goto(url)
        expect(page.locator("main .banner.alert")).to_have_count(0)
        _first_row_on_first_screen(page, row, h)
        name = url.strip("/").split("?")[0].split("/")[0] or "home"
        shot = screenshot(page, f"first-screen-{name}-{tag}")
        page.screenshot(path=str(SCREENSHOTS / f"{shot.stem}-viewport.png"))  # the first screen
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], (url, widths)
    page.goto("/incident/")
    count = page.locator("article.incident table.groups td[data-label='Dead now']").first
    box = count.bounding_box()
    assert box and box["x"] + box["width"] <= viewport["width"], box  # the count stays in view
    if viewport["width"] >= 1280:
        page.goto("/locks/")
        release = page.locator("#live table.grid tbody tr").first.get_by_role(
            "button", name="Release")
        box = release.bounding_box()
        assert box and box["x"] + box["width"] <= viewport["width"], box  # stays on screen
