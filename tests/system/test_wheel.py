"""Installed as a library: the wheel built from ``pyproject.toml`` carries the dashboard's
templates and static files, and the dashboard runs from a fresh virtualenv outside the checkout.

The venv is a plain one (no system site-packages): ``pip install`` of the wheel fetches its
dependencies like a user's install would. ``antre web`` then runs from the venv's own console
script with the checkout nowhere on its path (cwd and PYTHONPATH point elsewhere); the test
checks where the packages were imported from, serves the login page and a static file over
HTTP, and logs in with a real Chromium (when one is installed) so htmx really loads.
"""

from __future__ import annotations

import email
import email.message
import hashlib
import http.cookiejar
import json
import re
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from antre.embedded import free_port
from antre.engine.keys import QueueKeys

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # pip install fetches the deps

REPO = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                 "test-artifacts", ".pytest_cache", ".hypothesis", "out", "*.db")
CHROMIUM = os.environ.get("ANTRE_TEST_CHROMIUM", "/usr/bin/chromium")
ADMIN_PASSWORD = "wheel-admin-pass-1"


def _run(cmd: list[str], **kw: object) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return str(done.stdout)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ANTRE_"))}
    return {**env, **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a clean copy of the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=IGNORED)  # a clean tree: no stale build/ in the wheel
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", str(src), "-w", str(tmp / "dist")],
         env=_clean_env())
    wheels = list((tmp / "dist").glob("antre-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _venv_with(wheel: Path, requirement: str, where: Path) -> Path:
    _run([sys.executable, "-m", "venv", str(where)], env=_clean_env())
    _run([str(where / "bin" / "pip"), "install", "-q", requirement], env=_clean_env(),
         cwd=str(where.parent))
    return where


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and the dashboard extra (``antre[web]``) installed."""
    return _venv_with(wheel, f"{wheel}[web]", tmp_path_factory.mktemp("web") / "venv")


@pytest.fixture(scope="module")
def core_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the core only: ``pip install antre``, no extra."""
    return _venv_with(wheel, str(wheel), tmp_path_factory.mktemp("core") / "venv")


CORE_APP = """
from antre import Antre
app = Antre()

@app.handler("double")
def double(ctx, payload):
    return {"n": payload["n"] * 2}
"""


def test_the_core_install_enqueues_and_runs_jobs_without_the_dashboard(
        core_venv: Path, redis_url: str, r, tmp_path: Path) -> None:
    """``pip install antre``: a producer enqueues and ``antre worker --burst`` runs the job; the
    dashboard's packages are not there, and ``antre web`` says which extra to install."""
    (tmp_path / "coreapp.py").write_text(CORE_APP)
    env = _clean_env(ANTRE_REDIS_URL=redis_url, PYTHONPATH=str(tmp_path))
    py = str(core_venv / "bin" / "python")
    for module in ("flask", "gunicorn", "plotly", "argon2"):
        probe = subprocess.run([py, "-c", f"import {module}"], capture_output=True, text=True,
                               env=env, cwd=str(tmp_path))
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, module
    job_id = _run([py, "-c", "from coreapp import app; "
                   "print(app.enqueue('double', {'n': 21}, idempotency_key='core:1'))"],
                  env=env, cwd=str(tmp_path)).strip().splitlines()[-1]
    _run([str(core_venv / "bin" / "antre"), "worker", "coreapp:app", "--burst"], env=env,
         cwd=str(tmp_path))
    assert r.hget(QueueKeys("default").job(job_id), "state") == "done"
    web = subprocess.run([str(core_venv / "bin" / "antre"), "web", "coreapp:app"],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert web.returncode == 2
    assert "pip install 'antre[web]'" in web.stderr


def _metadata(wheel: Path) -> "email.message.Message":
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(zf.read(name))


def test_the_wheel_carries_the_metadata_a_team_pins_and_browses(wheel: Path) -> None:
    """The version is ``antre.__version__``; Python versions, license, classifiers, keywords
    and URLs are there for the index; every extra is one the install guide documents."""
    import antre
    meta = _metadata(wheel)
    assert meta["Name"] == "antre" and meta["Version"] == antre.__version__
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "## Quickstart" in meta.get_payload()  # the README is the long description
    classifiers = meta.get_all("Classifier") or []
    for wanted in ("License :: OSI Approved :: MIT License", "Programming Language :: Python :: 3.11",
                   "Typing :: Typed", "Framework :: Django", "Development Status :: 4 - Beta"):
        assert wanted in classifiers, wanted
    assert "redis" in (meta["Keywords"] or "").split(",")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Source", "Issues"} <= urls.keys(), urls
    assert all(u.startswith("https://") for u in urls.values()), urls
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"web", "postgres", "otel", "demo", "django", "docs", "test"} <= extras, extras
    install = (REPO / "docs" / "how-to" / "install.md").read_text()
    assert [e for e in sorted(extras) if f"| `{e}` |" not in install] == []


# checkout folder -> where the wheel puts it (pyproject's package-dir)
INSTALLED_AS = {"antre": "antre", "worker/antre_worker": "antre_worker", "webapp/antre_web": "antre_web",
                "templates": "antre_web/templates", "static": "antre_web/static",
                "antre_cli": "antre_cli", "antre_demo": "antre_demo",
                "antre_django": "antre_django"}


def _tracked(folder: str) -> list[str]:
    """The files of ``folder`` that git tracks (relative to it), else every file on disk."""
    done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--", folder],
                          capture_output=True, text=True, check=False)
    if done.returncode == 0 and done.stdout:
        return [Path(p).relative_to(folder).as_posix() for p in done.stdout.split("\0") if p]
    root = REPO / folder
    return [p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def test_the_wheel_carries_every_file_of_its_packages(wheel: Path) -> None:
    """Each tracked file of each package folder is in the wheel under its installed name: a
    new subpackage missing from pyproject's ``packages``, or a new Lua script, template or
    static file its package-data does not match, fails here."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    missing = [f"{folder}/{rel} (as {installed}/{rel})"
               for folder, installed in INSTALLED_AS.items() for rel in _tracked(folder)
               if f"{installed}/{rel}" not in names]
    assert not missing, "not in the wheel:\n" + "\n".join(missing)
    assert {"antre/engine/lua/enqueue_flow.lua", "antre/engine/lua/result_wait.lua",
            "antre/flows/__init__.py", "antre/actions/__init__.py",
            "antre/limits/__init__.py", "antre_web/templates/flows.html"} <= names


FLOW_APP = """
from antre import Antre
app = Antre()

@app.handler("square")
def square(ctx, payload):
    return payload["n"] ** 2

@app.handler("total")
def total(ctx, payload):
    return {"sum": sum(ctx.flow_results), "children": ctx.flow_results}
"""

LOAD_SCRIPTS = """
import json, sys
from importlib import resources
import redis
from antre.engine.scripts import NAMES, library, source
r = redis.Redis.from_url(sys.argv[1])
files = sorted(p.name[:-4] for p in resources.files("antre.engine.lua").iterdir()
               if p.name.endswith(".lua") and not p.name.startswith("_"))  # _lib, includes
shas = {name: r.script_load(source(name)) for name in files}
lib, code = library()  # the same scripts as one Redis Functions library
r.function_load(code, replace=True)
[listed] = r.function_list(library=lib)
functions = sorted(f[1].decode() for f in listed[5])  # [..., b"functions", [[b"name", n, ...]]]
print(json.dumps({"files": files, "names": list(NAMES), "shas": shas, "lib": lib,
                  "functions": functions}))
"""

ENQUEUE_CHORD = """
import json
from flowapp import app
flow = app.chord([app.spec("square", {"n": n}, idempotency_key=f"sq:{n}") for n in (1, 2, 3)],
                 app.spec("total", {}, idempotency_key="total:1")).enqueue()
print(json.dumps({"flow": flow.id, "state": flow.status().state, "total": flow.status().total}))
"""

WAIT_CHORD = """
import json, sys
from flowapp import app
print("waiting", flush=True)
answer = app.result("total:1").wait(timeout=120)
flow = app.flow(sys.argv[1])
row = flow.wait(timeout=30)
print(json.dumps({"status": answer.status, "result": answer.result,
                  "timed_out": answer.timed_out, "state": row.state, "done": row.done,
                  "results": flow.results()}))
"""


def test_the_core_install_runs_a_chord_and_waits_for_its_result(
        core_venv: Path, redis_url: str, r, tmp_path: Path) -> None:
    """From ``pip install antre``: every Lua script of the package loads, ``antre --help``
    lists the session's commands, a chord of 3 children and a callback runs under ``antre
    worker --burst``, and a producer blocked in ``app.result(key).wait()`` (result_wait.lua)
    and ``flow.wait()`` gets the callback's result; ``antre flow show`` says it succeeded."""
    (tmp_path / "flowapp.py").write_text(FLOW_APP)
    env = _clean_env(ANTRE_REDIS_URL=redis_url, PYTHONPATH=str(tmp_path))
    py, antre = str(core_venv / "bin" / "python"), str(core_venv / "bin" / "antre")
    loaded = json.loads(_run([py, "-c", LOAD_SCRIPTS, redis_url], env=env,
                             cwd=str(tmp_path)).splitlines()[-1])
    assert set(loaded["names"]) == set(loaded["files"]), "a script is not loaded by Scripts"
    assert {"enqueue_flow", "flow_inputs", "flow_close", "flow_cancel", "result_wait",
            "ack_many", "progress"} <= set(loaded["files"])
    assert all(r.script_exists(*loaded["shas"].values()))
    assert loaded["functions"] == sorted(f"{loaded['lib']}_{n}" for n in loaded["files"])
    helptext = _run([antre, "--help"], env=env, cwd=str(tmp_path))
    for command in ("flow", "result", "group", "incident", "worker", "web"):
        assert f",{command}," in helptext or f"{{{command}," in helptext, command
    made = json.loads(_run([py, "-c", ENQUEUE_CHORD], env=env,
                           cwd=str(tmp_path)).splitlines()[-1])
    assert made["state"] == "running" and made["total"] == 4
    waiter = subprocess.Popen([py, "-c", WAIT_CHORD, made["flow"]], env=env, cwd=str(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert waiter.stdout is not None and waiter.stdout.readline().strip() == "waiting"
        _run([antre, "worker", "flowapp:app", "--burst"], env=env, cwd=str(tmp_path))
        out, err = waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, err
    got = json.loads(out.splitlines()[-1])
    assert got["status"] == "completed" and not got["timed_out"]
    assert got["result"] == {"sum": 14, "children": [1, 4, 9]}
    assert got["state"] == "succeeded" and got["done"] == 4
    assert got["results"] == [got["result"]]
    shown = json.loads(_run([antre, "flow", "show", made["flow"], "--json"], env=env,
                            cwd=str(tmp_path)))
    assert shown["flow"]["state"] == "succeeded" and shown["total_jobs"] == 4


def test_the_wheel_carries_templates_and_static_files(venv: Path) -> None:
    out = _run([str(venv / "bin" / "python"), "-c",
                "import antre, antre_web, antre_worker, os; from antre_web import asset_dir; "
                "print(antre.__file__); print(antre_web.__file__); print(antre_worker.__file__); "
                "print(asset_dir('templates')); print(asset_dir('static'))"],
               env=_clean_env(), cwd=str(venv))
    paths = out.split()
    assert len(paths) == 5, out
    for path in paths:
        assert path.startswith(str(venv)), f"{path} is not inside the venv {venv}"
        assert not path.startswith(str(REPO))
    templates, static = Path(paths[3]), Path(paths[4])
    # the wheel installs no top-level package named like other projects' ("webapp", "worker")
    site = Path(paths[0]).parent.parent
    assert not (site / "webapp").exists() and not (site / "worker").exists()
    assert (templates / "login.html").is_file() and (templates / "_dlq.html").is_file()
    assert (static / "vendor" / "htmx.min.js").is_file() and (static / "antre.css").is_file()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


@pytest.fixture
def served(venv: Path, redis_url: str, tmp_path: Path) -> Iterator[str]:
    """``antre web`` from the venv's console script, cwd outside the checkout."""
    port = free_port()
    env = _clean_env(ANTRE_REDIS_URL=redis_url,
                     ANTRE_DATABASE_URL=f"sqlite:///{tmp_path / 'antre.db'}",
                     ANTRE_ADMIN_PASSWORD=ADMIN_PASSWORD,
                     ANTRE_SECRET_KEY=secrets.token_urlsafe(48))
    log = open(tmp_path / "web.log", "wb")
    proc = subprocess.Popen([str(venv / "bin" / "antre"), "web", "--port", str(port),
                             "--workers", "1"], cwd=str(tmp_path), env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _get(base + "/login")[0] != 200:
            assert proc.poll() is None, (tmp_path / "web.log").read_text()
            assert time.monotonic() < deadline, "antre web did not answer /login in 60 s"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def test_the_installed_dashboard_serves_login_and_static_files(served: str) -> None:
    status, body = _get(served + "/login")
    assert status == 200
    assert b"<h1>Log in</h1>" in body
    status, body = _get(served + "/static/vendor/htmx.min.js")
    assert status == 200
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(
        (REPO / "static" / "vendor" / "htmx.min.js").read_bytes()).hexdigest()
    status, body = _get(served + "/static/antre.css")
    assert status == 200 and b"--accent" in body


def _logged_in(base: str) -> urllib.request.OpenerDirector:
    """An HTTP client with the admin's session cookie (the login form, its CSRF token)."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with opener.open(base + "/login", timeout=10) as resp:
        token = re.search(rb'name="csrf_token" value="([^"]+)"', resp.read())
    assert token is not None
    form = urllib.parse.urlencode({"csrf_token": token.group(1).decode(), "username": "admin",
                                   "password": ADMIN_PASSWORD, "next": ""}).encode()
    with opener.open(base + "/login", data=form, timeout=10) as resp:
        assert resp.status == 200 and b"<h1>Log in</h1>" not in resp.read()
    return opener


def _page(opener: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _nav_links(html: str) -> list[str]:
    nav = re.search(r'<nav id="nav".*?</nav>', html, re.S)
    assert nav is not None, html[:2000]
    return re.findall(r'href="([^"#]+)"', nav.group(0))


def test_the_installed_dashboard_serves_the_new_pages(served: str, venv: Path, redis_url: str,
                                                     tmp_path: Path) -> None:
    """Logged in over HTTP to ``antre web`` from the venv: every page in the navigation answers
    200 (Flows, Performance and Incidents among them), and so do a stored chord's flow page
    and its job type's performance page."""
    (tmp_path / "flowapp.py").write_text(FLOW_APP)
    made = json.loads(_run([str(venv / "bin" / "python"), "-c", ENQUEUE_CHORD], cwd=str(tmp_path),
                           env=_clean_env(ANTRE_REDIS_URL=redis_url,
                                          PYTHONPATH=str(tmp_path))).splitlines()[-1])
    opener = _logged_in(served)
    status, overview = _page(opener, served + "/")
    assert status == 200
    links = _nav_links(overview)
    assert {"/flows/", "/types/", "/incident/"} <= set(links), links
    for link in links:
        status, body = _page(opener, served + link)
        assert status == 200, f"{link}: {status}\n{body[:2000]}"
    status, body = _page(opener, f"{served}/flows/default/{made['flow']}")
    assert status == 200 and made["flow"] in body and "chord" in body
    status, body = _page(opener, served + "/types/square")
    assert status == 200 and "square" in body


MOUNTED = """
import json, secrets
from flask import Flask
import antre_web
host = Flask("host")
host.secret_key = secrets.token_hex(32)
antre_web.mount(host, "/ops", user=lambda request: ("alice", "operator"),
                config={"SECRET_KEY": secrets.token_urlsafe(48)})
client = host.test_client()
pages = {}
for path in ("/ops/", "/ops/flows/", "/ops/types/", "/ops/incident/", "/ops/static/antre.css"):
    resp = client.get(path)
    pages[path] = [resp.status_code, resp.get_data(as_text=True)[:20000]]
print(json.dumps(pages))
"""


def test_the_installed_dashboard_mounts_in_a_host_app(venv: Path, redis_url: str,
                                                      tmp_path: Path) -> None:
    """``antre_web.mount`` from the venv: the host's user sees the new pages under the prefix,
    with links that carry it."""
    out = _run([str(venv / "bin" / "python"), "-c", MOUNTED], cwd=str(tmp_path),
               env=_clean_env(ANTRE_REDIS_URL=redis_url,
                              ANTRE_DATABASE_URL=f"sqlite:///{tmp_path / 'antre.db'}"))
    pages = json.loads(out.splitlines()[-1])
    for path, (status, body) in pages.items():
        assert status == 200, f"{path}: {status}\n{body[:2000]}"
    assert {"/ops/flows/", "/ops/types/", "/ops/incident/"} <= set(
        _nav_links(pages["/ops/"][1]))
    assert "<h1>Flows</h1>" in pages["/ops/flows/"][1]


BROWSER_SCRIPT = """
import sys
from playwright.sync_api import expect, sync_playwright
base, chromium, password = sys.argv[1:4]
with sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path=chromium,
                                 args=["--headless", "--no-sandbox", "--disable-gpu"])
    try:
        expect.set_options(timeout=30_000)  # a loaded machine renders the overview slowly
        page = browser.new_page(base_url=base)
        page.set_default_timeout(30_000)
        page.goto("/login")
        page.get_by_label("User").fill("admin")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        assert page.evaluate("typeof window.htmx") == "object", "htmx did not load"
        expect(page.locator("#live .cards")).to_be_visible()
        print("logged in, htmx loaded")
    finally:
        browser.close()
"""


def test_the_installed_dashboard_works_in_a_browser(served: str) -> None:
    """Chromium logs in and htmx runs. Playwright runs in a process of its own: the browser
    tests' session may hold a Playwright instance (and its event loop) in this one."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{CHROMIUM} is missing (CI=true: browser tests must run)")
        pytest.skip(f"{CHROMIUM} is missing")
    out = _run([sys.executable, "-c", BROWSER_SCRIPT, served, CHROMIUM, ADMIN_PASSWORD])
    assert "logged in, htmx loaded" in out


def test_the_installed_package_enqueues_on_its_lean_path(venv: Path, redis_url: str, r,
                                                        tmp_path: Path) -> None:
    """From the wheel: a single enqueue takes the lean script (enqueue_one.lua is in the
    package) on the pinned connection's own socket I/O (hiredis comes with the install); a
    delayed job takes the full script."""
    script = (
        "import json, sys, antre\n"
        "from antre import Antre\n"
        "app = Antre(redis_url=sys.argv[1])\n"
        "now = app.enqueue('t', {'n': 1}, idempotency_key='k1')\n"
        "later = app.enqueue('t', {'n': 2}, idempotency_key='k2', delay_s=60)\n"
        "q = app.queue(None)\n"
        "print(json.dumps({'file': antre.__file__, 'direct': q.scripts.pinned.direct_io,\n"
        "                  'sha': q.scripts.enqueue_one.sha, 'ids': [now, later],\n"
        "                  'queue': q.name}))\n")
    r.config_resetstat()
    out = _run([str(venv / "bin" / "python"), "-c", script, redis_url], cwd=str(tmp_path),
               env=_clean_env())
    got = json.loads(out.strip().splitlines()[-1])
    assert str(venv) in got["file"] and got["direct"]
    assert r.script_exists(got["sha"]) == [True]
    now, later = got["ids"]
    keys = QueueKeys(got["queue"])
    assert r.hget(keys.job(now), "state") == "ready"
    assert r.hget(keys.job(later), "state") == "scheduled"
    assert "cmdstat_exists" in r.info("commandstats")  # the delayed job's script checks its id
