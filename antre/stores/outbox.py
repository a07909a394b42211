"""Transactional enqueue: the outbox table and its relay.

``Outbox.add(session, ...)`` writes the job into ``antre_outbox`` inside the caller's own
transaction, so the job exists exactly when the caller's data does. A scheduled relay
(:meth:`Outbox.relay`) reads committed, unsent rows in id order, hands them to ``push`` (which
enqueues them in Redis) and marks them sent in the same SQL transaction.

Why nothing is lost or duplicated:

* a crash before the caller's commit: neither the data nor the job exists;
* a crash after commit, before the relay: the row waits, unsent, for the next relay;
* ``push`` raising: the transaction rolls back, the rows stay unsent and are retried;
* a crash after ``push`` but before the "sent" mark commits: the rows are pushed again, and
  ``push`` must be idempotent by ``job_id`` - the queue's enqueue script refuses a job id that
  already exists, so the second push adds nothing.

On PostgreSQL the relay locks its batch with ``FOR UPDATE SKIP LOCKED``, so several relays share
the work without pushing the same rows. SQLite has no row locks: two concurrent relays may both
push a row, which the idempotent push makes harmless.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from antre.clock import system_ms
from antre.stores.sql import OutboxMessage, datetime_to_ms, ms_to_datetime

__all__ = ["Outbox", "OutboxRow"]

_T = cast(Table, OutboxMessage.__table__)  # declarative __table__ is typed as FromClause
_C = _T.c


@dataclass(frozen=True)
class OutboxRow:
    """One outbox row as handed to ``push`` (a plain snapshot)."""

    id: int
    queue: str
    job_id: str
    envelope: dict[str, Any]
    created_at: datetime
    sent_at: datetime | None = None


class Outbox:
    def __init__(
        self, session_factory: sessionmaker[Session], clock: Callable[[], int] = system_ms
    ) -> None:
        self._sf = session_factory
        self.clock = clock

    def add(self, session: Session, queue: str, job_id: str, envelope: dict[str, Any]) -> None:
        """Write one job into the outbox in the caller's transaction. Does not commit.

        A second row with the same ``job_id`` violates a unique index (at flush/commit).
        """
        if not isinstance(envelope, dict):
            raise TypeError("envelope must be a dict")
        session.execute(
            _T.insert().values(
                queue=queue,
                job_id=job_id,
                envelope=envelope,
                created_at=ms_to_datetime(self.clock()),
                sent_at=None,
            )
        )

    def relay(
        self,
        push: Callable[[list[OutboxRow]], None],
        batch: int = 500,
        *,
        max_batches: int | None = None,
    ) -> int:
        """Push unsent rows, oldest first, ``batch`` at a time, until none are left (or
        ``max_batches`` batches were done); returns how many rows were pushed and marked sent.

        Each batch is one transaction: select (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), ``push``,
        mark sent, commit. If ``push`` raises, that batch stays unsent and the error propagates.
        """
        total = 0
        done_batches = 0
        while max_batches is None or done_batches < max_batches:
            with self._sf() as s, s.begin():
                q = select(_T).where(_C.sent_at.is_(None)).order_by(_C.id).limit(batch)
                if s.get_bind().dialect.name == "postgresql":
                    q = q.with_for_update(skip_locked=True)
                rows = [
                    OutboxRow(
                        id=r.id,
                        queue=r.queue,
                        job_id=r.job_id,
                        envelope=r.envelope,
                        created_at=r.created_at,
                        sent_at=r.sent_at,
                    )
                    for r in s.execute(q)
                ]
                if not rows:
                    break
                push(rows)
                s.execute(
                    update(_T)
                    .where(_C.id.in_([r.id for r in rows]), _C.sent_at.is_(None))
                    .values(sent_at=ms_to_datetime(self.clock()))
                )
            total += len(rows)
            done_batches += 1
            if len(rows) < batch:
                break
        return total

    def pending(self) -> int:
        """How many rows wait to be relayed (for the dashboard and alerts)."""
        with self._sf() as s:
            return int(
                s.execute(
                    select(func.count()).select_from(_T).where(_C.sent_at.is_(None))
                ).scalar_one()
            )

    def oldest_pending_ms(self) -> int | None:
        """Creation time (epoch ms) of the oldest unsent row, or None: a stuck relay shows here."""
        with self._sf() as s:
            v = s.execute(select(func.min(_C.created_at)).where(_C.sent_at.is_(None))).scalar_one()
        if v is None:
            return None
        if isinstance(v, str):  # SQLite aggregate loses the column type
            v = datetime.fromisoformat(v)
        return datetime_to_ms(v)

    def prune_sent(self, older_than: int | datetime | timedelta, *, batch: int = 5000) -> int:
        """Delete rows sent before a cutoff; returns how many.

        ``older_than`` is the cutoff as epoch milliseconds (int) or a datetime, or an age
        (timedelta) measured back from the clock. Unsent rows are never deleted.
        """
        if isinstance(older_than, timedelta):
            cutoff = ms_to_datetime(self.clock() - int(older_than.total_seconds() * 1000))
        elif isinstance(older_than, datetime):
            cutoff = older_than
        else:
            cutoff = ms_to_datetime(int(older_than))
        total = 0
        while True:  # in batches: never one long transaction
            with self._sf() as s, s.begin():
                ids = s.execute(select(_C.id).where(_C.sent_at.is_not(None), _C.sent_at < cutoff)
                                .order_by(_C.id).limit(batch)).scalars().all()
                if ids:
                    s.execute(delete(_T).where(_C.id.in_(ids)))
            total += len(ids)
            if len(ids) < batch:
                return total
