"""Browser tests: Playwright drives a real Chromium against the dashboard served by gunicorn
(``python -m antre_cli web``), with a real Redis (the session's ``redis_server``), a SQLite
database for users and the audit log, and a real worker pool (``python -m antre_cli worker``,
scheduler included: sweeper, sampler, bulk replay stepper; its workers promote due jobs).

One stack per session (starting it is the slow part); the tests use job references of their
own so they do not depend on each other. Screenshots go to ``test-artifacts/screenshots/``;
the server and worker logs to ``test-artifacts/browser-logs/``.

Chromium is Debian's ``/usr/bin/chromium`` (``playwright install`` cannot download here): the
tests skip without it, and fail under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from urllib.parse import urlparse
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from antre import Antre
from antre.embedded import EmbeddedRedis, free_port

REPO = Path(__file__).resolve().parents[2]
APP_PATH = "tests.browser.app_under_test:app"
ARTIFACTS = REPO / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
LOGS = ARTIFACTS / "browser-logs"
CHROMIUM = os.environ.get("ANTRE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
IN_CI = os.environ.get("CI", "").lower() == "true"
SECRET_KEY = "browser-tests-fixed-secret-key-0123456789abcdef"
PASSWORDS = {"operator": "operator-pass-1", "viewer": "viewer-pass-1", "admin": "admin-pass-1"}
START_TIMEOUT_S = 120.0  # a readiness bound, not a timing: a loaded CI machine starts gunicorn slowly


def _skip_or_fail(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: browser tests must run)")
    pytest.skip(reason)


def wait_until(what: str, check: Callable[[], Any], timeout: float = 20.0,
               interval: float = 0.1) -> Any:
    """Bounded polling: ``check()``'s first truthy value, else fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _load_test_app() -> Antre:
    """The handlers of ``app_under_test`` (for their enqueue defaults), imported by file path so
    the test process does not depend on how pytest set up ``sys.path``."""
    path = Path(__file__).with_name("app_under_test.py")
    spec = importlib.util.spec_from_file_location("_antre_browser_app_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


@dataclass
class Stack:
    base_url: str
    redis_url: str
    database_url: str
    client: Antre
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_paths: dict[str, Path] = field(default_factory=dict)

    @property
    def r(self) -> redis.Redis:
        return self.client.redis

    def new_ref(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def enqueue(self, job_type: str, ref: str, **payload: Any) -> str:
        return self.client.enqueue(job_type, {"ref": ref, **payload},
                                   idempotency_key=f"browser:{job_type}:{ref}")

    def fix(self, *refs: str) -> None:
        """'Deploy the fix': the failing handlers succeed for these refs from now on."""
        self.r.sadd("browser:fixed", *refs)

    def marks(self, what: str) -> list[str]:
        return self.r.lrange(f"browser:{what}", 0, -1)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_paths.get(name)
        if not path or not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not os.path.exists(CHROMIUM):
        _skip_or_fail(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _skip_or_fail("playwright is not installed (pip install playwright)")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser_redis(tmp_path_factory) -> Iterator[EmbeddedRedis]:
    """A Redis of the browser tests' own: their worker pool must not take other tests' jobs."""
    server = EmbeddedRedis(data_dir=str(tmp_path_factory.mktemp("browser-redis")), tcp=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(chromium_path, browser_redis, tmp_path_factory) -> Iterator[Stack]:
    """gunicorn + a worker pool on a private Redis and a fresh SQLite file."""
    redis_url = browser_redis.url
    tmp = tmp_path_factory.mktemp("browser")
    database_url = f"sqlite:///{tmp / 'antre.db'}"

    client = Antre(redis_url, database_url)
    client.handlers = dict(_load_test_app().handlers)
    for name, password in PASSWORDS.items():
        client.users.add(name, name, password)  # creates the schema before the servers start

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink()
    LOGS.mkdir(parents=True, exist_ok=True)

    port = free_port()
    env = {**os.environ, "ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": database_url,
           "ANTRE_SECRET_KEY": SECRET_KEY, "PYTHONUNBUFFERED": "1"}
    env.pop("ANTRE_SECURE_COOKIES", None)
    commands = {
        "web": [sys.executable, "-m", "antre_cli", "web", APP_PATH, "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1"],
        "worker": [sys.executable, "-m", "antre_cli", "worker", APP_PATH, "--processes", "1",
                   "--threads", "4", "--grace", "2"],
    }
    st = Stack(f"http://127.0.0.1:{port}", redis_url, database_url, client)
    try:
        for name, cmd in commands.items():
            log_path = LOGS / f"{name}.log"
            st.log_paths[name] = log_path
            with open(log_path, "wb") as log:
                st.procs[name] = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log,
                                                  stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL,
                                                  start_new_session=True)

        def login_page_up() -> bool:
            st.check_alive()
            return _http_status(st.base_url + "/login") == 200
        wait_until("the dashboard to answer 200 on /login", login_page_up, START_TIMEOUT_S)

        probe = st.new_ref("probe")
        st.enqueue("echo", probe)

        def probe_done() -> bool:
            st.check_alive()
            return probe in st.marks("done")
        wait_until("the worker pool to run a probe job", probe_done, START_TIMEOUT_S)
        yield st
    finally:
        for proc in st.procs.values():
            _stop(proc)
        client.redis.close()
        if client.engine is not None:
            client.engine.dispose()


@pytest.fixture(scope="package")
def chromium(chromium_path) -> Iterator[Any]:
    """One Chromium for the browser tests, stopped when they end: Playwright's sync API keeps an
    event loop running on the main thread while it is started, where ``asyncio.run`` (the
    hooks, the docs' examples, the async worker) refuses to start."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


_SHOT_COUNTER = {"n": 0}


def screenshot(page: Any, name: str) -> Path:
    """A full-page screenshot in ``test-artifacts/screenshots/NN-name.png``."""
    _SHOT_COUNTER["n"] += 1
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
    path = SCREENSHOTS / f"{_SHOT_COUNTER['n']:02d}-{safe}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def login(stack, chromium) -> Iterator[Callable[[str], Any]]:
    """``login("operator")``: a fresh browser context, logged in; returns its page.
    ``login("admin", color_scheme="dark", viewport={...})`` passes context options on."""
    from playwright.sync_api import expect

    contexts: list[Any] = []
    errors: list[str] = []

    def do(role: str, **options: Any) -> Any:
        """``options``: Playwright context options (``color_scheme="dark"``, ``viewport``...)."""
        options = {"viewport": {"width": 1400, "height": 900}, **options}
        ctx = chromium.new_context(base_url=stack.base_url, **options)
        ctx.set_default_timeout(15_000)
        contexts.append(ctx)
        page = ctx.new_page()
        page.on("pageerror", lambda exc: errors.append(f"{role}: {exc}"))
        page.on("console", lambda msg: errors.append(f"{role}: console {msg.text}")
                if msg.type == "error" and "Failed to load resource" not in msg.text else None)
        page.on("response", lambda resp: errors.append(f"{role}: {resp.status} {resp.url}")
                if resp.status >= 500 or (resp.status == 404 and "/static/" in resp.url)
                else None)
        page.goto("/login")
        page.get_by_label("User").fill(role)
        page.get_by_label("Password").fill(PASSWORDS[role])
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("header .who")).to_contain_text(f"{role} ({role})")
        if urlparse(page.url).path != "/":  # a critical incident is open: it lands there
            expect(page).to_have_url(re.compile(r"/incident/$"))
            page.goto("/")  # each test starts from the overview
        expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        return page

    yield do
    for ctx in contexts:
        ctx.close()
    stack.check_alive()
    assert not errors, "errors in the page:\n" + "\n".join(errors)


def nav_link(page: Any, name: str) -> Any:
    """The header's link to page ``name``, its "More" menu opened when that is where it is."""
    nav = page.get_by_role("navigation", name="Pages")
    link = nav.get_by_role("link", name=name, exact=True)
    if not link.is_visible():
        nav.locator("details.navmenu > summary").click()
    return link


def open_settings(page: Any) -> None:
    """Open the header's settings menu (theme, times, live updates, account, log out)."""
    menu = page.locator("header details.settings")
    if menu.get_attribute("open") is None:
        menu.locator("> summary").click()
