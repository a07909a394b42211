"""Users (admin only): the list. Adding a user, setting a password, changing a role,
disabling / enabling, deleting and logging a user out everywhere are entries of the table of
actions (``antre/actions/users.py``)."""

from __future__ import annotations

from flask import Blueprint

from antre.stores.sql import ROLES

from . import services
from .common import render
from .security import requires

bp = Blueprint("users", __name__, url_prefix="/users")


@bp.get("/")
@requires("admin")
def index() -> str:
    svc = services.get()
    return render("users.html", "_users.html", redis_read=False, users=svc.users.list(), roles=ROLES,
                  as_of=svc.clock())
