"""The dashboard as it is used at 3 a.m., in a real Chromium: acting on a selection without a
page load, keyboard only, the dark scheme, a phone's 390 px.

Waits are Playwright's bounded ``expect`` or ``wait_until`` on Redis; no fixed sleeps.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import open_settings, screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000
PHONE = {"width": 390, "height": 844}


def _dead_jobs(stack, n: int, prefix: str = "order") -> tuple[list[str], list[str]]:
    refs = [stack.new_ref(prefix) for _ in range(n)]
    ids = [stack.enqueue("charge", ref) for ref in refs]
    wait_until(f"{n} charge jobs to fail", lambda: set(refs) <= set(stack.marks("failed")))
    queue = stack.client.queue("default")
    wait_until("them to be dead", lambda: all(queue.where(i) == ["dead"] for i in ids))
    return refs, ids


def _replay_entries(stack, ids: list[str]) -> list:
    targets = {f"default/{i}" for i in ids}
    return [e for e in stack.client.audit.list(limit=1000, action="dlq.replay")
            if e.target in targets]


def test_select_three_dead_jobs_and_replay_them_without_a_page_load(stack, login):
    refs, ids = _dead_jobs(stack, 3)
    stack.fix(*refs)
    page = login("operator")
    page.goto("/dlq/?queue=default&type=charge")
    for job_id in ids:
        expect(page.locator(f"#live tr[data-row='{job_id}']")).to_be_visible(
            timeout=JOB_TIMEOUT_MS)
    page.evaluate("window.__sameDocument = 'yes'")  # gone if the page loads again

    bar = page.locator("#live .action-bar")
    expect(bar.get_by_role("button", name="Replay selected")).to_be_disabled()
    for job_id in ids:
        page.get_by_role("checkbox", name=f"Select job {job_id}").check()
    expect(bar.locator(".count")).to_have_text("3 selected")
    bar.get_by_label("Reason").fill("gateway fixed, selection test")
    bar.get_by_role("button", name="Replay selected").click()

    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Replay 3 jobs?")
    screenshot(page, "dlq-selection-confirm")
    dialog.get_by_role("button", name="Confirm").click()

    expect(page.locator("#live .result[role=status]")).to_contain_text("3 jobs replayed")
    for job_id in ids:
        expect(page.locator(f"#live tr[data-row='{job_id}']")).to_have_count(0)
    assert page.evaluate("window.__sameDocument") == "yes"
    screenshot(page, "dlq-selection-replayed")

    entries = _replay_entries(stack, ids)
    assert len(entries) == 3
    assert {(e.user, e.reason, e.outcome) for e in entries} == {
        ("operator", "gateway fixed, selection test", "ok")}
    queue = stack.client.queue("default")
    wait_until("the worker to run the replayed jobs",
               lambda: all(queue.get(i).state == "done" for i in ids))


def _tab_to(page, predicate_js: str, *, backwards: bool = False, limit: int = 200) -> None:
    key = "Shift+Tab" if backwards else "Tab"
    for _ in range(limit):
        page.keyboard.press(key)
        if page.evaluate(f"(el => {predicate_js})(document.activeElement)"):
            return
    pytest.fail(f"focus never reached {predicate_js} with {key}")


def test_keyboard_only_replay_of_one_job(stack, login):
    refs, (job_id,) = _dead_jobs(stack, 1)
    stack.fix(*refs)
    page = login("operator")
    page.goto("/dlq/?queue=default&type=charge")
    expect(page.locator(f"#live tr[data-row='{job_id}']")).to_be_visible(timeout=JOB_TIMEOUT_MS)

    _tab_to(page, f"el.getAttribute('aria-label') === 'Select job {job_id}'")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none"), "the focused checkbox shows no focus ring"
    page.keyboard.press("Space")
    expect(page.get_by_role("checkbox", name=f"Select job {job_id}")).to_be_checked()
    _tab_to(page, "el.name === 'reason' && !!el.closest('.action-bar')", backwards=True)
    page.keyboard.type("keyboard only")
    _tab_to(page, "el.textContent.trim() === 'Replay selected'")
    page.keyboard.press("Enter")
    expect(page.locator("dialog#confirm")).to_be_visible()
    assert page.evaluate("document.activeElement.textContent.trim()") == "Confirm"
    page.keyboard.press("Enter")

    expect(page.locator("#live .result[role=status]")).to_contain_text("1 job replayed")
    expect(page.locator("#live .result")).to_be_focused()  # focus is not lost with the button
    expect(page.locator(f"#live tr[data-row='{job_id}']")).to_have_count(0)
    (entry,) = _replay_entries(stack, [job_id])
    assert entry.reason == "keyboard only" and entry.outcome == "ok"


def test_dark_scheme_when_the_browser_asks_and_the_toggle_is_remembered(stack, login):
    page = login("admin", color_scheme="dark")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(20, 24, 29)"
    plot = page.locator("#charts .plot .main-svg").first
    expect(plot).to_be_visible(timeout=JOB_TIMEOUT_MS)
    assert "29, 35, 41" in plot.evaluate("el => getComputedStyle(el).backgroundColor")
    screenshot(page, "overview-dark")

    open_settings(page)
    page.get_by_label("Theme").select_option("light")  # this browser's choice wins from now on
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(247, 248, 250)"
    expect(page.locator("#charts .plot .main-svg").first).to_be_visible(timeout=JOB_TIMEOUT_MS)
    assert "255, 255, 255" in page.locator("#charts .plot .main-svg").first.evaluate(
        "el => getComputedStyle(el).backgroundColor")


def test_times_switch_between_relative_utc_and_local(stack, login):
    _dead_jobs(stack, 1)
    page = login("operator", timezone_id="Asia/Kolkata")
    page.goto("/dlq/?queue=default&type=charge")
    when = page.locator("#live td time.when").first
    expect(when).to_have_text(re.compile(r"ago$|^just now$"), timeout=JOB_TIMEOUT_MS)
    assert when.get_attribute("title").endswith(" UTC")
    open_settings(page)
    page.get_by_label("Times").select_option("local")
    expect(when).to_have_attribute("title", re.compile(r"UTC\+05:30$"))
    page.reload()  # remembered
    expect(page.locator("#live td time.when").first).to_have_attribute(
        "title", re.compile(r"UTC\+05:30$"), timeout=JOB_TIMEOUT_MS)


def test_live_updates_can_be_paused(stack, login):
    page = login("operator")
    page.goto("/inflight/")
    expect(page.locator("#live p.asof time")).to_be_visible()
    open_settings(page)
    page.get_by_label("Live").select_option("0")
    first = page.locator("#live p.asof time").text_content()
    polls: list[str] = []
    page.on("request", lambda req: polls.append(req.url) if "/inflight/" in req.url else None)
    page.wait_for_timeout(5000)  # two poll periods: none may go out while paused
    assert polls == [] and page.locator("#live p.asof time").text_content() == first
    page.get_by_label("Live").select_option("2")
    expect(page.locator("#live p.asof time")).not_to_have_text(first, timeout=10_000)


TOO_WIDE_JS = """Array.from(document.querySelectorAll('body *'))
  .filter(el => !el.closest('.table-wrap') && el.getBoundingClientRect().right > window.innerWidth + 0.5)
  .slice(0, 8).map(el => el.tagName + '.' + el.className + ' ' + Math.round(el.getBoundingClientRect().right))"""
PHONE_PAGES = ["/", "/inflight/", "/scheduled/", "/dlq/", "/locks/", "/workers/",
               "/idempotency/", "/audit/", "/users/", "/incident/", "/errors/", "/purge/",
               "/types/"]


def test_no_page_scrolls_sideways_on_a_phone(stack, login):
    _, (dead_id,) = _dead_jobs(stack, 1)
    stack.enqueue("flaky_fetch", stack.new_ref("fetch"))
    page = login("admin", viewport=PHONE)
    expect(page.get_by_role("navigation")).to_be_hidden()  # collapsed behind "Menu"
    cards = page.locator("#live .cards").bounding_box()
    charts = page.locator("#charts").bounding_box()
    assert cards and charts and cards["y"] < charts["y"]  # the numbers come first
    page.get_by_role("button", name="Menu").click()
    expect(page.get_by_role("navigation").get_by_role("link", name="Dead letters")).to_be_visible()
    for url in PHONE_PAGES + [f"/dlq/default/{dead_id}"]:
        page.goto(url)
        page.wait_for_load_state("networkidle")
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], (f"{url} scrolls sideways at 390 px: {widths}; "
                                        f"too wide: {page.evaluate(TOO_WIDE_JS)}")
    screenshot(page, "phone-job")
    page.goto("/dlq/")
    screenshot(page, "phone-dlq")


def test_chart_ticks_do_not_repeat_and_the_numbers_are_a_table(stack, login):
    page = login("admin")
    asof = page.locator("#charts p.asof")
    # the pool's sampler records every 10 s: wait for three samples (a few tens of seconds)
    expect(asof).to_contain_text(re.compile(r"\b([3-9]|\d\d+) samples"), timeout=60_000)
    samples = int(re.search(r"(\d+) samples", asof.text_content()).group(1))
    expect(page.locator("#charts .plot .xtick text").first).to_be_visible()
    for plot in page.locator("#charts .plot").all():
        labels = plot.locator(".xtick text").all_text_contents()
        assert len(labels) >= 2 and len(labels) == len(set(labels)), labels
    figure = page.locator("#charts figure.chart").first
    assert "depth" in figure.get_attribute("aria-label")
    figure.get_by_text("Numbers as a table").click()
    table = figure.locator("details[open] table")
    expect(table.locator("thead th")).to_have_text(["Time (UTC)", "ready", "scheduled",
                                                    "inflight", "dead"])
    assert table.locator("tbody tr").count() >= samples
