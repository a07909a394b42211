"""Log in and out. Login attempts are rate-limited per (user name, client address)."""

from __future__ import annotations

from flask import (
    Blueprint,
    Response,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from sqlalchemy.exc import SQLAlchemyError

from . import services
from .common import safe_next
from .security import (
    CurrentUser,
    audit,
    check_login_csrf,
    client_addr,
    csrf_token,
    svc_limiter,
)

bp = Blueprint("auth", __name__)


@bp.get("/login")
def login() -> str:
    csrf_token()
    return render_template("login.html", next=safe_next(""))


@bp.post("/login")
def login_post() -> Response | tuple[str, int]:
    refused = check_login_csrf()
    if refused is not None:
        return refused
    name = (request.form.get("username") or "").strip()[:200]
    password = request.form.get("password") or ""
    key = (name, client_addr())
    limiter = svc_limiter()
    wait = limiter.blocked_for(key)
    if wait:
        audit("login", name, "refused", None, {"why": "rate limited"},
              user=CurrentUser(name or "(anonymous)", "", "form"))
        return render_template("login.html", next=safe_next(""),
                               error=f"Too many failed attempts; try again in {int(wait) + 1}s."), 429
    svc = services.get()
    try:
        info = svc.users.verify(name, password)
        svc.outages.ok("database")
    except SQLAlchemyError:
        svc.outages.failed("database")
        return render_template("login.html", next=safe_next(""),
                               error="The user database is unreachable; try again shortly."), 503
    if info is None:
        limiter.failed(key)
        audit("login", name, "failed", None, {"why": "wrong user name or password"},
              user=CurrentUser(name or "(anonymous)", "", "form"))
        return render_template("login.html", next=safe_next(""),
                               error="Wrong user name or password."), 401
    limiter.succeeded(key)
    session.clear()  # a new session (and CSRF token) for the logged-in user: no fixation
    session["user"], session["role"] = info.name, info.role
    session.permanent = True
    csrf_token()
    audit("login", info.name, "ok", None, None, user=CurrentUser(info.name, info.role, "form"))
    return redirect(safe_next(url_for("overview.index")))


@bp.post("/logout")
def logout() -> Response:
    session.clear()
    flash("Logged out.", "ok")
    return redirect(url_for("auth.login"))
