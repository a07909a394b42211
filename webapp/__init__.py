"""The operations dashboard: ``create_app(config)`` builds the Flask app.

Config keys: ``ANTRE_REDIS_URL``, ``ANTRE_DATABASE_URL`` (default: ``antre.db`` in the current
directory), ``SECRET_KEY`` (default: env ``ANTRE_SECRET_KEY``; required: at least 32 bytes and
not a placeholder, else ``InsecureConfig`` says how to make one), ``ANTRE_TRUSTED_PROXIES``
(default: env of that name, else 0: how many reverse proxies' ``X-Forwarded-*`` headers to
believe), ``TRUSTED_HOSTS`` (default: env ``ANTRE_TRUSTED_HOSTS``, comma-separated: the host
names this dashboard answers to; any other ``Host`` is a 400), ``ANTRE_APP`` (a prebuilt ``antre.Antre``, whose handlers tell which job types are
not idempotent) and ``ANTRE_CLOCK`` (tests). ``PERMANENT_SESSION_LIFETIME`` (default 12 hours,
env ``ANTRE_SESSION_HOURS``) is the absolute lifetime of a session from its login.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from flask import Flask

from . import (
    api,
    audit,
    auth,
    common,
    control,
    dlq,
    edit,
    errors,
    find,
    find_api,
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
ROOT = os.path.dirname(HERE)
BLUEPRINTS = (auth.bp, overview.bp, inflight.bp, scheduled.bp, dlq.bp, locks.bp, workers.bp,
              idempotency.bp, audit.bp, users.bp, api.bp, metrics.bp, schedules.bp,
              find.bp, find_api.bp,  # finder, job timelines, browse (issue 11)
              control.bp,  # incident controls: pause, cancel, purge
              incident.bp, errors.bp, edit.bp,  # incidents, error groups, edited replay
              groups.bp,  # fair-share groups (issue 23)
              perf.bp)  # performance per job type (issue 25)


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


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__, template_folder=asset_dir("templates"),
                static_folder=asset_dir("static"), static_url_path="/static")
    app.config.update(
        SECRET_KEY=os.environ.get("ANTRE_SECRET_KEY") or None,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=os.environ.get("ANTRE_SECURE_COOKIES", "") == "1",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=float(os.environ.get("ANTRE_SESSION_HOURS")
                                                         or 12)),
        ANTRE_TRUSTED_PROXIES=int(os.environ.get("ANTRE_TRUSTED_PROXIES") or 0),
        TRUSTED_HOSTS=trusted_hosts(os.environ.get("ANTRE_TRUSTED_HOSTS", "")),
        MAX_CONTENT_LENGTH=1024 * 1024,
        JSON_SORT_KEYS=False,
    )
    app.config.update(config or {})
    security.check_secret_key(app.config.get("SECRET_KEY"))  # before connecting to anything
    services.install(app, dict(app.config))
    security.install(app)
    common.install(app)
    control.install_globals(app)
    incident.install_globals(app)
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    table_routes.install(app)
    return app


InsecureConfig = security.InsecureConfig

__all__ = ["InsecureConfig", "create_app"]
