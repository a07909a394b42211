"""Authentication delegated to a host application: the dashboard mounted inside a
host WSGI app asks the host who is logged in, as Sidekiq Web does in Rails and Oban Web in
Phoenix. ``create_app(config, auth=HostAuth(user=...))`` or ``antre_web.mount(host, ...)``.

``HostAuth.user(request)`` returns ``(name, role)`` (role: viewer, operator or admin) or None.
With it:

- every request's user is the host's answer, read afresh on every request (no Antre login,
  no Antre user database needed for it); changes remain POSTs with the CSRF token of the
  dashboard's own session cookie (made anew whenever the host's user changes), checked
  against the host's role, audited under the host's user name (in the audit log of ``ANTRE_DATABASE_URL``, as without delegation);
- None: a page is redirected to ``login_url`` (with ``next=`` the page asked for), or, without
  one, answered 401; the JSON API always answers 401; Antre's own login form, logout and
  account pages are never served (they say to log in through the host);
- a role that is none of the three is a 403 saying what the host must return, and logged;
- HTTP Basic on ``/api/`` still checks Antre's own users (scripts), when the header says Basic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from flask import (Flask, Request, Response, current_app, jsonify, redirect, render_template,
                   request, session)
from werkzeug.wrappers import Response as BaseResponse

from antre.stores.users import ROLES

log = logging.getLogger("antre.webapp.delegated")

#: What the host's callable returns: ``(user name, role)``, or None when nobody is logged in.
HostUser = tuple[str, str] | None
UserOf = Callable[[Request], HostUser]
VIA = "host"
MAX_NAME = 200


@dataclass(frozen=True)
class HostAuth:
    """The host's answer to "who is asking": ``user(request)``; where to send a request it
    has no user for (``login_url``, None: 401) and the host's logout (``logout_url``, shown in
    the header's menu when given)."""

    user: UserOf
    login_url: str | None = None
    logout_url: str | None = None


class BadHostUser(Exception):
    """The host's callable returned something that is not ``(name, role)`` or None."""


def of(app: Flask | None = None) -> HostAuth | None:
    """The dashboard's ``HostAuth``, or None when it logs its users in itself."""
    found: HostAuth | None = (app or current_app).extensions.get("antre_host_auth")
    return found


def install(app: Flask, auth: HostAuth | None) -> None:
    app.extensions["antre_host_auth"] = auth
    app.jinja_env.globals["host_auth"] = of
    if auth is not None:
        if app.config.get("SESSION_COOKIE_NAME") == "session":  # Flask's default: the host's
            app.config["SESSION_COOKIE_NAME"] = "antre_session"


def host_user(auth: HostAuth) -> tuple[str, str] | None:
    """``(name, role)`` from the host for this request, checked; raises ``BadHostUser``."""
    answer = auth.user(request)
    if answer is None:
        return None
    if not (isinstance(answer, tuple) and len(answer) == 2
            and all(isinstance(part, str) for part in answer)):
        raise BadHostUser(f"the host's user callable returned {type(answer).__name__}; it must "
                          "return (name, role) or None")
    name, role = answer[0].strip()[:MAX_NAME], answer[1]
    if not name:
        raise BadHostUser("the host's user callable returned an empty user name")
    if role not in ROLES:
        raise BadHostUser(f"the host's user callable returned the role {role[:40]!r}; it must "
                          f"be one of {', '.join(ROLES)}")
    return name, role


def own_session(name: str | None) -> None:
    """The dashboard's session (its CSRF token) belongs to one host user: when the host's user
    changes or logs out, the token is made anew, so a page the one before left open (or a token
    they saw) changes nothing for the one after."""
    if session.get("host_user") == name:
        return
    session.pop("csrf", None)
    if name is None:
        session.pop("host_user", None)
    else:
        session["host_user"] = name


def refused_bad_user(exc: BadHostUser) -> Response:
    log.error("delegated login refused: %s", exc)
    return _answer(403, f"{exc} (a fault in the host application's set-up)")


def not_logged_in(auth: HostAuth, json: bool) -> BaseResponse:
    """No user from the host: its login page (a redirect with ``next``), else a 401."""
    if auth.login_url and not json:
        nxt = request.script_root + request.full_path.rstrip("?")
        sep = "&" if "?" in auth.login_url else "?"
        return redirect(f"{auth.login_url}{sep}{urlencode({'next': nxt})}")
    return _answer(401, "log in to the host application first")


def own_login_page(auth: HostAuth) -> BaseResponse:
    """Antre's login, logout and account pages while the host logs users in: never served."""
    if request.endpoint == "auth.logout" and auth.logout_url:
        return redirect(auth.logout_url, code=303)
    if request.endpoint == "auth.login" and auth.login_url:
        return redirect(auth.login_url)
    return _answer(404, "this dashboard's users log in through the host application")


def _answer(status: int, message: str) -> Response:
    if request.path.startswith("/api/") or request.path == "/metrics":
        resp = jsonify({"error": message, "status": status})
    else:
        resp = Response(render_template("refused.html", status=status, message=message),
                        mimetype="text/html")
    resp.status_code = status
    return resp
