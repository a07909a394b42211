"""The dashboard's side of every change: ``perform`` runs an entry of the table of actions
(``antre/actions/``) for the logged-in user through the core's one runner
(``antre.actions.perform``: the audit entry written first, the change refused with a 503 when
it cannot be, then its outcome: ok, failed or refused, with before/after figures); ``table_ops``
gives the entries the dashboard's stores, its session renewal and its login-limited check of a
current password. The HTML views flash ``Result.message``; the API returns
``Result.to_json()``."""

from __future__ import annotations

from typing import Any

from antre.actions import (
    MAX_SELECTED,
    Action,
    Actor,
    Args,
    Ops,
    Result,
)
from antre.actions import perform as run_recorded

from . import services
from .security import Attempt, TooManyTries, audit_seen, client_addr, current_user
from .security import start_session, throttled
from .services import Services

__all__ = ["MAX_SELECTED", "Result"]  # re-exported: the views and the API use them


def _svc() -> Services:
    return services.get()


def perform(action: Action, args: Args) -> Result:
    """Run one entry of the table of actions (``antre/actions/``) for the logged-in user,
    recorded before it runs like every other change."""
    svc = _svc()
    user = current_user()
    who = Actor(user.name if user else "(anonymous)", user.role if user else None,
                "dashboard", client_addr())
    if action.self_service:  # your own account, whatever the request names
        args = {**args, "name": who.name}

    def renew(name: str) -> None:
        start_session(svc.users.get(name))
    ops = table_ops(renew if user is not None and user.via == "session" else None)
    return run_recorded(action, ops, who, args, svc.audit, audit_seen, _redis_down)


def _redis_down(exc: Exception) -> str:
    return f"Redis unreachable: {services.scrubbed(exc)}"


def table_ops(renew: Any = None) -> Ops:
    """The core objects of the table's entries, on the dashboard's Redis, clock and stores."""
    svc = _svc()
    return Ops(svc.antre, svc.clock, svc.reads, svc.idempotency, svc.users, renew,
               check_password=_check_password)


def _check_password(name: str, current: str) -> Result | None:
    """``current`` is ``name``'s password (None), limited like logins: guessing it here is
    guessing the password."""
    svc = _svc()
    try:
        right = throttled(Attempt.of(name, client_addr()),
                          lambda: svc.users.password_is(name, current))
    except TooManyTries as exc:
        return Result(False, f"{exc}; nothing was changed", 429)
    if not right:
        return Result(False, "the current password is wrong; nothing was changed", 403)
    return None
