"""The dashboard mounted in a real host app (``examples/flask_host.py`` under gunicorn), in
Chromium: the host's own login page lets the operator in, the dashboard's pages, static files
and htmx polls answer under ``/antre/``, a replay is a CSRF POST audited under the host's user,
and the host's logout ends access."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from antre import Antre
from antre.embedded import free_port
from .conftest import (LOGS, REPO, SECRET_KEY, START_TIMEOUT_S, _http_status, _stop,
                       open_settings, screenshot, wait_until)


@pytest.fixture(scope="module")
def host_server(chromium_path: str, browser_redis: Any,
                tmp_path_factory: Any) -> Iterator[tuple[str, Antre]]:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('mounted') / 'antre.db'}"
    client = Antre(browser_redis.url, database_url)
    port = free_port()
    env = {**os.environ, "ANTRE_REDIS_URL": browser_redis.url, "ANTRE_DATABASE_URL": database_url,
           "ANTRE_SECRET_KEY": SECRET_KEY, "HOST_SECRET_KEY": "h" * 16 + SECRET_KEY,
           "PYTHONUNBUFFERED": "1"}
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / "mounted-host.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "1", "-b",
                                 f"127.0.0.1:{port}", "examples.flask_host:create_host()"],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("the host app to answer on /login",
                   lambda: proc.poll() is None and _http_status(base + "/login") == 200,
                   START_TIMEOUT_S)
        yield base, client
    finally:
        _stop(proc)
        client.redis.close()


def _dead_job(client: Antre) -> str:
    q = client.queue("default")
    job_id = q.enqueue("charge", {"ref": "mounted-1"}, idempotency_key="mounted:charge:1")
    (job,) = q.reserve("w-mounted")
    q.bury(job, reason="permanent failure", error="card declined", traceback="Traceback: x")
    return job_id


def test_the_mounted_dashboard_in_chromium_with_the_hosts_login(host_server, chromium):
    from playwright.sync_api import expect

    base, client = host_server
    job_id = _dead_job(client)
    ctx = chromium.new_context(base_url=base, viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(15_000)
    problems: list[str] = []
    page = ctx.new_page()
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}")
            if r.status >= 500 or (r.status == 404 and "/static/" in r.url) else None)
    try:
        page.goto(f"/antre/dlq/default/{job_id}")
        expect(page.get_by_role("heading", name="Host app login")).to_be_visible()
        assert "next=%2Fantre%2Fdlq%2Fdefault" in page.url
        page.get_by_label("User").fill("alice")
        page.get_by_label("Password").fill("letmein")
        page.get_by_role("button", name="Log in to the host").click()
        page.wait_for_url(f"**/antre/dlq/default/{job_id}")
        expect(page.locator("header .who")).to_contain_text("alice (operator)")
        color = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert color not in ("", "rgba(0, 0, 0, 0)")  # antre.css came from /antre/static/
        with page.expect_response(lambda r: "/antre/dlq/default/" in r.url
                                  and r.request.headers.get("hx-request") == "true"
                                  and r.status == 200, timeout=10_000):
            pass  # the live region polls itself under the prefix
        page.locator("#live").get_by_placeholder("reason (for the audit log)").first.fill(
            "mounted browser test")
        page.get_by_role("button", name="Replay this job").click()
        expect(page.locator(".flash.ok")).to_contain_text(f"job {job_id} replayed")
        screenshot(page, "mounted-dlq-after-replay")
        assert client.queue("default").get(job_id).state == "ready"
        (entry,) = [e for e in client.audit.list(limit=50, action="dlq.replay")
                    if e.outcome == "ok"]
        assert (entry.user, entry.role, entry.reason) == ("alice", "operator",
                                                          "mounted browser test")
        open_settings(page)
        page.get_by_role("link", name="Log out").click()  # the host's logout
        page.goto("/antre/")
        expect(page.get_by_role("heading", name="Host app login")).to_be_visible()
    finally:
        ctx.close()
    assert not problems, problems
