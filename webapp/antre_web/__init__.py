"""The operations dashboard: ``create_app(config)`` builds the Flask app.

Config keys: ``ANTRE_REDIS_URL``, ``ANTRE_DATABASE_URL`` (default: ``antre.db`` in the current
directory), ``SECRET_KEY`` (default: env ``ANTRE_SECRET_KEY``; required: at least 32 bytes and
not a placeholder, else ``InsecureConfig`` says how to make one), ``ANTRE_TRUSTED_PROXIES``
(default: env of that name, else 0: how many reverse proxies' ``X-Forwarded-*`` headers to
believe), ``TRUSTED_HOSTS`` (default: env ``ANTRE_TRUSTED_HOSTS``, comma-separated: the host
names this dashboard answers to; any other ``Host`` is a 400), ``ANTRE_APP`` (a prebuilt ``antre.Antre``, whose handlers tell which job types are
not idempotent) and ``ANTRE_CLOCK`` (tests). ``PERMANENT_SESSION_LIFETIME`` (default 12 hours,
env ``ANTRE_SESSION_HOURS``) is the absolute lifetime of a session from its login.

``auth``: a ``HostAuth`` (``delegated.py``): the host application says who is logged in, and
Antre's own login is never served. ``mount(host, prefix, user=...)`` builds such a dashboard and
serves it under ``prefix`` of a Flask host (``wsgi_mount`` for any other WSGI application).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from flask import Flask, Request
from flask.globals import request as flask_request
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from antre import settings
from antre.observe import otel_metrics

from .common import is_local_path
from .delegated import HostAuth, HostUser, UserOf

from . import (
    api,
    audit,
    auth,
    common,
    control,
    delegated,
    dlq,
    edit,
    errors,
    find,
    find_api,
    flows,
    flows_api,
    groups,
    idempotency,
    incident,
    inflight,
    locks,
    metrics,
    overview,
    perf,
    scheduled,
    schedules,
    security,
    services,
    table_routes,
    users,
    workers,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the checkout: webapp/antre_web -> the top
BLUEPRINTS = (auth.bp, overview.bp, inflight.bp, scheduled.bp, dlq.bp, locks.bp, workers.bp,
              idempotency.bp, audit.bp, users.bp, api.bp, metrics.bp, schedules.bp,
              find.bp, find_api.bp,  # finder, job timelines, browse
              control.bp,  # incident controls: pause, cancel, purge
              incident.bp, errors.bp, edit.bp,  # incidents, error groups, edited replay
              groups.bp,  # fair-share groups
              flows.bp, flows_api.bp,  # flows
              perf.bp)  # performance per job type


def asset_dir(name: str) -> str:
    """``templates`` or ``static``: inside the installed package (the wheel maps the repo's
    top-level folders there), else the repo's top level (a checkout or an editable install)."""
    inside = os.path.join(HERE, name)
    return inside if os.path.isdir(inside) else os.path.join(ROOT, name)


def trusted_hosts(setting: str) -> list[str] | None:
    """``ANTRE_TRUSTED_HOSTS`` (comma-separated host names; ``.example.org`` also allows its
    subdomains) as Flask's ``TRUSTED_HOSTS``: a request for any other ``Host`` is a 400.
    None (every host) when unset."""
    hosts = [h.strip() for h in setting.split(",") if h.strip()]
    return hosts or None


def create_app(config: dict[str, Any] | None = None, auth: HostAuth | None = None) -> Flask:
    app = Flask(__name__, template_folder=asset_dir("templates"),
                static_folder=asset_dir("static"), static_url_path="/static")
    app.config.update(
        SECRET_KEY=settings.SECRET_KEY.get(),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.SECURE_COOKIES.get(),
        PERMANENT_SESSION_LIFETIME=timedelta(hours=settings.SESSION_HOURS.get()),
        ANTRE_TRUSTED_PROXIES=settings.TRUSTED_PROXIES.get(),
        TRUSTED_HOSTS=trusted_hosts(settings.TRUSTED_HOSTS.get()),
        MAX_CONTENT_LENGTH=1024 * 1024,
        JSON_SORT_KEYS=False,
    )
    app.config.update(config or {})
    delegated.install(app, auth)
    security.check_secret_key(app.config.get("SECRET_KEY"))  # before connecting to anything
    svc = services.install(app, dict(app.config))
    # OpenTelemetry metrics beside /metrics, when an SDK meter provider is configured
    app.extensions["antre_otel_metrics"] = otel_metrics.install_if_configured(svc.redis,
                                                                              svc.clock)
    security.install(app)
    common.install(app)
    control.install_globals(app)
    incident.install_globals(app)
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    table_routes.install(app)
    return app


def wsgi_mount(host: Any, prefix: str, dashboard: Flask) -> DispatcherMiddleware:
    """Any WSGI application (Django's ``get_wsgi_application()``, ...) with ``dashboard``
    served under ``prefix``: werkzeug's ``DispatcherMiddleware`` sets ``SCRIPT_NAME``, so every
    link, form, htmx request and static file of the dashboard carries the prefix."""
    return DispatcherMiddleware(host, {_clean(prefix): dashboard})


def mount(host: Flask, prefix: str = "/antre", *, user: UserOf, login_url: str | None = None,
          logout_url: str | None = None, config: dict[str, Any] | None = None) -> Flask:
    """The dashboard inside the Flask app ``host``, under ``prefix``, its users the host's.

    ``user(request)`` runs inside the host's own request context (its ``flask.session``,
    Flask-Login's ``current_user``, ...), gets the host's ``request`` and returns ``(name,
    role)`` or None; None sends a page to ``login_url`` (``?next=`` the page) or answers 401.
    ``config`` is ``create_app``'s (``SECRET_KEY``: the dashboard's own, not the host's; its
    cookie is ``antre_session`` on ``prefix``). Returns the dashboard's Flask app."""
    prefix = _clean(prefix)
    settings = {"SESSION_COOKIE_PATH": prefix, **(config or {})}
    dashboard = create_app(settings, auth=HostAuth(_in_host(host, user), login_url,
                                                   logout_url))
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {prefix: dashboard})  # type: ignore[method-assign]
    return dashboard


def _in_host(host: Flask, user: UserOf) -> UserOf:
    """``user`` asked inside the host's request context for the same request."""
    def ask(request: Request) -> HostUser:
        with host.request_context(request.environ):
            return user(flask_request)
    return ask


def _clean(prefix: str) -> str:
    cleaned = "/" + prefix.strip("/")
    if cleaned == "/":
        raise ValueError("mount the dashboard under a prefix such as '/antre', not at '/'")
    return cleaned


InsecureConfig = security.InsecureConfig

__all__ = ["HostAuth", "InsecureConfig", "create_app", "is_local_path", "mount", "wsgi_mount"]
