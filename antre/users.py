"""Dashboard users: names, roles (viewer < operator < admin) and argon2id password hashes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from .clock import system_ms
from .sql import ROLES, User, ms_to_datetime

__all__ = ["ROLES", "UnknownUser", "UserExists", "UserInfo", "UserStore", "role_at_least"]

_T = cast(Table, User.__table__)  # declarative __table__ is typed as FromClause
_C = _T.c

_RANK = {r: i for i, r in enumerate(ROLES)}


def role_at_least(role: str | None, needed: str) -> bool:
    """Whether ``role`` may do what ``needed`` may (viewer < operator < admin)."""
    return role in _RANK and _RANK[role] >= _RANK[needed]


class UserExists(ValueError):
    pass


class UnknownUser(KeyError):
    pass


@dataclass(frozen=True)
class UserInfo:
    """A user without the password hash."""

    id: int
    name: str
    role: str
    created_at: datetime
    disabled: bool


def _info(row: Any) -> UserInfo:
    return UserInfo(
        id=row.id,
        name=row.name,
        role=row.role,
        created_at=row.created_at,
        disabled=bool(row.disabled),
    )


def _check_role(role: str) -> None:
    if role not in _RANK:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")


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
        self.hasher = hasher or PasswordHasher()
        self._dummy_hash: str | None = None

    def _dummy(self) -> str:
        if self._dummy_hash is None:
            self._dummy_hash = self.hasher.hash("antre-dummy-password-for-constant-time")
        return self._dummy_hash

    @staticmethod
    def _check_name(name: str) -> str:
        name = (name or "").strip()
        if not name or len(name) > 200:
            raise ValueError("user name must be 1-200 characters")
        return name

    @staticmethod
    def _check_password(password: str) -> None:
        if not isinstance(password, str) or not password:
            raise ValueError("password must be a non-empty string")

    def add(self, name: str, role: str, password: str) -> UserInfo:
        """Create a user; raises ``UserExists`` if the name is taken, ``ValueError`` if invalid."""
        name = self._check_name(name)
        _check_role(role)
        self._check_password(password)
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
            row = s.execute(select(_T).where(_C.name == (name or "").strip())).first()
        stored = row.password_hash if row is not None else self._dummy()
        try:
            ok: bool = self.hasher.verify(stored, password or "")
        except (VerifyMismatchError, VerificationError, InvalidHashError):
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

    def set_password(self, name: str, password: str) -> None:
        self._check_password(password)
        if not self._set_hash(name, self.hasher.hash(password)):
            raise UnknownUser(name)

    def set_role(self, name: str, role: str) -> None:
        _check_role(role)
        with self._sf() as s, s.begin():
            if (
                s.execute(
                    update(_T).where(_C.name == name).values(role=role).returning(_C.id)
                ).first()
                is None
            ):
                raise UnknownUser(name)

    def set_disabled(self, name: str, disabled: bool = True) -> None:
        with self._sf() as s, s.begin():
            if (
                s.execute(
                    update(_T)
                    .where(_C.name == name)
                    .values(disabled=bool(disabled))
                    .returning(_C.id)
                ).first()
                is None
            ):
                raise UnknownUser(name)

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
