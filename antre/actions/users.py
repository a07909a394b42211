"""Operator actions on the dashboard's users: adding one, setting a password, role, disable /
enable, delete, log out everywhere (admin), and a user changing their own password (any
logged-in user, the current password asked again).
"""

from __future__ import annotations

from collections.abc import Callable

from antre.stores.sql import ROLES
from antre.stores.users import UnknownUser, UserExists, UserStore, WeakPassword

from .base import Action, Actor, Args, Html, Ops, Param, Result


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


# -- adding a user, passwords ----------------------------------------------------------------
def user_add(ops: Ops, who: Actor, a: Args) -> Result:
    store = _users(ops)
    if isinstance(store, Result):
        return store
    try:
        info = store.add(a["name"], a["role"], a["password"])
    except (UserExists, ValueError) as exc:
        return Result(False, str(exc), 400)
    return Result(True, f"user {info.name} added as {info.role}", 200, {"role": info.role})


def password_reset(ops: Ops, who: Actor, a: Args) -> Result:
    """An admin sets another user's password; that user's open sessions end. Their own takes
    the current one (``password_change``): a stolen session must not be enough to take the
    account over."""
    name = a["name"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if who.name == name:
        return Result(False, "to change your own password, give the current one: use your "
                             "account page (/account) or POST /api/account/password; "
                             "nothing was changed", 403)
    try:
        store.set_password(name, a["password"])
    except WeakPassword as exc:
        return Result(False, f"{exc}; nothing was changed", 400)
    except UnknownUser:
        return Result(False, f"no user {name}", 400)
    return Result(True, f"password of {name} reset; their open sessions are logged out")


def password_change(ops: Ops, who: Actor, a: Args) -> Result:
    """The user changes their own password (``name`` is the actor's), the current one asked
    again through the dashboard's login limits (``Ops.check_password``). Their other sessions
    end; this one carries on (``Ops.renew_session``)."""
    name = a["name"]
    store = _users(ops)
    if isinstance(store, Result):
        return store
    if ops.check_password is None:
        return Result(False, "your own password is changed on the dashboard (your account "
                             "page), where the current one is checked; nothing was changed", 503)
    refused = ops.check_password(name, a["current_password"])
    if refused is not None:
        return refused
    try:
        store.set_password(name, a["new_password"])
    except WeakPassword as exc:
        return Result(False, f"{exc}; nothing was changed", 400)
    if ops.renew_session is not None:
        ops.renew_session(name)
    return Result(True, "password changed; your other sessions are logged out")


def _password_actions() -> list[Action]:
    def secret(name: str, help: str) -> Param:
        return Param(name, help=help, required=True, default="", strip=False, secret=True)
    return [
        Action("users.add", "admin", "Add a user (admin).", "/users", "user_add",
               Html("/users/add", "users.add", "users.index", follow_next=False),
               ("user", "add"), user_add, lambda a: str(a["name"]),
               (Param("name", help="the user's name", required=True, default="",
                      positional=True, strip=False),
                Param("role", help="viewer, operator or admin", required=True, default="",
                      cli_default="viewer", choices=ROLES),
                secret("password", "the new user's password")),
               cli_help="add a user",
               cli_line=lambda a, r: f"user {a['name']} ({a['role']}) added"),
        Action("users.password.reset", "admin",
               "Set a user's password; their open sessions end (admin).",
               "/users/<name>/password", "user_password",
               Html("/users/<name>/password", "users.reset_password", "users.index",
                    follow_next=False),
               ("user", "passwd"), password_reset, lambda a: str(a["name"]),
               (secret("password", "the new password"),),
               cli_help="set a user's password (their sessions end)",
               cli_line=lambda a, r: f"password of {a['name']} set; their open sessions "
                                     "are logged out"),
        Action("users.password.change", "viewer",
               "Change your own password (the current one is asked again); your other "
               "sessions end.",
               "/account/password", "account_password",
               Html("/account/password", "auth.change_password", "auth.account",
                    follow_next=False, repeat=("confirm_password", "new_password",
                                                     "new password")),
               (), password_change, lambda a: str(a["name"]),
               (Param("current_password", help="your current password", required=True,
                      default="", strip=False),
                Param("new_password", help="the new password", required=True, default="",
                      strip=False)),
               self_service=True),
    ]


ENTRIES: list[Action] = [
    *_password_actions(),
    *_user_actions(),
]
