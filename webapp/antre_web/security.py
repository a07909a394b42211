"""Who is asking, what they may do, and the checks every request passes. Installed app-wide by
``install``; the threat model is in ``SECURITY.md``.

- The session-signing key (``SECRET_KEY`` / ``ANTRE_SECRET_KEY``) must be at least 32 bytes and
  not a known placeholder: ``create_app`` refuses to build the app otherwise (``InsecureConfig``).
- Every request except ``/login`` and ``/static/`` needs a user: the session cookie (browser),
  or HTTP Basic credentials on ``/api/`` and ``/metrics`` (scripts). The session holds the
  user's id, the user's session generation and when it was signed; the user is re-read from SQL
  on every request, so a role change, a disable, a delete, a password change or "log out
  everywhere" ends the session at once (and a logout ends that one session: its random id is
  recorded as ended), and a session ends ``PERMANENT_SESSION_LIFETIME`` after
  its login whatever happens. While the user database is unreachable, the answer is 503.
- Roles: viewer reads; operator replays, discards, extends, releases, runs now, bulk; admin
  also manages users. Views declare theirs with ``@requires("operator", "dlq.replay")``; a
  refusal is 403 with a message and an audit entry.
- Every write (POST, PUT, PATCH, DELETE) is refused when the browser says it comes from another
  site (``Sec-Fetch-Site: cross-site`` / ``same-site``, or an ``Origin`` other than this host).
  Session writes need the session's CSRF token (form field ``csrf_token`` or header
  ``X-CSRF-Token``). API writes need a JSON body (``Content-Type: application/json``), which a
  cross-site form cannot send. The Basic challenge (``WWW-Authenticate``) is only sent to
  scripts, never to a browser navigating, so a browser is not invited to cache Basic
  credentials.
- Login attempts (form and Basic) and current-password checks: failures are counted per client
  address, per account, and per (account, address), in Redis so the limits hold across every
  gunicorn worker and host (``antre.stores.logins``); while Redis is unreachable, in this
  process's bounded memory. Every bucket is checked and the try reserved in one atomic step
  before any password hash is computed (``throttled``), so parallel tries cannot overshoot; a
  success takes its reservation back. A successful Basic check is cached (``BasicCache``) per
  user id, session generation and credentials, so a scraper does not hash on every request. Behind a reverse proxy, set
  ``ANTRE_TRUSTED_PROXIES`` to the number of proxies so the client address is the real one.
- Refusals of anonymous requests are counted (``antre_anonymous_refusals`` in the process's
  memory, logged), not written to the audit log: nobody to name, and an easy flood.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

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
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Response as BaseResponse

from antre.actions import Actor, record
from antre.stores.audit import AuditUnwritable
from antre.stores.logins import LoginThrottle
from antre.stores.sql import unreachable
from antre.stores.users import UserInfo, normalise_name, role_at_least

from . import delegated, services

log = logging.getLogger("antre.webapp.security")
_T = TypeVar("_T")

PAIR_LIMIT = 5     # failures per (account, address) per window
ACCOUNT_LIMIT = 20  # failures per account from all addresses per window
ADDRESS_LIMIT = 30  # failures per address over all account names per window
LOGIN_LIMIT = PAIR_LIMIT
LOGIN_WINDOW_S = 60.0
MEMORY_LIMITER_KEYS = 10_000
BASIC_CACHE_ENTRIES = 1024
BASIC_CACHE_TTL_S = 300.0
PUBLIC_ENDPOINTS = {"auth.login", "auth.login_post", "static"}
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
MIN_SECRET_BYTES = 32
PLACEHOLDER_MARKERS = ("change-me", "changeme", "change_me", "replace-me", "replaceme",
                       "placeholder", "your-secret", "yoursecret", "insecure", "example")
SECRET_HINT = ('generate one with  python3 -c "import secrets; print(secrets.token_hex(32))"  '
               "and set it as ANTRE_SECRET_KEY (the same value for every dashboard process)")
HSTS = "max-age=31536000; includeSubDomains"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; "
       "object-src 'none'")


class InsecureConfig(RuntimeError):
    """The dashboard would be unsafe with this configuration; the message says what to do."""


def secret_key_problem(secret: Any) -> str | None:
    """What is wrong with a session-signing key, or None when it is fit for production."""
    if not secret:
        return "ANTRE_SECRET_KEY is not set"
    raw = secret if isinstance(secret, bytes) else str(secret).encode()
    if len(raw) < MIN_SECRET_BYTES:
        return f"ANTRE_SECRET_KEY is too short ({len(raw)} bytes; at least {MIN_SECRET_BYTES})"
    low = raw.decode("utf-8", "replace").lower()
    if any(marker in low for marker in PLACEHOLDER_MARKERS) or len(set(raw)) < 8:
        return "ANTRE_SECRET_KEY is a known placeholder"
    return None


def check_secret_key(secret: Any) -> None:
    problem = secret_key_problem(secret)
    if problem:
        raise InsecureConfig(f"refusing to start the dashboard: {problem}. It signs the session "
                             f"cookies: whoever knows it can log in as any user. {SECRET_HINT}.")


@dataclass(frozen=True)
class CurrentUser:
    name: str
    role: str
    via: str  # 'session' | 'basic' | 'form' | 'host' (delegated.py)
    id: int = 0

    def can(self, role: str) -> bool:
        return role_at_least(self.role, role)


# -- login throttling -------------------------------------------------------------------------
@dataclass(frozen=True)
class Attempt:
    """One login attempt's buckets: the account name as looked up, and the client address."""

    name: str
    addr: str

    @classmethod
    def of(cls, name: str, addr: str) -> Attempt:
        return cls(normalise_name(name).lower(), addr)

    def buckets(self) -> list[tuple[str, int]]:
        """``(bucket, limit)``, the address first: it is checked before any hashing."""
        return [(f"addr\x00{self.addr}", ADDRESS_LIMIT), (f"user\x00{self.name}", ACCOUNT_LIMIT),
                (f"pair\x00{self.name}\x00{self.addr}", PAIR_LIMIT)]


class LoginLimiter:
    """Failed logins per address, per account and per (account, address): counted in Redis for
    every dashboard process (``services.get().logins``) and, as the fallback while Redis is
    unreachable, in this process's memory."""

    def __init__(self, window_s: float = LOGIN_WINDOW_S) -> None:
        self.window_s = window_s
        self.memory = MemoryLimiter(window_s)

    def _shared(self) -> LoginThrottle:
        logins = services.get().logins
        logins.window_ms = int(self.window_s * 1000)
        return logins

    def _one(self, bucket: str, limit: int) -> float:
        local = self.memory.blocked_for(bucket, limit)
        try:
            return max(local, self._shared().blocked_for_ms(bucket, limit) / 1000)
        except services.REDIS_ERRORS:
            return local

    def blocked_for(self, attempt: Attempt) -> float:
        """Seconds until ``attempt`` may be tried (0: now)."""
        for bucket, limit in attempt.buckets():
            wait = self._one(bucket, limit)
            if wait:
                return wait
        return 0.0

    def reserve(self, attempt: Attempt) -> tuple[float, Reserved]:
        """Check every bucket of ``attempt`` and count the try in all of them, in one atomic
        step, before any hash is computed: ``(0, reserved)`` when it may go ahead (it is a
        failure unless ``succeeded(attempt, reserved)`` takes it back), else ``(wait_s, ...)``
        and nothing is counted. N parallel tries cannot all pass a check made before any of
        them is counted."""
        buckets = attempt.buckets()
        wait, at = self.memory.try_reserve(buckets)
        if wait:
            return wait, Reserved()
        try:
            wait_ms, token = self._shared().try_reserve(buckets)
        except services.REDIS_ERRORS:
            return 0.0, Reserved(memory_at=at)  # counted in memory
        if wait_ms:
            self.memory.release([b for b, _ in buckets], at)
            return wait_ms / 1000, Reserved()
        return 0.0, Reserved(memory_at=at, token=token)

    def failed(self, attempt: Attempt) -> None:
        for bucket, _ in attempt.buckets():
            self.memory.failed(bucket)
            try:
                self._shared().failed(bucket)
            except services.REDIS_ERRORS:
                pass  # counted in memory

    def succeeded(self, attempt: Attempt, reserved: Reserved | None = None) -> None:
        """Forget the (account, address) failures, and the try ``reserved`` for this attempt;
        the address and account's earlier failures stay, so a valid login cannot be used to
        reset them between guesses."""
        if reserved is not None:
            self.release(attempt, reserved)
        bucket = attempt.buckets()[-1][0]
        self.memory.succeeded(bucket)
        try:
            self._shared().succeeded(bucket)
        except services.REDIS_ERRORS:
            pass


    def release(self, attempt: Attempt, reserved: Reserved) -> None:
        """Take back a try counted by ``reserve`` (it succeeded, or could not be checked)."""
        buckets = [b for b, _ in attempt.buckets()]
        if reserved.memory_at is not None:
            self.memory.release(buckets, reserved.memory_at)
        if reserved.token:
            try:
                self._shared().release(buckets, reserved.token)
            except services.REDIS_ERRORS:
                pass  # it leaves the window on its own


@dataclass(frozen=True)
class Reserved:
    """A try counted before it was checked: its time in this process's memory and its member
    in the Redis buckets, so that a success can take it back."""

    memory_at: float | None = None
    token: str = ""


class TooManyTries(Exception):
    """A login-limit bucket is full: the password was not checked."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"too many failed attempts; try again in {int(wait_s) + 1}s")
        self.wait_s = wait_s


def throttled(attempt: Attempt, check: Callable[[], _T]) -> _T:
    """``check()`` (a password hash), only when ``attempt`` may be tried: the try is reserved
    first (``TooManyTries`` when a bucket is full), and a truthy result takes it back. An
    exception (the database is down) takes it back too: nothing was checked."""
    limiter = svc_limiter()
    wait, reserved = limiter.reserve(attempt)
    if wait:
        raise TooManyTries(wait)
    try:
        result = check()
    except BaseException:
        limiter.release(attempt, reserved)
        raise
    if result:
        limiter.succeeded(attempt, reserved)
    return result


class MemoryLimiter:
    """Failures per bucket in a sliding window (memory of this process, thread-safe), keeping
    at most ``max_keys`` buckets (the least recently failed go first)."""

    def __init__(self, window_s: float = LOGIN_WINDOW_S,
                 max_keys: int = MEMORY_LIMITER_KEYS) -> None:
        self.window_s, self.max_keys = window_s, max_keys
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._failures.get(key) or deque()
        while q and q[0] <= now - self.window_s:
            q.popleft()
        return q

    def blocked_for(self, key: str, limit: int) -> float:
        now = time.monotonic()
        with self._lock:
            q = self._recent(key, now)
            return (q[0] + self.window_s - now) if len(q) >= limit else 0.0

    def try_reserve(self, buckets: list[tuple[str, int]]) -> tuple[float, float]:
        """``(0, at)`` with the try counted at ``at`` in every bucket, or ``(wait_s, 0)`` when
        one is full (nothing counted): checked and counted under one lock."""
        now = time.monotonic()
        with self._lock:
            recent = [(key, self._recent(key, now), limit) for key, limit in buckets]
            for _, q, limit in recent:
                if len(q) >= limit:
                    return max(q[0] + self.window_s - now, 1e-3), 0.0
            for key, q, _ in recent:
                q.append(now)
                self._failures[key] = q
                self._failures.move_to_end(key)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)
        return 0.0, now

    def release(self, keys: list[str], at: float) -> None:
        with self._lock:
            for key in keys:
                q = self._failures.get(key)
                if q is not None and at in q:
                    q.remove(at)

    def failed(self, key: str) -> None:
        now = time.monotonic()
        with self._lock:
            q = self._recent(key, now)
            q.append(now)
            self._failures[key] = q
            self._failures.move_to_end(key)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._failures)


class BasicCache:
    """Successful HTTP Basic checks, so a script (Prometheus scraping ``/metrics``) costs one
    argon2 hash per ``ttl_s``, not one per request. Keyed by the user's id, their session
    generation and an HMAC of the credentials under a key of this process (the password itself
    is never kept): a password change, role change, disable or "log out everywhere" moves the
    generation on, so the entry no longer matches. Bounded (least recently used go first);
    thread-safe."""

    def __init__(self, max_entries: int = BASIC_CACHE_ENTRIES,
                 ttl_s: float = BASIC_CACHE_TTL_S) -> None:
        self.max_entries, self.ttl_s = max_entries, ttl_s
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[tuple[int, int, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def _entry(self, info: UserInfo, password: str) -> tuple[int, int, str]:
        raw = f"{info.name}\x00{password}".encode("utf-8", "surrogatepass")
        return info.id, info.session_gen, hmac.new(self._key, raw, hashlib.sha256).hexdigest()

    def hit(self, info: UserInfo, password: str) -> bool:
        entry, now = self._entry(info, password), time.monotonic()
        with self._lock:
            expires = self._entries.get(entry)
            if expires is None or expires <= now:
                self._entries.pop(entry, None)
                return False
            self._entries.move_to_end(entry)
            return True

    def remember(self, info: UserInfo, password: str) -> None:
        entry = self._entry(info, password)
        with self._lock:
            self._entries[entry] = time.monotonic() + self.ttl_s
            self._entries.move_to_end(entry)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


# -- request helpers --------------------------------------------------------------------------
def csrf_token() -> str:
    token = session.get("csrf")
    if not token:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


def current_user() -> CurrentUser | None:
    user: CurrentUser | None = g.get("user")  # set by _load_user_and_check
    return user


def client_addr() -> str:
    return request.remote_addr or ""


def audit(action: str, target: str | None, outcome: str, reason: str | None = None,
          detail: dict[str, Any] | None = None, user: CurrentUser | None = None) -> None:
    """One audit entry for the current request's refusal (a change is recorded before it runs,
    by ``antre.actions.perform``). A database failure is logged, never raised here: refusals
    must still be answered."""
    who = user or current_user()
    svc = services.get()
    try:
        who_acted = Actor(who.name if who else "(anonymous)", who.role if who else None,
                          "dashboard", client_addr())
        record(svc.audit, who_acted, action, target, reason or None, outcome, detail)
        database_seen(None)
    except SQLAlchemyError as exc:
        database_seen(exc)
        services.log.error("audit write failed (%s): %s %s %s", services.scrubbed(exc), action,
                           target, outcome)


def database_seen(error: BaseException | None) -> None:
    """The database answered (``error`` None) or failed: the outage banner is set only when it
    could not be reached, and cleared by its next answer."""
    svc = services.get()
    if isinstance(error, AuditUnwritable):
        error = error.cause
    if error is None:
        svc.outages.ok("database")
    elif unreachable(error):
        svc.outages.failed("database")


def audit_seen(error: AuditUnwritable | None) -> None:
    """``antre.actions.perform``'s report on the audit entry it wrote first."""
    database_seen(error)


class AnonymousRefusals:
    """Refusals nobody can be named for, counted per action (thread-safe)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, action: str) -> int:
        with self._lock:
            self.counts[action] = n = self.counts.get(action, 0) + 1
            return n


def wants_json() -> bool:
    """API-like paths (``/api/``, ``/metrics``): read by scripts, answered in JSON, and a
    missing login is a 401 with a Basic challenge, not a redirect to the login page."""
    return request.path.startswith("/api/") or request.path == "/metrics"


def _is_browser_navigation() -> bool:
    if request.headers.get("Sec-Fetch-Mode") == "navigate":
        return True
    return "text/html" in (request.headers.get("Accept") or "")


def count_anonymous(action: str, status: int) -> None:
    counter: AnonymousRefusals = current_app.extensions["antre_anonymous_refusals"]
    n = counter.add(action)
    if n == 1 or n % 100 == 0:
        log.warning("anonymous request refused (%s, %s) from %s: %d so far in this process",
                    action, status, client_addr(), n)


def refuse(status: int, message: str, action: str, target: str | None = None) -> Response:
    """Answer a refused request (400/401/403/415); audit it when a user can be named,
    else count it."""
    if status != 401 and current_user() is not None:
        audit(action, target or request.path, "refused", request.form.get("reason") or None,
              {"status": status, "why": message, "method": request.method})
    elif status != 401:
        count_anonymous(action, status)
    if wants_json():
        resp = jsonify({"error": message, "status": status})
    else:
        resp = Response(render_template("refused.html", status=status, message=message),
                        mimetype="text/html")
    resp.status_code = status
    if status == 401 and wants_json() and not _is_browser_navigation():
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


# -- who is asking ----------------------------------------------------------------------------
class DatabaseDown(Exception):
    """The user database could not be read: the request cannot be authenticated."""


def _basic_user() -> CurrentUser | None:
    auth = request.authorization
    if auth is None or auth.type != "basic" or not auth.username:
        return None
    svc, password = services.get(), auth.password or ""
    cache: BasicCache = current_app.extensions["antre_basic_cache"]
    known = svc.users.get(normalise_name(auth.username))
    if known is not None and not known.disabled and cache.hit(known, password):
        return CurrentUser(known.name, known.role, "basic", known.id)
    attempt = Attempt.of(auth.username, client_addr())
    try:
        info = throttled(attempt, lambda: svc.users.verify(auth.username or "", password))
    except TooManyTries:
        abort(429)
    if info is None:
        return None
    cache.remember(info, password)
    return CurrentUser(info.name, info.role, "basic", info.id)


def session_lifetime_ms() -> int:
    return int(current_app.permanent_session_lifetime.total_seconds() * 1000)


def start_session(info: UserInfo | None) -> None:
    """A new session (and CSRF token) for ``info``: no fixation; signed with the user's id,
    session generation and the time of login."""
    session.clear()
    if info is None:  # deleted meanwhile: no session
        return
    session["uid"], session["gen"] = info.id, info.session_gen
    session["sid"] = secrets.token_urlsafe(18)  # this session, for its logout
    session["iat"] = services.get().clock()
    session.permanent = True
    csrf_token()


def end_session() -> None:
    """Log out: this session's id is recorded as ended until it would expire anyway (so a copy
    of the cookie no longer works), then the cookie is cleared."""
    sid = session.get("sid")
    if sid:
        expires_ms = int(session.get("iat") or 0) + session_lifetime_ms()
        try:
            services.get().users.end_session(str(sid), expires_ms)
        except SQLAlchemyError as exc:
            database_seen(exc)
            log.error("logout could not be recorded (%s): the cookie stays valid until it "
                      "expires or the user logs out everywhere", exc)
    session.clear()


def _session_valid(info: UserInfo) -> bool:
    if info.disabled or session.get("gen") != info.session_gen:
        return False
    age_ms = services.get().clock() - int(session.get("iat") or 0)
    return 0 <= age_ms < session_lifetime_ms()


def _session_user() -> CurrentUser | None:
    uid = session.get("uid")
    if not isinstance(uid, int) or isinstance(uid, bool):
        if session.get("user"):  # a cookie of the name-based format: log in again
            session.clear()
        return None
    svc = services.get()
    try:
        info = svc.users.for_session(uid, str(session.get("sid") or ""))
        database_seen(None)
    except SQLAlchemyError as exc:
        database_seen(exc)
        raise DatabaseDown(str(exc)) from exc
    if info is None or not _session_valid(info):
        session.clear()
        return None
    return CurrentUser(info.name, info.role, "session", info.id)


def svc_limiter() -> LoginLimiter:
    limiter: LoginLimiter = current_app.extensions["antre_login_limiter"]
    return limiter


def _database_down() -> Response:
    message = "the user database is unreachable, so nobody can be authenticated; try again"
    if wants_json():
        resp = jsonify({"error": message, "backend": "database", "status": 503})
    else:
        resp = Response(render_template("outage.html", stale_html=None), mimetype="text/html")
    resp.status_code = 503
    resp.headers["Retry-After"] = "5"
    return resp


def _cross_site() -> str | None:
    """Why this request looks sent by another site, or None."""
    site = request.headers.get("Sec-Fetch-Site")
    if site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {site}"
    origin = request.headers.get("Origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc != request.host):
        return f"Origin {origin[:100]} is not {request.host[:100]}"
    return None


def _write_refused(user: CurrentUser | None) -> Response | None:
    """The checks every write passes: same site, JSON for the API, CSRF token for sessions."""
    why = _cross_site()
    if why:
        return refuse(403, f"refused: a change sent from another site ({why})",
                      request.endpoint or "?")
    if wants_json() and request.mimetype != "application/json":
        return refuse(415, "API changes take a JSON body (Content-Type: application/json)",
                      request.endpoint or "?")
    if user is not None and user.via in ("session", delegated.VIA) and not _csrf_ok(
            request.headers.get("X-CSRF-Token") or request.form.get("csrf_token") or ""):
        return refuse(400, "refused: missing or wrong CSRF token (reload the page and try "
                           "again)", request.endpoint or "?")
    return None


def _csrf_ok(sent: str) -> bool:
    expected = session.get("csrf") or ""
    # bytes: compare_digest refuses a str that is not ASCII (a token nobody issued)
    return bool(expected) and hmac.compare_digest(
        str(sent).encode("utf-8", "surrogatepass"), str(expected).encode("utf-8", "surrogatepass"))


def _who() -> CurrentUser | None:
    creds = request.authorization
    scripted = request.path.startswith(("/api/", "/metrics")) and creds is not None
    host = delegated.of()
    if host is not None and not (scripted and creds is not None and creds.type == "basic"):
        found = delegated.host_user(host)  # the host's user (HTTP Basic: Antre's own)
        delegated.own_session(None if found is None else found[0])
        return None if found is None else CurrentUser(found[0], found[1], delegated.VIA)
    if scripted:
        try:
            user = _basic_user()
        except SQLAlchemyError as exc:
            database_seen(exc)
            if unreachable(exc):
                raise DatabaseDown(str(exc)) from exc
            log.warning("credentials the user database cannot look up (%s)",
                        services.scrubbed(exc))
            user = None  # a name the database refuses (a NUL, say) is nobody's
        else:
            database_seen(None)  # the user database answered: any outage is over
        if user is None:
            abort(refuse(401, "wrong user name or password", "login"))
        return user
    return _session_user()


def _load_user_and_check() -> BaseResponse | None:
    """None lets the request through; a response (a refusal or the way to log in) ends it."""
    host = delegated.of()
    if host is not None and request.blueprint == "auth":
        return delegated.own_login_page(host)
    if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None:
        if request.method in UNSAFE and request.endpoint is not None:
            return _write_refused(None)
        return None
    try:
        user = _who()
    except DatabaseDown:
        return _database_down()
    except delegated.BadHostUser as exc:
        return delegated.refused_bad_user(exc)
    if user is None and host is not None:
        return delegated.not_logged_in(host, wants_json())
    if user is None:
        if wants_json():
            return refuse(401, "log in first (session cookie or HTTP Basic)", "login")
        return redirect(url_for("auth.login",
                                next=request.script_root + request.full_path.rstrip("?")))
    g.user = user
    if request.method in UNSAFE:
        return _write_refused(user)
    return None


def check_login_csrf() -> Response | None:
    if not _csrf_ok(request.form.get("csrf_token") or ""):
        return refuse(400, "refused: missing or wrong CSRF token (reload the page and try "
                           "again)", "login")
    return None


def _security_headers(resp: Response) -> Response:
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("X-Frame-Options", "DENY")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    resp.headers.setdefault("Content-Security-Policy", CSP)
    if request.is_secure or current_app.config.get("SESSION_COOKIE_SECURE"):
        resp.headers.setdefault("Strict-Transport-Security", HSTS)
    if request.endpoint != "static":
        resp.headers.setdefault("Cache-Control", "no-store")
    return resp


def _relative_location(resp: Response) -> Response:
    """Every redirect to this site is relative (``/path?query``): the ``Host`` a client sent
    (Werkzeug's slash redirects build absolute URLs from it) is never reflected back."""
    location = resp.headers.get("Location")
    if location:
        parts = urlsplit(location)
        if parts.netloc and parts.netloc == request.host:
            resp.headers["Location"] = urlunsplit(("", "", parts.path or "/", parts.query,
                                                   parts.fragment))
    return resp


def trust_proxies(app: Flask, count: int) -> None:
    """Behind ``count`` reverse proxies: take the client address, scheme and host from their
    ``X-Forwarded-*`` headers (only the last ``count`` hops: a client cannot forge them)."""
    if count > 0:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=count, x_proto=count,  # type: ignore[method-assign]
                                x_host=count)


def install(app: Flask) -> None:
    check_secret_key(app.config.get("SECRET_KEY"))
    trust_proxies(app, int(app.config.get("ANTRE_TRUSTED_PROXIES") or 0))
    app.extensions["antre_login_limiter"] = LoginLimiter()
    app.extensions["antre_anonymous_refusals"] = AnonymousRefusals()
    app.extensions["antre_basic_cache"] = BasicCache()
    app.before_request(_load_user_and_check)
    app.after_request(_security_headers)
    app.after_request(_relative_location)
    app.jinja_env.globals["csrf_token"] = csrf_token
    app.jinja_env.globals["current_user"] = current_user
