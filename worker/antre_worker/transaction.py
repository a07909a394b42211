"""One SQL transaction for the ``ctx.db`` writers of a prefetched batch.

A job of a batch that opens ``ctx.db`` gets the batch's shared session, inside a SAVEPOINT of
its own (``begin_nested``): its handler's writes, its lock's fence check and its idempotency
completion go there (execution.py). A failure rolls back only that savepoint (the job retries
or is buried as it would alone); a success releases it into the batch's transaction, which
commits once: when the batch ends, or as soon as a job ends ``ANTRE_DB_COMMIT_WINDOW_MS``
(default 10 ms) or more after the first job's effects joined it, whichever comes first. A
job's commit waits at most that window plus the run of the job in progress when it passes.
Only then are its jobs acked (settle.py); a commit that fails sends every one of them back
unacked (snoozed, no attempt spent), to run again with one committed effect each (and each
alone in this process, so a job whose effect cannot commit does not hold back the others).

The business locks of its jobs are held until the commit (a next holder must see the
effects), renewed together in one round trip right before it (instead of one renewal per job
as its savepoint is released), and released right after; a job of the same lock key later in
the batch commits the transaction first. A member whose lock or lease was found lost before
the commit rolls the whole transaction back (its savepoint cannot be undone alone once
released).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from antre import settings
from antre.engine.locks import Lock
from antre.errors import LeaseLost

from .held import Running

log = logging.getLogger("antre.worker")

ALONE_MAX = 10_000  # job ids remembered to run in a transaction of their own


def commit_window_ms() -> int:
    """``ANTRE_DB_COMMIT_WINDOW_MS``: the longest a job's released savepoint waits for its
    batch's commit (ms, default 10); 0 commits every job in its own transaction."""
    return settings.DB_COMMIT_WINDOW_MS.get()


def _kept(_name: str) -> None:
    """A savepoint's release, left to the transaction's commit."""


class Alone:
    """The jobs (by id) whose batch's commit failed: their next run in this process commits in
    a transaction of its own (bounded, oldest forgotten first)."""

    def __init__(self, max_entries: int = ALONE_MAX) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.max_entries = max_entries

    def add(self, job_id: str) -> None:
        self._ids[job_id] = None
        while len(self._ids) > self.max_entries:
            self._ids.popitem(last=False)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids


class BatchTransaction:
    """The shared transaction of one runner thread's batch (see the module docstring)."""

    def __init__(self, session_factory: Callable[[], Any],
                 release: Callable[[list[Lock]], None], held: Callable[[list[Lock]], None],
                 clock: Callable[[], int], window_ms: int, alone: Alone) -> None:
        self._factory = session_factory
        self._release = release
        self._held = held  # renews the locks in one round trip, marking the lost ones
        self._clock = clock
        self.window_ms = window_ms
        self.alone = alone
        self.session: Any = None
        self._conn: Any = None  # its connection, whose savepoints are never released
        self.opened_ms = 0
        self.members: list[Running] = []
        self.locks: list[Lock] = []
        self.released_locks: list[Lock] = []  # after finish: the locks it held
        self.member_ids: set[str] = set()  # the jobs whose effects it holds
        self.keys: set[str] = set()  # the idempotency keys completed in it
        self.lock_keys: set[str] = set()
        self.broken = False  # a savepoint could not be rolled back: nothing of it may commit
        self.done = False
        self.error: BaseException | None = None  # why it did not commit (done and not None)

    def savepoint(self, r: Running) -> Any:
        """The shared session, with a savepoint begun for ``r`` (``ctx.db`` on first use)."""
        if self.session is None:
            self.session = session = self._factory()
            conn = session.connection()
            # a job's savepoint is not released: the next job's nests inside it (a ROLLBACK TO
            # still undoes only the newest), and the commit releases them all at once, one
            # round trip a job fewer (this connection only, for this transaction)
            conn._release_savepoint_impl = _kept
            self._conn = conn
            raw = conn.connection.dbapi_connection
            if session.bind.dialect.name == "sqlite" and not raw.in_transaction:
                # pysqlite begins a transaction only before a write, so the first savepoint
                # would open (and its release commit) one of its own; the write lock is taken
                # now, so a handler that reads first never has its snapshot refused at its
                # first write
                raw.execute("BEGIN IMMEDIATE")
        r.savepoint = self.session.begin_nested()
        r.tx = self
        return self.session

    def release(self, r: Running) -> None:
        """``r``'s effects, fence and completion join the transaction (RELEASE SAVEPOINT)."""
        sp, r.savepoint = r.savepoint, None
        sp.commit()
        if not self.members:
            self.opened_ms = self._clock()  # the window starts with the first effect kept
        self.members.append(r)
        self.member_ids.add(r.job.id)
        if r.job.idempotency_key:
            self.keys.add(r.job.idempotency_key)
        if r.lock is not None:
            self.locks.append(r.lock)
            self.lock_keys.add(r.lock.key)

    def rollback(self, r: Running) -> None:
        """Undo ``r``'s savepoint only (ROLLBACK TO SAVEPOINT)."""
        sp, r.savepoint = r.savepoint, None
        if sp is None:
            return
        try:
            if sp.is_active:
                sp.rollback()
        except Exception:
            self.broken = True
            log.exception("rollback to a savepoint failed; the batch's transaction is rolled "
                          "back", extra={"event": "error"})

    def due(self) -> bool:
        """Whether the window since its first kept effect has passed (commit now)."""
        return bool(self.members) and self._clock() - self.opened_ms >= self.window_ms

    def finish(self) -> None:
        """Commit (or, with nothing to commit, a member found lost or a broken savepoint, roll
        back), close the session, release the members' locks. Once; ``error`` says why it did
        not commit."""
        if self.done:
            return
        self.done = True
        session, self.session = self.session, None
        if session is None:
            return
        try:
            if self.locks and self.members and not self.broken:
                self._held(self.locks)  # still ours, each, right before the commit
            lost = [m.job.id for m in self.members if m.lease_lost] + [
                lock.key for lock in self.locks if lock.lost]
            if self.broken:
                self.error = RuntimeError("a savepoint of the batch could not be rolled back")
            elif lost:
                self.error = LeaseLost(f"a lease or lock of the batch was lost before its "
                                       f"commit ({', '.join(lost[:5])}): rolled back")
            if self.error is not None or not self.members:
                session.rollback()
            else:
                session.commit()
        except Exception as exc:
            self.error = exc
            for m in self.members:
                self.alone.add(m.job.id)
            try:
                session.rollback()
            except Exception:
                pass  # the connection is gone: the pool replaces it
        finally:
            if self._conn is not None:
                self._conn.__dict__.pop("_release_savepoint_impl", None)
            try:
                session.close()
            except Exception:
                pass
            locks, self.locks = self.locks, []
            self.released_locks = locks
            if locks:
                self._release(locks)
