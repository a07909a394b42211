"""Helpers shared by the blueprints: rendering a page or its htmx partial, outage handling,
formatting filters, request parsing."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import redis

from flask import (
    Flask,
    flash,
    redirect,
    Response,
    abort,
    current_app,
    jsonify,
    render_template,
    request,
    session,
)
from flask.globals import request_ctx
from markupsafe import Markup, escape
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.wrappers import Response as BaseResponse

from antre.observe.alerts import AlertEngine
from antre.engine import states
from antre.engine.envelope import Job
from antre.engine.keys import valid_name
from antre.observe.readmodels import MAX_EPOCH_MS as MAX_EPOCH_MS, WINDOWS_MS as WINDOWS_MS
from antre.observe.readmodels import DeadFilter

from . import services
from .actions import Result
from .security import audit, current_user
from .services import REDIS_ERRORS, redact

DB_ERRORS = (OperationalError, InterfaceError, PoolTimeout)
# (MAX_EPOCH_MS and WINDOWS_MS: the DLQ filter's, antre.observe.readmodels)


class LastGood:
    """The last partial rendered for (session, URL), shown under the outage banner so the
    on-call engineer still sees the last known numbers with their "as of" times."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: tuple[str, str], html: str) -> None:
        with self._lock:
            self._items[key] = html
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def get(self, key: tuple[str, str]) -> str | None:
        with self._lock:
            return self._items.get(key)


def is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true" and not request.headers.get("HX-Boosted")


def _cache_key() -> tuple[str, str]:
    return (str(session.get("csrf", "")), request.full_path)


def render(page: str, partial: str, /, redis_read: bool = True, **ctx: Any) -> str:
    """The page, or only its partial for an htmx poll; remembers the partial as last good.
    ``redis_read``: the data came from Redis, so Redis is reachable again."""
    if redis_read:
        services.get().outages.ok("redis")
    html = render_template(partial, **ctx)
    last_good().put(_cache_key(), html)
    if is_htmx():
        return html
    return render_template(page, partial_html=Markup(html), **ctx)


def last_good() -> LastGood:
    cache: LastGood = current_app.extensions["antre_last_good"]
    return cache


def _outage(backend: str, exc: Exception) -> Response | str:
    svc = services.get()
    since = svc.outages.failed(backend)
    services.log.warning("%s unreachable: %s", backend, services.scrubbed(exc))
    if request.path.startswith("/api/"):
        what = "Redis" if backend == "redis" else "the database"
        resp = jsonify({"error": f"{what} is unreachable: the request was not done",
                        "backend": backend, "since_ms": since})
        resp.status_code = 503
        return resp
    stale = last_good().get(_cache_key())
    ctx = {"stale_html": Markup(stale) if stale else None}
    if is_htmx():
        return render_template("_outage.html", partial=True, **ctx)
    return render_template("outage.html", **ctx)


def outage_banners() -> list[str]:
    svc = services.get()
    out = []
    since = svc.outages.since("redis")
    if since is not None:
        out.append(f"Redis at {redact(svc.redis_url)} is unreachable since {fmt_ts(since)}: the "
                   "numbers below are not live; workers keep retrying.")
    since = svc.outages.since("database")
    if since is not None:
        out.append(f"The database at {redact(svc.database_url)} is unreachable since "
                   f"{fmt_ts(since)}: idempotency records, users and the audit log cannot be "
                   "read; changes are refused until it is back.")
    return out


def alert_banners() -> list[Any]:
    """Firing alerts (the rules run in the worker pool's scheduler); none before login: they
    name queues and counts."""
    if current_user() is None:
        return []
    svc = services.get()
    try:
        return AlertEngine(svc.redis, svc.clock).active()
    except REDIS_ERRORS:
        return []  # the outage banner says it


# -- formatting -------------------------------------------------------------------------------
def count_of(n: Any, noun: str = "job") -> str:
    """'1 job', '2 jobs' (and '1 dead job', '3 dead jobs')."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_ts(ms: Any) -> str:
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return ""
    if ms <= 0:
        return "—"
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%d %H:%M:%S UTC")


def when(ms: Any) -> Markup:
    """A ``<time>`` antre.js shows as "3 min ago" with the absolute time (UTC or local, the
    operator's choice) on hover and on keyboard focus (it is focusable); without scripts it reads as the absolute UTC time. Takes epoch
    ms or a datetime (naive ones are UTC, as the database stores them)."""
    if isinstance(ms, datetime):
        ms = int((ms if ms.tzinfo else ms.replace(tzinfo=UTC)).timestamp() * 1000)
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return Markup("")
    if ms <= 0:
        return Markup("—")
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text, iso = dt.strftime("%Y-%m-%d %H:%M:%S UTC"), dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # digits, '-', ':', '.', ' ' and letters strftime wrote: nothing to escape (Markup.format,
    # which escapes each part, costs a third of a 200-row page's render time)
    return Markup(f'<time class="when" datetime="{iso}" data-ms="{ms}" title="{text}" '
                  f'tabindex="0">{text}</time>')


def fmt_dur(ms: Any) -> str:
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return ""
    sign = "-" if ms < 0 else ""
    s = abs(ms) / 1000
    if s < 60:
        return f"{sign}{s:.1f}s"
    if s < 3600:
        return f"{sign}{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{sign}{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{sign}{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


# -- request parsing ---------------------------------------------------------------------------
_INT_RE = re.compile(r"^\s*[+-]?[0-9]{1,18}\s*$")
_ASCII_DIGITS = re.compile(r"[0-9]{1,18}")


def arg_int(name: str, default: int, lo: int = 0, hi: int = 10**12, src: Any = None) -> int:
    """A whole number from the query (or ``src``), clamped to ``lo..hi``; anything else
    (``inf``, ``1e400``, ``abc``, ``2.5``) is a 400 that names the field."""
    src = request.args if src is None else src
    raw = src.get(name)
    if raw in (None, ""):
        return max(lo, min(hi, default))
    if not _INT_RE.match(str(raw)):
        abort(400, f"{name} must be a whole number")
    return max(lo, min(hi, int(raw)))


def queue_arg(default: str | None = None, busiest: str | None = None) -> str:
    """The ``queue`` argument; without one, the queue with the most jobs in ``busiest`` (an
    attribute of ``QueueInfo``: 'dead', 'inflight', ...), so a page opens where the work is."""
    svc = services.get()
    name = request.args.get("queue") or request.form.get("queue") or default
    if not name:
        names = svc.reads.queue_names()
        name = names[0] if names else svc.antre.default_queue
        if busiest and len(names) > 1:
            name = max(names, key=lambda n: getattr(svc.reads.queue_info(n), busiest))
            if request.method == "GET" and request.endpoint:
                # name the chosen queue in the URL, so polling and links stay on it; the query
                # is copied as data (never as url_for's arguments: endpoint, _anchor, ...)
                url_args = [(k, v) for k, v in request.args.items(multi=True) if k != "queue"]
                abort(redirect(f"{request.script_root}{request.path}?{urlencode([*url_args, ('queue', name)])}"))
    if not valid_name(name):
        abort(400, "bad queue name")
    return name


def check_queue(name: str) -> str:
    if not valid_name(name):
        abort(404, "no such queue")
    return name


def job_or_404(queue: str, job_id: str) -> Job:
    """The job, or a 404 naming it (the queue name checked first)."""
    found = services.get().reads.job(check_queue(queue), job_id)
    if found is None:
        abort(404, f"no job {job_id} in queue {queue}")
    return found


def page_args(default_limit: int = 50, src: Any = None) -> tuple[int, int]:
    """``offset`` and ``limit`` (1..500) of a paged table or API read."""
    return arg_int("offset", 0, src=src), arg_int("limit", default_limit, 1, 500, src=src)


def selected_ids(limit: int) -> list[str]:
    """The rows ticked in a selectable table (form field ``ids``), in order, without repeats."""
    ids = list(dict.fromkeys(v for v in request.form.getlist("ids") if v))
    if not ids:
        abort(400, "no rows selected: tick the jobs to act on, then press the button")
    if len(ids) > limit:
        abort(400, f"{len(ids)} rows selected; at most {limit} at a time")
    return ids


def lease_ref(value: str) -> tuple[int, str]:
    """A selected in-flight row: ``<epoch>:<job id>`` (the lease the operator saw)."""
    epoch, _, job_id = str(value).partition(":")
    if not _ASCII_DIGITS.fullmatch(epoch) or not job_id:
        abort(400, f"bad row {value!r}: expected <epoch>:<job id>")
    return int(epoch), job_id


def answer(result: Result, partial: Callable[[Result], str], back_url: str) -> str | BaseResponse:
    """A selection's answer: for htmx, the refreshed partial (``partial(result)``) with the
    result shown in place; without scripts, a flash message and a redirect back."""
    if is_htmx():
        return partial(result)
    flash(result.message, "ok" if result.ok else "error")
    for problem in result.detail.get("problems", [])[:10]:
        flash(problem, "error")
    return redirect(back_url, code=303)


def time_window(src: Any, now_ms: int) -> tuple[int | None, int | None]:
    """``(since_ms, until_ms)`` from query/form fields: ``window`` (15m..7d) or ``since_ms`` /
    ``until_ms`` (epoch milliseconds; they win over the window)."""
    since = until = None
    window = src.get("window") or ""
    if window in WINDOWS_MS:
        since = now_ms - WINDOWS_MS[window]
    for name in ("since_ms", "until_ms"):
        raw = src.get(name)
        if raw not in (None, ""):
            try:
                value = int(raw)
            except (TypeError, ValueError):
                abort(400, f"{name} must be epoch milliseconds")
            if not 0 <= value <= MAX_EPOCH_MS:
                abort(400, f"{name} must be epoch milliseconds from 0 to {MAX_EPOCH_MS}")
            if name == "since_ms":
                since = value
            else:
                until = value
    return since, until


def audit_filter(src: Any, now_ms: int) -> dict[str, Any]:
    """Audit log filters from query fields: action, user, and a time window (``window``
    15m..7d, or ``since_ms`` / ``until_ms``); keyword arguments of ``AuditLog.list`` & co."""
    since, until = time_window(src, now_ms)
    return {"action": src.get("action") or None, "user": src.get("user") or None,
            "since_ms": since, "until_ms": until, "target": (src.get("target") or None)}


def dead_filter(src: Any, now_ms: int) -> DeadFilter:
    """A DLQ filter from query/form fields: type, group, window (15m..7d) or since/until ms."""
    since, until = time_window(src, now_ms)
    job_type = src.get("type") or None
    group = src.get("group") or None
    for v in (job_type, group):
        if v is not None and (len(v) > 200 or "{" in v or "}" in v):
            abort(400, "bad filter value")
    return DeadFilter(job_type=job_type, group=group, since_ms=since, until_ms=until)


def filter_args(flt: DeadFilter, window: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if flt.job_type:
        out["type"] = flt.job_type
    if flt.group:
        out["group"] = flt.group
    if window in WINDOWS_MS:
        out["window"] = window
    else:
        if flt.since_ms is not None:
            out["since_ms"] = flt.since_ms
        if flt.until_ms is not None:
            out["until_ms"] = flt.until_ms
    return out


def is_local_path(target: str) -> bool:
    """Whether ``target`` is a path on this site: it starts with one ``/``, has no scheme or
    host however a browser reads it, and holds no whitespace, control character or backslash
    (browsers drop tabs and newlines, so ``/%09/evil.example`` would become ``//evil.example``)."""
    if not target.startswith("/") or target.startswith("//") or len(target) > 2000:
        return False
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in target):
        return False
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc


def safe_next(default: str) -> str:
    nxt = request.form.get("next") or request.args.get("next") or ""
    return nxt if is_local_path(nxt) else default


def _bad_request(message: str) -> Response:
    if request.path.startswith("/api/"):
        resp = jsonify({"error": message, "status": 400})
    else:
        resp = Response(render_template("refused.html", status=400, message=message),
                        mimetype="text/html")
    resp.status_code = 400
    return resp


def _too_deep(exc: RecursionError) -> Response:
    """A body or argument nested beyond what Python can walk (a JSON body 100k deep)."""
    services.log.warning("request refused: nested too deeply (%s %s)", request.method,
                         request.path)
    return _bad_request("the request is nested too deeply: send a flatter JSON body")


def _redis_refused(exc: redis.ResponseError) -> Response:
    """Redis refused a command built from this request's arguments (an offset out of range,
    say): the request is wrong, not the server; nothing was changed by a refused command."""
    why = services.scrubbed(exc)[:200]
    services.log.warning("Redis refused a command of %s %s: %s", request.method, request.path,
                         why)
    return _bad_request(f"Redis refused this request ({why}): check its arguments (offsets, "
                        "cursors and counts must be small whole numbers)")


def _audit_bad_change(message: str) -> None:
    """A logged-in user's change refused as bad input (400) is audited under the action's
    name (reads are not: a mistyped filter is no change)."""
    if request.method not in ("POST", "PUT", "PATCH", "DELETE") or current_user() is None:
        return
    view = current_app.view_functions.get(request.endpoint or "")
    action = getattr(view, "table_action", None) or request.endpoint or "?"
    audit(action, request.path, "refused", None,
          {"status": 400, "why": message[:500], "method": request.method})


def install(app: Flask) -> None:
    app.extensions["antre_last_good"] = LastGood()
    for redis_exc in REDIS_ERRORS:
        app.register_error_handler(redis_exc, lambda e: _outage("redis", e))
    for db_exc in DB_ERRORS:
        app.register_error_handler(db_exc, lambda e: _outage("database", e))
    app.register_error_handler(RecursionError, _too_deep)
    app.register_error_handler(redis.ResponseError, _redis_refused)
    app.jinja_env.filters["ts"] = fmt_ts
    app.jinja_env.filters["when"] = when
    app.jinja_env.filters["jobs"] = count_of
    app.jinja_env.filters["dur"] = fmt_dur
    app.jinja_env.filters["pretty_json"] = pretty_json
    app.jinja_env.globals["S"] = states  # job and flow states: S.DEAD, S.FLOW_WAITING
    app.jinja_env.globals["outage_banners"] = outage_banners
    app.jinja_env.globals["alert_banners"] = alert_banners
    app.jinja_env.globals["clock"] = lambda: services.get().clock()

    @app.errorhandler(400)
    @app.errorhandler(404)
    @app.errorhandler(405)
    @app.errorhandler(429)
    def _http_error(e: Any) -> Response:
        message = getattr(e, "description", "") or str(e)
        if e.code == 429:
            message = "too many attempts; wait a minute and try again"
        if request_ctx.url_adapter is None:  # a Host outside TRUSTED_HOSTS: no URLs to build
            return Response(f"{e.code}: this dashboard does not answer to that host name "
                            "(ANTRE_TRUSTED_HOSTS)\n", status=e.code, mimetype="text/plain")
        if e.code == 400:
            _audit_bad_change(message)
        if request.path.startswith("/api/"):
            resp = jsonify({"error": message, "status": e.code})
        else:
            resp = Response(render_template("refused.html", status=e.code, message=message),
                            mimetype="text/html")
        resp.status_code = e.code
        return resp
