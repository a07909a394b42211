"""Who is asking, what they may do, and the CSRF check. Installed app-wide by ``install``.

- Every request except ``/login`` and ``/static/`` needs a user: the session cookie (browser),
  or HTTP Basic credentials on ``/api/`` (scripts). The role is re-read from SQL on every
  request, so a role change or a deleted user takes effect at once.
- Roles: viewer reads; operator replays, discards, extends, releases, runs now, bulk; admin
  also manages users. Views declare theirs with ``@requires("operator", "dlq.replay")``; a
  refusal is 403 with a message and an audit entry.
- Every POST needs the session's CSRF token (form field ``csrf_token`` or header
  ``X-CSRF-Token``), except API calls authenticated by HTTP Basic (browsers never attach Basic
  credentials cross-site on their own). A missing or wrong token is refused with 400, audited.
- Login attempts: at most ``LOGIN_LIMIT`` failures per (user name, client address) per
  ``LOGIN_WINDOW_S``, counted in Redis, so the limit holds across every gunicorn worker and
  host (``antre.logins``); while Redis is unreachable, in this process's memory.
"""

from __future__ import annotations

import functools
import hmac
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import (
    Flask,
    Response,
    abort,
    current_app,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from sqlalchemy.exc import SQLAlchemyError

from antre.users import role_at_least

from . import services

LOGIN_LIMIT = 5
LOGIN_WINDOW_S = 60.0
PUBLIC_ENDPOINTS = {"auth.login", "auth.login_post", "static"}
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass(frozen=True)
class CurrentUser:
    name: str
    role: str
    via: str  # 'session' | 'basic'

    def can(self, role: str) -> bool:
        return role_at_least(self.role, role)


class LoginLimiter:
    """Failed logins per (user name, client address): counted in Redis for every dashboard
    process (``services.get().logins``) and, as the fallback while Redis is unreachable, in
    this process's memory."""

    def __init__(self, limit: int = LOGIN_LIMIT, window_s: float = LOGIN_WINDOW_S) -> None:
        self.limit, self.window_s = limit, window_s
        self.memory = MemoryLimiter(limit, window_s)

    def _shared(self) -> Any:
        logins = services.get().logins
        logins.limit, logins.window_ms = self.limit, int(self.window_s * 1000)
        return logins

    def blocked_for(self, key: tuple[str, str]) -> float:
        local = self.memory.blocked_for(key)
        try:
            return max(local, self._shared().blocked_for_ms(*key) / 1000)
        except services.REDIS_ERRORS:
            return local

    def failed(self, key: tuple[str, str]) -> None:
        self.memory.failed(key)
        try:
            self._shared().failed(*key)
        except services.REDIS_ERRORS:
            pass  # counted in memory

    def succeeded(self, key: tuple[str, str]) -> None:
        self.memory.succeeded(key)
        try:
            self._shared().succeeded(*key)
        except services.REDIS_ERRORS:
            pass


class MemoryLimiter:
    """Failures per key in a sliding window (memory of this process, thread-safe)."""

    def __init__(self, limit: int = LOGIN_LIMIT, window_s: float = LOGIN_WINDOW_S) -> None:
        self.limit, self.window_s = limit, window_s
        self._failures: dict[tuple[str, str], deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: tuple[str, str], now: float) -> deque[float]:
        q = self._failures.setdefault(key, deque())
        while q and q[0] <= now - self.window_s:
            q.popleft()
        return q

    def blocked_for(self, key: tuple[str, str]) -> float:
        now = time.monotonic()
        with self._lock:
            q = self._recent(key, now)
            return (q[0] + self.window_s - now) if len(q) >= self.limit else 0.0

    def failed(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._recent(key, time.monotonic()).append(time.monotonic())

    def succeeded(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._failures.pop(key, None)


def csrf_token() -> str:
    token = session.get("csrf")
    if not token:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


def current_user() -> CurrentUser | None:
    return g.get("user")


def client_addr() -> str:
    return request.remote_addr or ""


def audit(action: str, target: str | None, outcome: str, reason: str | None = None,
          detail: dict[str, Any] | None = None, user: CurrentUser | None = None) -> None:
    """One audit entry for the current request. A database outage is logged, never raised
    here: refusals must still be answered."""
    who = user or current_user()
    svc = services.get()
    try:
        svc.audit.record(who.name if who else "(anonymous)", who.role if who else None, action,
                         target, reason or None, outcome, detail, client_addr())
        svc.outages.ok("database")
    except SQLAlchemyError as exc:
        svc.outages.failed("database")
        services.log.error("audit write failed (%s): %s %s %s", exc, action, target, outcome)


def wants_json() -> bool:
    return request.path.startswith("/api/")


def refuse(status: int, message: str, action: str, target: str | None = None) -> Response:
    """Answer a refused request (400/401/403) and audit it (401 excepted: nobody to name)."""
    if status != 401:
        audit(action, target or request.path, "refused", request.form.get("reason") or None,
              {"status": status, "why": message, "method": request.method})
    if wants_json():
        resp = jsonify({"error": message, "status": status})
    else:
        resp = Response(render_template("refused.html", status=status, message=message),
                        mimetype="text/html")
    resp.status_code = status
    if status == 401 and wants_json():
        resp.headers["WWW-Authenticate"] = 'Basic realm="antre", charset="UTF-8"'
    return resp


def requires(role: str, action: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The view needs ``role``; with ``action`` a refusal is audited under that name."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            user = current_user()
            if user is None:
                abort(401)
            if not user.can(role):
                msg = (f"your role '{user.role}' may not do this; it needs '{role}' "
                       "(ask an admin)")
                return refuse(403, msg, action or request.endpoint or "?",
                              _target(kwargs))
            return fn(*args, **kwargs)
        wrapper.required_role = role  # type: ignore[attr-defined]
        return wrapper
    return deco


def _target(kwargs: dict[str, Any]) -> str:
    return "/".join(str(v) for v in kwargs.values()) or request.path


def _basic_user() -> CurrentUser | None:
    auth = request.authorization
    if auth is None or auth.type != "basic" or not auth.username:
        return None
    svc = services.get()
    key = (auth.username, client_addr())
    limiter: LoginLimiter = svc_limiter()
    if limiter.blocked_for(key):
        abort(429)
    info = svc.users.verify(auth.username, auth.password or "")
    if info is None:
        limiter.failed(key)
        return None
    limiter.succeeded(key)
    return CurrentUser(info.name, info.role, "basic")


def _session_user() -> CurrentUser | None:
    name = session.get("user")
    if not name:
        return None
    svc = services.get()
    try:
        info = svc.users.get(name)
        svc.outages.ok("database")
    except SQLAlchemyError:
        svc.outages.failed("database")
        return CurrentUser(name, session.get("role", "viewer"), "session")
    if info is None or info.disabled:
        session.clear()
        return None
    session["role"] = info.role
    return CurrentUser(info.name, info.role, "session")


def svc_limiter() -> LoginLimiter:
    limiter: LoginLimiter = current_app.extensions["antre_login_limiter"]
    return limiter


def _load_user_and_check() -> Response | None:
    if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None:
        return None
    user = None
    if request.path.startswith(("/api/", "/metrics")) and request.authorization is not None:
        try:
            user = _basic_user()
        except SQLAlchemyError:
            services.get().outages.failed("database")
            return refuse(401, "the user database is unreachable; try again", "login")
        if user is None:
            return refuse(401, "wrong user name or password", "login")
    else:
        user = _session_user()
    if user is None:
        if wants_json():
            return refuse(401, "log in first (session cookie or HTTP Basic)", "login")
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))  # type: ignore[return-value]
    g.user = user
    if request.method in UNSAFE and user.via == "session":
        sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token") or ""
        expected = session.get("csrf") or ""
        if not expected or not hmac.compare_digest(str(sent), str(expected)):
            return refuse(400, "refused: missing or wrong CSRF token (reload the page and "
                               "try again)", request.endpoint or "?")
    return None


def check_login_csrf() -> Response | None:
    sent = request.form.get("csrf_token") or ""
    expected = session.get("csrf") or ""
    if not expected or not hmac.compare_digest(str(sent), str(expected)):
        return refuse(400, "refused: missing or wrong CSRF token (reload the page and try "
                           "again)", "login")
    return None


def _security_headers(resp: Response) -> Response:
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("X-Frame-Options", "DENY")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    resp.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
    if request.endpoint != "static":
        resp.headers.setdefault("Cache-Control", "no-store")
    return resp


def install(app: Flask) -> None:
    app.extensions["antre_login_limiter"] = LoginLimiter()
    app.before_request(_load_user_and_check)
    app.after_request(_security_headers)
    app.jinja_env.globals["csrf_token"] = csrf_token
    app.jinja_env.globals["current_user"] = current_user
