"""Locks: held locks (holder token, TTL, fencing token), contention by key, force release."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from sqlalchemy.exc import SQLAlchemyError


from . import services
from .common import render
from .security import database_seen, requires

bp = Blueprint("locks", __name__, url_prefix="/locks")


def locks_data() -> dict[str, Any]:
    svc = services.get()
    now = svc.clock()
    held = svc.locks.held()
    return {"held": held, "committed": committed_fences([h.key for h in held]),
            "contention": svc.locks.contention(20),
            "conflicts_5m": svc.locks.conflicts_since(now - 300_000),
            "conflicts_1h": svc.locks.conflicts_since(now - 3_600_000), "as_of": now}


def committed_fences(keys: list[str]) -> dict[str, int] | None:
    """The highest token that committed SQL effects per lock key (``antre.stores.fencing``); None
    while the database is unreachable (the page still shows what Redis knows)."""
    svc = services.get()
    try:
        with svc.session_factory() as s:
            found: dict[str, int] = svc.fences.current_many(s, keys)
        database_seen(None)
        return found
    except SQLAlchemyError as exc:
        database_seen(exc)
        return None


@bp.get("/")
@requires("viewer")
def index() -> str:
    return render("locks.html", "_locks.html", **locks_data())


