"""Log in and out, and the user's own account page: log out everywhere (changing your own
password is the table of actions' ``users.password.change``, ``antre/actions/users.py``).

Login attempts are rate-limited per client address, per account and per (account, address)
(``security.LoginLimiter``)."""

from __future__ import annotations

import hashlib

from flask import (
    Blueprint,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.wrappers import Response

from antre.actions import by_name
from antre.stores.sql import unreachable
from antre.stores.users import MIN_PASSWORD_LENGTH, normalise_name

from . import actions, services
from .common import safe_next
from .incident import view as incident_view
from .security import (
    Attempt,
    CurrentUser,
    audit,
    database_seen,
    check_login_csrf,
    client_addr,
    count_anonymous,
    csrf_token,
    current_user,
    end_session,
    requires,
    TooManyTries,
    start_session,
    throttled,
)

bp = Blueprint("auth", __name__)

UNKNOWN_USER = "(unknown user)"


def typed_name_digest(name: str) -> str:
    """What a failed login records of the name typed: a short SHA-256, so an admin can tell
    repeated tries at one name (``sha256("admin")`` is easy to check) while a password typed in
    the name field is never readable, and nobody can add rows under a user's name."""
    digest = hashlib.sha256(normalise_name(name).lower().encode("utf-8", "replace")).hexdigest()
    return f"name sha256:{digest[:12]}"


@bp.get("/login")
def login() -> str:
    csrf_token()
    return render_template("login.html", next=safe_next(""))


def _login_page(error: str, status: int) -> tuple[str, int]:
    return render_template("login.html", next=safe_next(""), error=error), status


@bp.post("/login")
def login_post() -> Response | tuple[str, int]:
    refused = check_login_csrf()
    if refused is not None:
        return refused
    name = normalise_name(request.form.get("username") or "")
    attempt = Attempt.of(name, client_addr())
    svc = services.get()
    try:
        info = throttled(attempt, lambda: svc.users.verify(name, request.form.get("password")
                                                           or ""))
        database_seen(None)
    except TooManyTries as exc:
        count_anonymous("login", 429)  # counted, not audited: nobody proved who they are
        return _login_page(f"Too many failed attempts; try again in {int(exc.wait_s) + 1}s.",
                           429)
    except SQLAlchemyError as exc:
        database_seen(exc)
        if unreachable(exc):
            return _login_page("The user database is unreachable; try again shortly.", 503)
        info = None  # a name or password the database refuses (a NUL, say) is nobody's
    if info is None:  # the typed name is no user's: it may be a password typed in the wrong box
        audit("login", typed_name_digest(name), "failed", None,
              {"why": "wrong user name or password"},
              user=CurrentUser(UNKNOWN_USER, "", "form"))
        return _login_page("Wrong user name or password.", 401)
    start_session(info)
    audit("login", info.name, "ok", None, None,
          user=CurrentUser(info.name, info.role, "form", info.id))
    return redirect(safe_next(_landing()))


def _landing() -> str:
    """Where a login without a ``next`` lands: the incident view while an open incident is
    critical, the overview otherwise (and while Redis is unreachable)."""
    try:
        critical = incident_view().worst == "critical"
    except services.REDIS_ERRORS:
        critical = False
    return url_for("incident.index") if critical else url_for("overview.index")


@bp.post("/logout")
def logout() -> Response:
    end_session()
    flash("Logged out.", "ok")
    return redirect(url_for("auth.login"))


# -- the user's own account -------------------------------------------------------------------
@bp.get("/account")
@requires("viewer")
def account() -> str:
    return render_template("account.html", min_length=MIN_PASSWORD_LENGTH)


@bp.post("/account/logout-everywhere")
@requires("viewer", "users.logout_everywhere")
def logout_everywhere() -> Response:
    me = current_user()
    assert me is not None  # @requires
    result = actions.perform(by_name("users.logout_everywhere"),  # the table's run, as viewer
                             {"name": me.name, "reason": request.form.get("reason") or "self"})
    session.clear()
    flash(result.message, "ok" if result.ok else "error")
    return redirect(url_for("auth.login"), code=303)
