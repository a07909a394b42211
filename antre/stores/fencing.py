"""Fencing tokens checked where the effects land: the SQL side of a business lock.

A business lock (``antre.engine.locks``) hands out a fencing token that grows with every acquire. A
holder can lose its lock without knowing it - a stall longer than the lock's TTL (GC pause,
SIGSTOP, a slow disk), an operator's force release - while somebody else takes the key and
commits. The lock alone cannot stop the first holder's late commit; the database can:
:meth:`LockFences.advance` runs in the same transaction as the handler's writes and refuses
(:class:`FenceRejected`) a token lower than one that already committed for that lock key.

``INSERT ... ON CONFLICT (lock_key) DO UPDATE SET fence = excluded.fence WHERE fence <=
excluded.fence RETURNING fence``: one statement, and on PostgreSQL the row lock it takes also
orders concurrent commits under the same lock key.

If the Redis fence counters are ever lost (a new or flushed Redis), the tokens start again
below what SQL remembers: every commit under such a lock would be refused. The worker heals
that on the first refusal by raising the Redis counter above the SQL fence
(``Locks.raise_fence``); the refused job is retried without spending an attempt.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from antre.clock import Clock, system_ms
from antre.errors import LeaseLost
from antre.stores.sql import LockFence, dialect_insert, ms_to_datetime

__all__ = ["FenceRejected", "LockFences"]

_T = cast(Table, LockFence.__table__)
_C = _T.c


class FenceRejected(LeaseLost):
    """A newer holder of the business lock already committed: this transaction must roll back."""

    def __init__(self, lock_key: str, fence: int, current: int | None) -> None:
        super().__init__(f"lock {lock_key!r}: fencing token {fence} is older than {current}, "
                         "which already committed; rolled back")
        self.lock_key, self.fence, self.current = lock_key, fence, current


class LockFences:
    def __init__(self, dialect_name: str, clock: Clock = system_ms) -> None:
        self.clock = clock
        stmt = dialect_insert(_T, dialect_name)
        self._advance = stmt.on_conflict_do_update(
            index_elements=[_C.lock_key],
            set_={"fence": stmt.excluded.fence, "updated_at": stmt.excluded.updated_at},
            where=_C.fence <= stmt.excluded.fence,
        ).returning(_C.fence)
        self._current = select(_C.fence).where(_C.lock_key == bindparam("k"))

    def advance(self, session: Session | Connection, lock_key: str, fence: int) -> None:
        """Record ``fence`` for ``lock_key`` in the caller's transaction (a session, or its
        connection), or raise :class:`FenceRejected` when a higher token already committed (the
        caller rolls back)."""
        row = session.execute(self._advance, {"lock_key": lock_key, "fence": int(fence),
                                              "updated_at": ms_to_datetime(self.clock())}).first()
        if row is None:
            raise FenceRejected(lock_key, int(fence), self.current(session, lock_key))

    def current_many(self, session: Session, lock_keys: list[str]) -> dict[str, int]:
        """The highest committed token of each of ``lock_keys`` that has one."""
        if not lock_keys:
            return {}
        rows = session.execute(select(_C.lock_key, _C.fence).where(_C.lock_key.in_(lock_keys)))
        return {str(k): int(f) for k, f in rows}

    def current(self, session: Session | Connection, lock_key: str) -> int | None:
        """The highest token that committed for ``lock_key`` (``None``: none yet)."""
        value: Any = session.execute(self._current, {"k": lock_key}).scalar()
        return None if value is None else int(value)
