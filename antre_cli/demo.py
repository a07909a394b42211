"""``antre demo``: Redis (private, unless ANTRE_REDIS_URL is set), SQLite, the worker pool with
its scheduled duties, the dashboard under gunicorn, and demo traffic with injected faults."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from antre import settings
from antre.embedded import EmbeddedRedis, die_with_parent_preexec
from antre.observe.logs import safe_url


def _secret(path: str) -> str:
    if os.path.exists(path):
        with open(path) as fh:
            return fh.read().strip()
    value = secrets.token_hex(32)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
        fh.write(value)
    return value


PASSWORD_FILE = "admin_password"  # in the data dir: the generated password, kept across runs


def _ensure_admin(app: Any, data_dir: str | None = None) -> str | None:
    """Create or reset the demo's admin; returns the password when it was generated. With
    ``data_dir`` the generated one is kept there (``admin_password``, mode 0600) and reused on
    the next start, so a bookmarked login keeps working; ANTRE_ADMIN_PASSWORD wins."""
    given = settings.ADMIN_PASSWORD.get()
    path = os.path.join(data_dir, PASSWORD_FILE) if data_dir else ""
    kept = ""
    if not given and path and os.path.exists(path):
        with open(path) as fh:
            kept = fh.read().strip()
    password = given or kept or secrets.token_urlsafe(18)  # 24 characters: the rules hold
    if app.users.get("admin") is None:
        app.users.add("admin", "admin", password)
    elif not (kept and app.users.verify("admin", kept) is not None):  # sessions go on if so
        app.users.set_password("admin", password)
    if not given and path and not kept:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write(password)
    return None if given else password


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "antre_cli", *args],
                            preexec_fn=die_with_parent_preexec())


def _wait_http(url: str, timeout_s: float, procs: list[subprocess.Popen[bytes]]) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return False


def run_demo(*, port: int, data_dir: str, host: str = "127.0.0.1", processes: int = 2,
             threads: int = 4, traffic: float = 4.0) -> int:
    started = time.monotonic()
    data_dir = os.path.abspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    server = None
    if not settings.REDIS_URL.given():
        server = EmbeddedRedis(data_dir=os.path.join(data_dir, "redis"), appendonly=True).start()
        os.environ[settings.REDIS_URL.name] = server.url
        print(f"antre demo: private Redis at {server.url} (pid {server.pid})", flush=True)
    # the demo's own defaults, for this process and the ones it starts (unless the
    # environment or the ANTRE_CONFIG file says otherwise)
    settings.preset(settings.DATABASE_URL, f"sqlite:///{data_dir}/antre.db")
    if not settings.SECRET_KEY.given():
        settings.preset(settings.SECRET_KEY, _secret(os.path.join(data_dir, "secret_key")))
    settings.preset(settings.LOG_FORMAT, "text")
    # the terminal shows warnings (retries, dead letters, outages); every job event is on the
    # dashboard. ANTRE_LOG_LEVEL=INFO shows them all.
    settings.preset(settings.LOG_LEVEL, "WARNING")
    settings.preset(settings.ACCESS_LOG, "")
    # the fake email provider: 2 messages/s at most, and a 40 s outage every 5 minutes, so the
    # rate limiter and the circuit breaker visibly act
    settings.preset(settings.DEMO_EMAIL_RATE, "2")
    settings.preset(settings.DEMO_EMAIL_OUTAGE_EVERY_S, "300")

    from antre_demo import Traffic, make_app, setup  # after the environment above is set
    app = make_app()
    setup(app)
    try:
        generated = _ensure_admin(app, data_dir)
    except ValueError as exc:  # ANTRE_ADMIN_PASSWORD breaks the password rules
        print(f"antre demo: ANTRE_ADMIN_PASSWORD: {exc}", file=sys.stderr)
        if server is not None:
            server.stop()
        return 2

    procs = [
        _spawn(["worker", "antre_demo:app", "--processes", str(processes), "--threads",
                str(threads)]),
        _spawn(["web", "antre_demo:app", "--host", host, "--port", str(port), "--workers", "2"]),
    ]
    stop = threading.Event()

    def shutdown(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    url = f"http://{host}:{port}/"
    if not _wait_http(url + "login", 60, procs):
        print("antre demo: the dashboard did not come up; see the errors above", file=sys.stderr)
        stop.set()
    else:
        took = time.monotonic() - started
        print("\n" + "=" * 64)
        print(f"  Antre dashboard: {url}   (live after {took:.1f} s)")
        print(f"  login: admin / {generated or '$ANTRE_ADMIN_PASSWORD'}")
        print(f"  Redis: {safe_url(settings.REDIS_URL.get())}")
        print(f"  data:  {data_dir}      Ctrl-C stops everything")
        print("=" * 64 + "\n", flush=True)
    producer = None
    if traffic > 0 and not stop.is_set():
        producer = threading.Thread(target=Traffic(app, rate_per_s=traffic).run, args=(stop,),
                                    daemon=True, name="demo-traffic")
        producer.start()
    while not stop.wait(0.5):
        if any(p.poll() is not None for p in procs):
            print("antre demo: a child process exited; stopping", file=sys.stderr)
            break
    stop.set()
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    if server is not None:
        server.stop()
    return 0
