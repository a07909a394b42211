"""Dashboard users: names, roles (viewer < operator < admin), argon2id password hashes and a
session generation.

Names: 1-64 characters of letters, digits and ``_ . @ -``, starting with a letter or digit (no
``/`` or ``:``, so every name fits a URL path segment and an HTTP Basic header). Passwords: at
least ``MIN_PASSWORD_LENGTH`` characters, and not the user name.

Sessions: a dashboard session carries the user's id and ``session_gen``; the store changes the
generation on every role change, disable / enable, password change and ``end_sessions``, which
ends every session signed before. A new user's generation starts at a random number, so a user
created after a deletion (SQLite can hand out the deleted row's id again) does not inherit the
deleted user's sessions.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, exists, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from antre.clock import system_ms
from antre.errors import AntreError
from antre.stores.sql import ROLES, RevokedSession, User, dialect_insert, ms_to_datetime

try:  # argon2-cffi comes with the dashboard (pip install "antre[web]"); a worker needs no users
    from argon2 import PasswordHasher
    from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
    _BAD_PASSWORD: tuple[type[Exception], ...] = (VerifyMismatchError, VerificationError,
                                                  InvalidHashError)
except ImportError:  # pragma: no cover - exercised by the core-install test in a fresh venv
    PasswordHasher = None  # type: ignore[assignment,misc]
    _BAD_PASSWORD = ()

__all__ = ["MIN_PASSWORD_LENGTH", "ROLES", "MissingExtra", "UnknownUser", "UserExists", "UserInfo", "UserStore",
           "WeakPassword", "check_name", "check_password", "normalise_name", "role_at_least"]

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_GEN_START_MAX = 2**30  # leaves room below 2**31 (a PostgreSQL integer) for the bumps

_T = cast(Table, User.__table__)  # declarative __table__ is typed as FromClause
_C = _T.c
_R = cast(Table, RevokedSession.__table__)

_RANK = {r: i for i, r in enumerate(ROLES)}


def role_at_least(role: str | None, needed: str) -> bool:
    """Whether ``role`` may do what ``needed`` may (viewer < operator < admin)."""
    return role in _RANK and _RANK[role] >= _RANK[needed]


class UserExists(ValueError):
    pass


class UnknownUser(KeyError):
    pass


class WeakPassword(ValueError):
    pass


def normalise_name(name: str) -> str:
    """The user name as it is looked up: surrounding whitespace dropped. The login limiter
    counts this form, so ``" view1"`` and ``"view1"`` share their tries."""
    return (name or "").strip()[:200]


def check_name(name: str) -> str:
    """The normalised name, or ``ValueError`` saying what a name may contain."""
    name = normalise_name(name)
    if not _NAME_RE.match(name):
        raise ValueError("user name must be 1-64 letters, digits, '_', '.', '@' or '-', "
                         "starting with a letter or digit")
    return name


def check_password(name: str, password: str) -> None:
    """``WeakPassword`` unless ``password`` is long enough and not the user name."""
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise WeakPassword(f"password must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise WeakPassword(f"password must be at most {MAX_PASSWORD_LENGTH} characters")
    if password.strip().lower() == normalise_name(name).lower():
        raise WeakPassword("password must not be the user name")


@dataclass(frozen=True)
class UserInfo:
    """A user without the password hash."""

    id: int
    name: str
    role: str
    created_at: datetime
    disabled: bool
    session_gen: int = 0


def _info(row: Any) -> UserInfo:
    return UserInfo(
        id=row.id,
        name=row.name,
        role=row.role,
        created_at=row.created_at,
        disabled=bool(row.disabled),
        session_gen=int(row.session_gen),
    )


def _sid_digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def _check_role(role: str) -> None:
    if role not in _RANK:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")


class MissingExtra(AntreError, RuntimeError):
    """A part of Antre that lives in an optional extra was used without it."""


class UserStore:
    """Users in SQL. ``hasher`` defaults to argon2-cffi's ``PasswordHasher()`` (argon2id)."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        clock: Callable[[], int] = system_ms,
        hasher: PasswordHasher | None = None,
    ) -> None:
        self._sf = session_factory
        self.clock = clock
        self._hasher = hasher
        self._dummy_hash: str | None = None

    @property
    def hasher(self) -> PasswordHasher:
        """argon2id, made on first use: a worker's store (which never hashes) needs no argon2."""
        if self._hasher is None:
            if PasswordHasher is None:
                raise MissingExtra("dashboard users need argon2-cffi: pip install 'antre[web]'")
            self._hasher = PasswordHasher()
        return self._hasher

    @hasher.setter
    def hasher(self, value: PasswordHasher) -> None:
        self._hasher = value

    def _dummy(self) -> str:
        if self._dummy_hash is None:
            self._dummy_hash = self.hasher.hash("antre-dummy-password-for-constant-time")
        return self._dummy_hash


    def add(self, name: str, role: str, password: str) -> UserInfo:
        """Create a user; raises ``UserExists`` if the name is taken, ``ValueError`` if invalid."""
        name = check_name(name)
        _check_role(role)
        check_password(name, password)
        h = self.hasher.hash(password)
        try:
            with self._sf() as s, s.begin():
                row = s.execute(
                    _T.insert()
                    .values(
                        name=name,
                        role=role,
                        password_hash=h,
                        created_at=ms_to_datetime(self.clock()),
                        disabled=False,
                        session_gen=secrets.randbelow(_GEN_START_MAX),
                    )
                    .returning(*_T.c)
                ).one()
        except IntegrityError as e:
            raise UserExists(f"user {name!r} already exists") from e
        return _info(row)

    def verify(self, name: str, password: str) -> UserInfo | None:
        """The user if ``password`` is right and the user is enabled, else None.

        Takes about as long for an unknown name (a dummy hash is verified) as for a known one.
        A hash made with older parameters is upgraded on a successful login.
        """
        with self._sf() as s:
            row = s.execute(select(_T).where(_C.name == normalise_name(name))).first()
        stored = row.password_hash if row is not None else self._dummy()
        try:
            ok: bool = self.hasher.verify(stored, password or "")
        except _BAD_PASSWORD:
            ok = False
        if row is None or not ok or row.disabled:
            return None
        if self.hasher.check_needs_rehash(stored):
            self._set_hash(row.name, self.hasher.hash(password), expect=stored)
        return _info(row)

    def _set_hash(self, name: str, h: str, expect: str | None = None) -> bool:
        conds = [_C.name == name]
        if expect is not None:
            conds.append(_C.password_hash == expect)
        with self._sf() as s, s.begin():
            return (
                s.execute(update(_T).where(*conds).values(password_hash=h).returning(_C.id)).first()
                is not None
            )

    def _change(self, name: str, **values: Any) -> None:
        """Update one user and end their sessions (the generation moves on); ``UnknownUser``
        if there is no such user."""
        with self._sf() as s, s.begin():
            found = s.execute(
                update(_T).where(_C.name == name)
                .values(session_gen=_C.session_gen + 1, **values).returning(_C.id)
            ).first()
        if found is None:
            raise UnknownUser(name)

    def set_password(self, name: str, password: str) -> None:
        """A new password; the user's open sessions end."""
        check_password(name, password)
        self._change(name, password_hash=self.hasher.hash(password))

    def set_role(self, name: str, role: str) -> None:
        _check_role(role)
        self._change(name, role=role)

    def set_disabled(self, name: str, disabled: bool = True) -> None:
        self._change(name, disabled=bool(disabled))

    def end_sessions(self, name: str) -> None:
        """Log the user out everywhere: every session signed before now ends."""
        self._change(name)

    def password_is(self, name: str, password: str) -> bool:
        """Whether ``password`` is the user's (enabled or not); for a password change."""
        with self._sf() as s:
            row = s.execute(select(_T.c.password_hash).where(_C.name == name)).first()
        try:
            ok = bool(self.hasher.verify(row[0] if row else self._dummy(), password or ""))
        except _BAD_PASSWORD:
            ok = False
        return ok and row is not None

    def for_session(self, user_id: int, sid: str) -> UserInfo | None:
        """The user of a session (one query), or None when there is no such user or the
        session ``sid`` was ended by ``end_session``."""
        revoked = exists().where(_R.c.sid == _sid_digest(sid))
        with self._sf() as s:
            row = s.execute(select(_T, revoked.label("revoked")).where(_C.id == user_id)).first()
        return _info(row) if row is not None and not row.revoked else None

    def end_session(self, sid: str, expires_ms: int) -> None:
        """End one session (a logout) until ``expires_ms``, when it would end anyway; forgets
        the ended sessions that are past that."""
        with self._sf() as s, s.begin():
            dialect = s.get_bind().dialect.name
            s.execute(dialect_insert(_R, dialect).values(
                sid=_sid_digest(sid), expires_at=ms_to_datetime(expires_ms)
            ).on_conflict_do_nothing())
            s.execute(delete(_R).where(_R.c.expires_at < ms_to_datetime(self.clock())))

    def get(self, name: str) -> UserInfo | None:
        with self._sf() as s:
            row = s.execute(select(_T).where(_C.name == name)).first()
        return _info(row) if row is not None else None

    def list(self) -> list[UserInfo]:
        with self._sf() as s:
            return [_info(r) for r in s.execute(select(_T).order_by(_C.name))]

    def count(self) -> int:
        with self._sf() as s:
            return int(s.execute(select(func.count()).select_from(_T)).scalar_one())

    def delete(self, name: str) -> bool:
        with self._sf() as s, s.begin():
            return s.execute(delete(_T).where(_C.name == name).returning(_C.id)).first() is not None
