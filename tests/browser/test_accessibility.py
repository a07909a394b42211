"""axe-core scans every dashboard page in Chromium, in the light and the dark scheme, and fails on
any violation of impact serious or critical. axe-core is vendored (``vendor/axe.min.js``, its
version and checksum in ``vendor/VERSIONS.md``) and injected into the page under test; the
context bypasses the dashboard's CSP for that one script (the pages themselves run under it)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import screenshot, wait_until

# one test scans every page (30 of them) with axe-core: minutes on a loaded machine
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

AXE = Path(__file__).with_name("vendor") / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"  # axe-core 4.14.1
BLOCKING = ("serious", "critical")
JOB_TIMEOUT_MS = 20_000


def _violations(page: Any) -> list[str]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found = page.evaluate("axe.run(document, {resultTypes: ['violations']})")["violations"]
    return [f"{v['impact']} {v['id']}: {v['help']} at "
            + ", ".join(str(n["target"]) for n in v["nodes"][:5])
            for v in found if v["impact"] in BLOCKING]


@pytest.fixture
def something_everywhere(stack):
    """A dead job, a scheduled retry, a running job and a held lock, so every table has rows
    (and the selection checkboxes and action bars are there to be checked)."""
    dead_ref, sched_ref, slow_ref = (stack.new_ref(p) for p in ("order", "fetch", "report"))
    dead_id = stack.enqueue("charge", dead_ref)
    stack.enqueue("flaky_fetch", sched_ref)
    slow_id = stack.enqueue("slow_report", slow_ref, seconds=60)
    c = stack.client  # a running flow (its member retries for a long while)
    flow = c.chord([c.spec("flaky_fetch", {"ref": f"{sched_ref}-f"},
                           idempotency_key=f"browser:a11y:flow:{sched_ref}")],
                   c.spec("echo", {"ref": f"{sched_ref}-c"},
                          idempotency_key=f"browser:a11y:close:{sched_ref}")).enqueue()
    lock = stack.client.locks.acquire("browser:a11y:1", 60_000, owner="browser-test")
    try:
        wait_until("the jobs to run", lambda: {dead_ref, sched_ref} <= set(stack.marks("failed"))
                   and slow_ref in stack.marks("started"))
        yield {"dead": dead_id, "slow": slow_id, "dead_ref": dead_ref, "flow": flow.id}
    finally:
        stack.client.locks.release(lock)


def test_the_vendored_axe_is_the_recorded_one():
    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_or_critical_violation_on_any_page(stack, login, chromium, something_everywhere,
                                                      scheme):
    made = something_everywhere
    pages = [
        ("/", "#live .cards"),
        ("/inflight/", f"tr[data-row='{made['slow']}']"),
        ("/inflight/?queue=default&sort=silent", f"tr[data-row='{made['slow']}']"),
        ("/scheduled/", "td.err:has-text('upstream 503')"),
        ("/schedules/", "tr[data-schedule='nightly_digest']"),
        ("/dlq/", f"tr[data-row='{made['dead']}']"),
        (f"/dlq/default/{made['dead']}", "dl.facts"),
        (f"/jobs/default/{made['slow']}", "#timeline tr.event"),  # the job page
        ("/account", "form input[type='password']"),
        ("/locks/", "code:text-is('browser:a11y:1')"),
        ("/incident/", "#live p.asof"),
        (f"/jobs/default/{made['dead']}/edit", "textarea#payload"),
        ("/errors/?queue=default", "table.error-groups td.sig"),
        ("/purge/", "p.dry-run"),
        ("/workers/", "td:text-is('running')"),
        (f"/idempotency/?key=browser:charge:{made['dead_ref']}", "dl.facts"),
        ("/audit/", "td:text-is('login')"),
        ("/users/", "td:text-is('viewer')"),
        # the finder: search results, browse pages
        (f"/find?q=ref={made['dead_ref']}", "td.search-done"),
        ("/browse/default/dead", f"tr[data-row='{made['dead']}']"),
        ("/browse/default/ready", "table.browse"),
        # per-key turns and groups
        ("/groups/?queue=default", "form[role='search']"),
        ("/browse/default/waiting", "table.browse"),
        ("/groups/default/tenant:a11y", "dl.facts"),
        # performance per job type
        ("/types/", "tr[data-type='charge']"),
        ("/types/charge?window=1h", "figure.chart .plot"),
        # flows
        ("/flows/?queue=default", f"tr[data-flow='{made['flow']}']"),
        (f"/flows/default/{made['flow']}", "ol.flow-dag .flow-job"),
    ]
    problems: dict[str, list[str]] = {}

    anon = chromium.new_context(base_url=stack.base_url, color_scheme=scheme, bypass_csp=True)
    try:
        login_page = anon.new_page()
        login_page.goto("/login")
        problems["/login"] = _violations(login_page)
    finally:
        anon.close()

    page = login("admin", color_scheme=scheme, bypass_csp=True)
    assert page.evaluate("document.documentElement.dataset.theme") == scheme
    expect(page.locator("#charts .plot").first).to_be_visible(timeout=JOB_TIMEOUT_MS)
    page.get_by_text("Numbers as a table").first.click()  # the charts' text alternative
    expect(page.locator("#charts details[open] table").first).to_be_visible()
    for url, content in pages:
        if url != "/":
            page.goto(url)
        expect(page.locator(content).first).to_be_visible(timeout=JOB_TIMEOUT_MS)
        problems[url] = _violations(page)

    # the confirmation dialog, open over the dead-letter queue
    page.goto("/dlq/")
    page.get_by_role("checkbox", name=f"Select job {made['dead']}").check()
    page.locator("#live .action-bar").get_by_role("button", name="Discard selected").click()
    expect(page.locator("dialog#confirm")).to_be_visible()
    problems["/dlq/ (dialog open)"] = _violations(page)
    screenshot(page, f"a11y-dialog-{scheme}")
    page.locator("dialog#confirm").get_by_role("button", name="Go back").click()
    expect(page.locator("dialog#confirm")).to_be_hidden()

    bad = {url: found for url, found in problems.items() if found}
    assert not bad, f"axe-core ({scheme} scheme):\n" + "\n".join(
        f"{url}:\n  " + "\n  ".join(found) for url, found in bad.items())
