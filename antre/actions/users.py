"""Operator actions on the dashboard's users (admin): role, disable / enable, delete, log out
everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

from antre.stores.sql import ROLES
from antre.stores.users import UnknownUser, UserStore

from .base import (
    Action,
    Actor,
    Args,
    Html,
    Ops,
    Param,
    Result,
)


# -- dashboard users (admin): role, disable / enable, delete, log out everywhere -------------
def _users(ops: Ops) -> UserStore | Result:
    store = ops.users
    if store is None:
        return Result(False, "users live in the database: set ANTRE_DATABASE_URL", 503)
    return store


def user_set_role(ops: Ops, who: Actor, a: Args) -> Result:
    name, role = a["name"], a["role"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name and role != "admin":
        return Result(False, "you cannot take the admin role from yourself", 400)
    before = store.get(name)
    try:
        store.set_role(name, role)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    except ValueError as exc:
        return Result(False, f"{exc}; nothing was changed", 400)
    if who.name == name and ops.renew_session is not None:
        ops.renew_session(name)  # the change ends sessions; not this one
    return Result(True, f"user {name} is now {role}", 200,
                  {"role_before": before.role if before else None, "role_after": role})


def _set_disabled(ops: Ops, who: Actor, name: str, disabled: bool) -> Result:
    """A disabled user cannot log in (browser or HTTP Basic) and their open sessions end on
    their next request; enabling gives the same account back."""
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name and disabled:
        return Result(False, "you cannot disable yourself", 400)
    try:
        store.set_disabled(name, disabled)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    return Result(True, f"user {name} {'disabled' if disabled else 'enabled'}")


def user_disable(ops: Ops, who: Actor, a: Args) -> Result:
    return _set_disabled(ops, who, a["name"], True)


def user_enable(ops: Ops, who: Actor, a: Args) -> Result:
    return _set_disabled(ops, who, a["name"], False)


def user_delete(ops: Ops, who: Actor, a: Args) -> Result:
    name = a["name"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name:
        return Result(False, "you cannot delete yourself", 400)
    if not store.delete(name):
        return Result(False, f"no user {name}", 400)
    return Result(True, f"user {name} deleted")


def user_end_sessions(ops: Ops, who: Actor, a: Args) -> Result:
    """Log a user out everywhere: every session signed before now ends."""
    name = a["name"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    try:
        store.end_sessions(name)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    return Result(True, f"every session of {name} is logged out")


def _user_actions() -> list[Action]:
    def entry(name: str, summary: str, verb: str, endpoint: str, word: str,
              run: Callable[[Ops, Actor, Args], Result],
              params: tuple[Param, ...] = ()) -> Action:
        return Action(name, "admin", summary, f"/users/<name>/{verb}", f"user_{endpoint}",
                      Html(f"/users/<name>/{verb}", name, "users.index", follow_next=False),
                      ("user", word), run, lambda a: str(a["name"]), params,
                      cli_help=summary)
    return [
        entry("users.set_role", "Change a user's role (admin).", "role", "role", "role",
              user_set_role,
              (Param("role", help="viewer, operator or admin", required=True, default="",
                     positional=True, choices=ROLES),)),
        entry("users.disable", "Disable a user: no login, open sessions end (admin).",
              "disable", "disable", "disable", user_disable),
        entry("users.enable", "Enable a disabled user again (admin).", "enable", "enable",
              "enable", user_enable),
        entry("users.delete", "Delete a user (admin).", "delete", "delete", "delete",
              user_delete),
        entry("users.logout_everywhere", "End every open session of a user (admin).",
              "logout-everywhere", "logout_everywhere", "logout-everywhere",
              user_end_sessions),
    ]


ENTRIES: list[Action] = [
    *_user_actions(),
]
