"""The dashboard's side of every change: ``perform`` runs an entry of the table of actions
(``antre/actions/``) for the logged-in user, ``guarded`` (refused while the audit log is
unreachable) and audited (ok, failed or refused, with before/after figures). The changes not
in the table yet (adding a user, passwords) are the functions below. The HTML views flash ``Result.message``; the API returns
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
from antre.stores.users import UnknownUser, UserExists, WeakPassword

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
    def renew(name: str) -> None:
        start_session(svc.users.get(name))
    ops = table_ops(renew if user is not None and user.via == "session" else None)
    return guarded(action.name, action.target(args), args.get("reason") or "",
                   lambda: action.run(ops, who, args))


def table_ops(renew: Any = None) -> Ops:
    """The core objects of the table's entries, on the dashboard's Redis, clock and stores."""
    svc = _svc()
    return Ops(svc.antre, svc.clock, svc.reads, svc.idempotency, svc.users, renew)


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


def _reason(reason: str | None) -> str:
    return (reason or "").strip()[:2000]


def _actor() -> str:
    """Who, on the job's timeline: the logged-in user."""
    user = current_user()
    return user.name if user else "(anonymous)"


def _note(reason: str | None) -> dict[str, Any] | None:
    return {"reason": _reason(reason)} if _reason(reason) else None


# -- one job ----------------------------------------------------------------------------------
# -- selected rows ----------------------------------------------------------------------------
# -- users ------------------------------------------------------------------------------------
def user_add(name: str, role: str, password: str, reason: str | None) -> Result:
    def run() -> Result:
        try:
            info = _svc().users.add(name, role, password)
        except (UserExists, ValueError) as exc:
            return Result(False, str(exc), 400)
        return Result(True, f"user {info.name} added as {info.role}", 200, {"role": info.role})
    return guarded("users.add", name, _reason(reason), run)


def password_change(current: str, new: str) -> Result:
    """The logged-in user changes their own password (the current one is asked again). Their
    other sessions end; this one carries on, signed with the new session generation."""
    me = current_user()
    assert me is not None  # @requires

    def run() -> Result:
        svc = _svc()
        try:  # limited like logins: guessing it here is guessing the password
            right = throttled(Attempt.of(me.name, client_addr()),
                              lambda: svc.users.password_is(me.name, current))
        except TooManyTries as exc:
            return Result(False, f"{exc}; nothing was changed", 429)
        if not right:
            return Result(False, "the current password is wrong; nothing was changed", 403)
        try:
            svc.users.set_password(me.name, new)
        except WeakPassword as exc:
            return Result(False, f"{exc}; nothing was changed", 400)
        if me.via == "session":
            start_session(svc.users.get(me.name))
        return Result(True, "password changed; your other sessions are logged out")
    return guarded("users.password.change", me.name, "", run)


def password_reset(name: str, password: str, reason: str | None) -> Result:
    """An admin sets another user's password; that user's open sessions end. Their own takes
    the current one (``password_change``): a stolen session must not be enough to take the
    account over."""
    def run() -> Result:
        me = current_user()
        if me is not None and me.name == name:
            return Result(False, "to change your own password, give the current one: use your "
                                 "account page (/account) or POST /api/account/password; "
                                 "nothing was changed", 403)
        try:
            _svc().users.set_password(name, password)
        except WeakPassword as exc:
            return Result(False, f"{exc}; nothing was changed", 400)
        except UnknownUser:
            return Result(False, f"no user {name}", 400)
        return Result(True, f"password of {name} reset; their open sessions are logged out")
    return guarded("users.password.reset", name, _reason(reason), run)
