"""Users (admin only): list, add, reset a password. Changing a role, disabling / enabling,
deleting and logging a user out everywhere are entries of the table of actions
(``antre/actions/``)."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from antre.stores.sql import ROLES

from . import actions, services
from .common import render
from .security import requires

bp = Blueprint("users", __name__, url_prefix="/users")


@bp.get("/")
@requires("admin")
def index() -> str:
    svc = services.get()
    return render("users.html", "_users.html", redis_read=False, users=svc.users.list(), roles=ROLES,
                  as_of=svc.clock())


def _back(result: actions.Result) -> Response:
    flash(result.message, "ok" if result.ok else "error")
    return redirect(url_for("users.index"), code=303)


@bp.post("/add")
@requires("admin", "users.add")
def add() -> Response:
    f = request.form
    return _back(actions.user_add(f.get("name", ""), f.get("role", ""), f.get("password", ""),
                                  f.get("reason")))


@bp.post("/<name>/password")
@requires("admin", "users.password.reset")
def reset_password(name: str) -> Response:
    return _back(actions.password_reset(name, request.form.get("password", ""),
                                        request.form.get("reason")))
