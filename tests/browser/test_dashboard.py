"""The dashboard in a real Chromium, against gunicorn, Redis and a real worker pool.

Every wait is Playwright's bounded auto-waiting ``expect`` (the pages refresh themselves by
htmx polling every 2 s) or ``wait_until`` on Redis; no fixed sleeps.
"""

from __future__ import annotations

import re
import time

import pytest

from antre.observe.registry import WorkerRegistry
from playwright.sync_api import expect

from .conftest import nav_link, screenshot, wait_until

pytestmark = pytest.mark.browser

JOB_TIMEOUT_MS = 20_000


def _dead_row(page, job_id: str):
    return page.locator("#live table.grid tbody tr", has=page.locator(f"code:text-is('{job_id}')"))


def test_operator_replays_a_job_that_really_failed(stack, login):
    ref = stack.new_ref("order")
    job_id = stack.enqueue("charge", ref)
    wait_until("the worker to run and fail the charge job", lambda: ref in stack.marks("failed"))

    page = login("operator")
    page.get_by_role("navigation").get_by_role("link", name="Dead letters").click()
    expect(page.get_by_role("heading", name="Dead-letter queue")).to_be_visible()
    row = _dead_row(page, job_id)
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)  # the live region polls every 2 s
    expect(row).to_contain_text("charge")
    expect(row).to_contain_text(f"card declined for ref {ref}")
    expect(row.get_by_role("checkbox", name=f"Select job {job_id}")).to_be_visible()
    screenshot(page, "dlq")

    row.get_by_role("link", name=job_id).click()
    expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    facts = page.locator("#live dl.facts")
    expect(facts).to_contain_text("dead")
    attempts = page.locator("#live article.attempt")
    expect(attempts.first).to_contain_text(f"card declined for ref {ref}")
    expect(attempts.first.locator("summary", has_text="Traceback")).to_be_visible()
    screenshot(page, "dlq-detail")

    stack.fix(ref)  # the bug behind the failure is fixed: the next run succeeds
    page.locator("#live").get_by_placeholder("reason (for the audit log)").first.fill(
        "gateway fixed, browser test")
    page.get_by_role("button", name="Replay this job").click()
    expect(page.locator(".flash.ok")).to_contain_text(f"job {job_id} replayed")

    # the worker really takes it again, and this time it succeeds
    queue = stack.client.queue("default")
    wait_until("the worker to settle the replayed job",
               lambda: queue.get(job_id).state in ("done", "dead"))
    job = queue.get(job_id)
    assert job.state == "done", f"replayed job ended {job.state}: {job.reason}"
    assert ref in stack.marks("done")
    expect(page.locator("#live dl.facts .tag").first).to_have_text("done",
                                                                   timeout=JOB_TIMEOUT_MS)
    expect(page.locator("#live dl.facts")).to_contain_text("completed")  # idempotency status
    screenshot(page, "dlq-detail-after-replay")

    page.goto("/dlq/")
    expect(_dead_row(page, job_id)).to_have_count(0)


def test_paced_bulk_replay_shows_progress(stack, login):
    refs = [stack.new_ref("sync") for _ in range(5)]
    ids = [stack.enqueue("sync_record", ref) for ref in refs]
    wait_until("five sync_record jobs to fail",
               lambda: set(refs) <= set(stack.marks("failed")))

    page = login("operator")
    page.goto("/dlq/?queue=default&type=sync_record")
    expect(page.locator("p.dry-run")).to_contain_text("Dry run: 5 dead jobs match type=sync_record",
                                                      timeout=JOB_TIMEOUT_MS)
    stack.fix(*refs)
    form = page.locator("form.box", has=page.get_by_role("heading", name="Replay at a bounded rate"))
    form.get_by_label("Rate").fill("1")
    form.get_by_placeholder("reason (for the audit log)").fill("upstream back, browser test")
    form.get_by_role("button", name="Start replay of 5 jobs").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Start replaying 5 dead jobs?")
    dialog.get_by_role("button", name="Confirm").click()
    expect(page.locator(".flash.ok")).to_contain_text("5 jobs match")
    expect(page.locator(".flash.ok")).to_contain_text("at 1 jobs/s")

    task = page.locator("#bulk tbody tr[data-task]").first
    expect(task).to_contain_text("operator")
    expect(task).to_contain_text("upstream back, browser test")
    # paced: seen part-way (1 job/s, progress polled every 2 s) before it is done
    part_way = (page.locator("#bulk tbody tr.state-running")
                .filter(has_text=re.compile(r"\b[1-4] replayed / 5\b"))
                .filter(has=page.get_by_role("button", name="Pause")))
    expect(part_way).to_have_count(1, timeout=JOB_TIMEOUT_MS)
    screenshot(page, "dlq-bulk-replay-running")
    expect(task).to_contain_text("5 replayed / 5", timeout=JOB_TIMEOUT_MS)
    expect(task.locator(".tag")).to_have_text("done")
    expect(task.locator("progress")).to_have_attribute("value", "5")

    # each job really went back to the ready list (whether it then succeeds is the single-job
    # replay test's business)
    queue = stack.client.queue("default")
    replays = [int(stack.r.hget(queue.keys.job(j), "replays") or 0) for j in ids]
    assert replays == [1] * 5
    screenshot(page, "dlq-bulk-replay-done")


def _deadline_ms(row) -> int:
    return int(row.locator(".countdown").get_attribute("data-deadline"))


def _extend_selected(page, job_id: str, seconds: int, reason: str) -> None:
    """Tick the job, extend the selection by ``seconds`` from the action bar, confirm."""
    page.get_by_role("checkbox", name=f"Select job {job_id}").check()
    bar = page.locator("#live .action-bar")
    bar.get_by_label("Reason").fill(reason)
    bar.get_by_label("Extend by").fill(str(seconds))
    bar.get_by_role("button", name="Extend selected").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator("#live .result.ok")).to_contain_text("1 job extended")


def test_operator_extends_a_running_lease(stack, login):
    ref = stack.new_ref("report")
    job_id = stack.enqueue("slow_report", ref, seconds=20)
    wait_until("the slow job to start", lambda: ref in stack.marks("started"))

    page = login("operator")
    page.get_by_role("navigation").get_by_role("link", name="In flight").click()
    expect(page.get_by_role("heading", name="In-flight leases")).to_be_visible()
    row = page.locator(f"#live tr[data-row='{job_id}']")
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)
    expect(row).to_contain_text("slow_report")
    expect(row.locator(".countdown")).to_have_text(re.compile(r"^\d+(\.\d)?s$|^1m\d\ds$"))
    screenshot(page, "inflight")
    before = _deadline_ms(row)

    _extend_selected(page, job_id, 600, "needs more time, browser test")
    # the refreshed rows show the new deadline: about 10 minutes later
    row = page.locator(f"#live tr[data-row='{job_id}']")
    expect(row.locator(".countdown")).to_have_text(re.compile(r"^1[01]m\d\ds$"))
    after = _deadline_ms(row)
    assert after - before >= 590_000, (before, after)
    screenshot(page, "inflight-extended")

    # the audit log has the deadline before and after
    nav_link(page, "Audit log").click()
    entry = page.locator("#live tbody tr", has_text="inflight.extend").first
    expect(entry).to_contain_text(f"default/{job_id}")
    expect(entry).to_contain_text("needs more time, browser test")
    expect(entry.locator(".tag")).to_have_text("ok")


def test_extended_lease_survives_the_next_heartbeat(stack, login):
    ref = stack.new_ref("report")
    job_id = stack.enqueue("slow_report", ref, seconds=15)
    wait_until("the slow job to start", lambda: ref in stack.marks("started"))

    page = login("operator")
    page.goto("/inflight/")
    row = page.locator(f"#live tr[data-row='{job_id}']")
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)
    _extend_selected(page, job_id, 600, "")
    key = stack.client.queue("default").keys.job(job_id)
    extended = int(stack.r.hget(key, "deadline"))
    extended_at = int(time.time() * 1000)
    # two heartbeats of the worker holding the job later, the lease still ends where the
    # operator put it (a heartbeat extends to now + visibility timeout only when that is later)
    registry = WorkerRegistry(stack.r)

    def beaten_twice() -> bool:
        holders = [w for w in registry.list() if job_id in w.current]
        return bool(holders) and holders[0].heartbeat_at > extended_at + 1500

    wait_until("two worker heartbeats after the extension", beaten_twice, timeout=10)
    assert int(stack.r.hget(key, "deadline")) == extended


ACTION_LABELS = re.compile(r"Replay|Discard|Extend|Run now|Release|Start replay|Pause|Resume|"
                           r"Cancel|Set|Delete|Add|Disable|Enable")


def test_viewer_finds_no_action_buttons(stack, login):
    # something to act on on every page: a dead job, a scheduled retry, a running job, a lock
    dead_ref, sched_ref, slow_ref = (stack.new_ref(p) for p in ("order", "fetch", "report"))
    dead_id = stack.enqueue("charge", dead_ref)
    stack.enqueue("flaky_fetch", sched_ref)
    slow_id = stack.enqueue("slow_report", slow_ref, seconds=12)
    lock = stack.client.locks.acquire("browser:invoice:42", 60_000, owner="browser-test")
    try:
        wait_until("the jobs to run", lambda: {dead_ref, sched_ref} <= set(stack.marks("failed"))
                   and slow_ref in stack.marks("started"))
        page = login("viewer")
        nav = page.get_by_role("navigation")
        expect(nav.get_by_role("link", name="Users")).to_have_count(0)
        pages = [
            ("/", "Overview", None),
            ("/inflight/", "In-flight leases", f"tr[data-row='{slow_id}']"),
            ("/scheduled/", "Scheduled retries", "td.err:has-text('upstream 503')"),
            ("/dlq/", "Dead-letter queue", f"code:text-is('{dead_id}')"),
            (f"/dlq/default/{dead_id}", f"Job {dead_id}", "dl.facts"),
            ("/locks/", "Locks", "code:text-is('browser:invoice:42')"),
            ("/workers/", "Workers", "td:text-is('running')"),
            ("/idempotency/?key=browser:charge:" + dead_ref, "Idempotency lookup", "dl.facts"),
            ("/audit/", "Audit log", "td:text-is('login')"),
        ]
        for url, heading, content in pages:
            page.goto(url)
            expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
            if content:
                expect(page.locator(content).first).to_be_visible(timeout=JOB_TIMEOUT_MS)
            # no form that changes anything, except logging out
            expect(page.locator("form[method=post]:not(.who)")).to_have_count(0)
            expect(page.get_by_role("button", name=ACTION_LABELS)).to_have_count(0)
            expect(page.locator("input[name=reason]")).to_have_count(0)
        screenshot(page, "viewer-audit")

        # pages for admins are refused, not just hidden
        page.goto("/users/")
        expect(page.get_by_role("heading", name=re.compile("Not allowed"))).to_be_visible()
        screenshot(page, "viewer-users-refused")
    finally:
        stack.client.locks.release(lock)


def test_admin_disables_a_user_whose_open_session_then_ends(stack, login):
    viewer = login("viewer")
    admin = login("admin")

    def viewer_row():
        admin.goto("/users/")
        return admin.locator("tbody tr").filter(
            has=admin.locator("td:first-child", has_text=re.compile(r"^viewer")))

    try:
        row = viewer_row()
        form = row.locator("form[action$='/disable']")
        form.get_by_placeholder("reason (for the audit log)").fill("left the team, browser test")
        form.get_by_role("button", name="Disable").click()
        expect(admin.get_by_role("status")).to_contain_text("user viewer disabled")
        expect(viewer_row().locator(".tag", has_text="disabled")).to_be_visible()
        screenshot(admin, "admin-user-disabled")
        viewer.goto("/")  # the viewer's open session ends on its next request
        expect(viewer.get_by_role("heading", name="Log in")).to_be_visible()
    finally:
        row = viewer_row()
        if row.locator("form[action$='/enable']").count():
            row.locator("form[action$='/enable']").get_by_role("button", name="Enable").click()
            expect(admin.get_by_role("status")).to_contain_text("user viewer enabled")
    login("viewer")  # and the account works again


def test_every_page_for_the_record(stack, login):
    """An admin's tour of every page, with a screenshot of each (test artifacts)."""
    dead_ref, sched_ref = stack.new_ref("order"), stack.new_ref("fetch")
    dead_id = stack.enqueue("charge", dead_ref)
    stack.enqueue("flaky_fetch", sched_ref)
    slow_id = stack.enqueue("slow_report", stack.new_ref("report"), seconds=10)
    lock = stack.client.locks.acquire("browser:invoice:7", 60_000, owner="browser-test")
    try:
        wait_until("the jobs to run", lambda: {dead_ref, sched_ref} <= set(stack.marks("failed")))
        page = login("admin")
        expect(page.locator("#charts .plot").first).to_be_visible(timeout=JOB_TIMEOUT_MS)
        expect(page.locator("#live .cards")).to_be_visible()
        screenshot(page, "overview")
        tour = [
            ("In flight", "In-flight leases", f"tr[data-row='{slow_id}']"),
            ("Scheduled", "Scheduled retries", "td.err:has-text('upstream 503')"),
            ("Dead letters", "Dead-letter queue", f"code:text-is('{dead_id}')"),
            ("Locks", "Locks", "code:text-is('browser:invoice:7')"),
            ("Workers", "Workers", "td:text-is('running')"),
            ("Idempotency", "Idempotency lookup", "p.note"),
            ("Audit log", "Audit log", "td:text-is('login')"),
            ("Users", "Users", "td:text-is('viewer')"),
        ]
        for link, heading, content in tour:
            nav_link(page, link).click()
            expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
            expect(page.locator(content).first).to_be_visible(timeout=JOB_TIMEOUT_MS)
            screenshot(page, heading.lower())
        page.goto(f"/dlq/default/{dead_id}")
        expect(page.get_by_role("heading", name=f"Job {dead_id}")).to_be_visible()
        screenshot(page, "dlq-detail-admin")
        page.goto(f"/idempotency/?key=browser:charge:{dead_ref}")
        expect(page.locator("dl.facts")).to_contain_text("failed")
        screenshot(page, "idempotency-lookup-key")
    finally:
        stack.client.locks.release(lock)


def test_operator_pauses_and_runs_a_schedule_now(stack, login):
    page = login("operator")
    nav_link(page, "Schedules").click()
    expect(page.get_by_role("heading", name="Schedules", exact=True)).to_be_visible()
    row = page.locator("#live tr[data-schedule='nightly_digest']")
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)  # published by the worker's duty
    expect(row).to_contain_text("cron 0 3 1 1 * (UTC)")
    row.get_by_placeholder("reason (for the audit log)").last.fill("quiet period")
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash.ok")).to_contain_text("schedule nightly_digest paused")
    row = page.locator("#live tr[data-schedule='nightly_digest']")
    expect(row).to_contain_text("paused by operator")

    row.get_by_role("button", name="Run now").click()
    expect(page.locator(".flash.ok")).to_contain_text("enqueued now")
    # the worker pool really runs it; the live region shows the run and its outcome
    row = page.locator("#live tr[data-schedule='nightly_digest']")
    expect(row.locator("td.outcome")).to_contain_text("done", timeout=JOB_TIMEOUT_MS)
    assert any(m.startswith("digest:") for m in stack.marks("done"))
    screenshot(page, "schedules")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator(".flash.ok")).to_contain_text("resumed")
