"""The dashboard's side of every change: ``perform`` runs an entry of the table of actions
(``antre/actions/``) for the logged-in user, ``guarded`` (refused while the audit log is
unreachable) and audited (ok, failed or refused, with before/after figures); ``table_ops``
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
    outcome_of,
)

from . import services
from .security import Attempt, TooManyTries, audit, client_addr, current_user, start_session
from .security import throttled
from .services import REDIS_ERRORS, Services

__all__ = ["MAX_SELECTED", "Result"]  # re-exported: the views and the API use them


def _svc() -> Services:
    return services.get()


def _done(action: str, target: str, reason: str, result: Result) -> Result:
    audit(action, target, outcome_of(result, "dashboard"), reason, {"message": result.message, **result.detail})
    return result


def perform(action: Action, args: Args) -> Result:
    """Run one entry of the table of actions (``antre/actions/``) for the logged-in user,
    guarded and audited like every other change."""
    svc = _svc()
    user = current_user()
    who = Actor(user.name if user else "(anonymous)", user.role if user else None)
    if action.self_service:  # your own account, whatever the request names
        args = {**args, "name": who.name}

    def renew(name: str) -> None:
        start_session(svc.users.get(name))
    ops = table_ops(renew if user is not None and user.via == "session" else None)
    return guarded(action.name, action.target(args), args.get("reason") or "",
                   lambda: action.run(ops, who, args))


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


def guarded(action: str, target: str, reason: str, fn: Any) -> Result:
    """Run ``fn`` unless the audit log is unreachable; audit a Redis failure, then re-raise it
    so the page shows the outage."""
    svc = _svc()
    if svc.outages.since("database") is not None:
        return Result(False, "the database holding the audit log is unreachable: changes are "
                             "refused until it is back", 503)
    try:
        result: Result = fn()
    except REDIS_ERRORS as exc:
        audit(action, target, "failed", reason,
              {"message": f"Redis unreachable: {services.scrubbed(exc)}"})
        raise
    return _done(action, target, reason, result)
