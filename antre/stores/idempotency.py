"""The idempotency store: effects at most once per idempotency key.

One row per business operation (``antre_idempotency``, keyed by the idempotency key) moves
through ``processing`` -> ``completed`` (with the handler's result) or ``failed`` (permanently).
A worker calls :meth:`IdempotencyStore.begin` before running a handler and acts on the outcome:

============== =================================================================================
``acquired``   run the handler. (Also returned when the row was released by a non-permanent
               :meth:`~IdempotencyStore.fail`, or when the same delivery re-enters.)
``taken_over`` run the handler; a previous owner stopped without finishing (its lease expired,
               or this job was redelivered with a newer lease epoch). Worth a log line: the
               earlier attempt may have had non-SQL side effects.
``completed``   skip the handler, ack, count an idempotency hit, hand back ``record.result``.
``busy``       another live delivery owns the key: reschedule shortly, no attempt spent. Also
               returned to a *stale* delivery of the same job (a newer epoch owns the row); its
               Redis ack/retry will then fail with ``LeaseLost`` anyway.
``failed``     failed permanently earlier: dead-letter; it stays failed until :meth:`reset`.
``mismatch``   same key, different fingerprint: permanent error
               ("idempotency key reused with a different payload").
============== =================================================================================

Fencing: ``fence`` is the owner's lease epoch. Epochs are per job, so two *different* jobs with the
same idempotency key may both hold epoch 1; the store therefore compares fences only between
deliveries of the same ``job_id``, and every compare-and-set matches the exact owner state it read
(fence, job id and lease deadline). :meth:`complete` and :meth:`fail` are fenced on
``(key, fence)`` plus, when given, ``job_id`` - pass it.

Retention trade-off (``retention_s``, default 30 days): a record is deleted by :meth:`prune` once
its ``expires_at`` passes; ``expires_at`` is set to creation time + retention and pushed to
completion time + retention when the record completes or fails. Once a record is gone, the same
key is a brand-new operation: a duplicate delivery, a late retry or a DLQ replay arriving after
that would run the effect again. So the retention must exceed the longest retry horizon (sum of
all backoffs up to ``max_attempts``) plus the DLQ retention plus any producer-side resend window.
Longer retention costs only table rows (one small row per operation; the ``expires_at`` index keeps
pruning cheap). Shorter retention saves space but re-opens the duplicate window.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from antre.clock import system_ms
from antre.errors import InvalidJob, LeaseLost, Permanent
from antre.stores.sql import IdempotencyRecord, dialect_insert, make_engine, ms_to_datetime

__all__ = [
    "ACQUIRED",
    "BUSY",
    "COMPLETED",
    "DEFAULT_RETENTION_S",
    "FAILED",
    "MAX_KEY_LENGTH",
    "MISMATCH",
    "TAKEN_OVER",
    "Begin",
    "Claim",
    "Completed",
    "CompletedCache",
    "Decision",
    "IdempotencyStore",
    "Record",
    "decide",
    "fingerprint",
]

ACQUIRED = "acquired"
TAKEN_OVER = "taken_over"
COMPLETED = "completed"
BUSY = "busy"
FAILED = "failed"
MISMATCH = "mismatch"

DEFAULT_RETENTION_S = 30 * 24 * 3600
MAX_KEY_LENGTH = 500

_T = cast(Table, IdempotencyRecord.__table__)  # declarative __table__ is typed as FromClause
_C = _T.c


def fingerprint(job_type: str, payload: Any) -> str:
    """sha256 hex of the job type and the canonical JSON of the payload (pure).

    Canonical: keys sorted, no whitespace, UTF-8. ``1`` and ``1.0`` are different payloads;
    a payload that is not JSON raises ``TypeError``.
    """
    body = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    h = hashlib.sha256()
    h.update(job_type.encode("utf-8"))
    h.update(b"\x00")
    h.update(body.encode("utf-8"))
    return h.hexdigest()


@dataclass(frozen=True)
class Record:
    """A plain snapshot of one idempotency row (never an ORM object)."""

    key: str
    status: str
    fingerprint: str
    job_type: str
    job_id: str
    result: Any
    last_error: str | None
    fence: int
    lock_fence: int | None
    owner: str | None
    lease_deadline_ms: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> Record:
        m = row._mapping
        return cls(**{name: m[_C[name]] for name in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for k in ("created_at", "updated_at", "expires_at"):
            d[k] = d[k].isoformat()
        return d


@dataclass(frozen=True)
class Begin:
    """What :meth:`IdempotencyStore.begin` decided; ``record`` is the row as it was then."""

    outcome: str
    record: Record | None
    cached: bool = False

    @property
    def should_run(self) -> bool:
        """True when the caller now owns the key and must run the handler."""
        return self.outcome in (ACQUIRED, TAKEN_OVER)


@dataclass(frozen=True)
class Decision:
    """What :meth:`IdempotencyStore.begin` does with the row it read (see :func:`decide`).

    ``outcome``: the answer to return (``None``: the row went between the insert and the read;
    insert again). ``claim``: first compare-and-set the claim on exactly the row read; the
    answer holds only if that lands (if not, the row changed: read and decide again).
    """

    outcome: str | None
    claim: bool = False


def decide(existing: Record | None, fingerprint: str, job_id: str, fence: int,
           now_ms: int) -> Decision:
    """The at-most-once decision table for a delivery (``job_id``, lease epoch ``fence``) that
    could not insert the key's row because ``existing`` is there (pure).

    ========================================================  ==========================
    the row                                                   decision
    ========================================================  ==========================
    gone                                                      insert again
    another fingerprint                                       ``mismatch``
    ``completed`` / ``failed``                                ``completed`` / ``failed``
    processing, same job, same fence (the delivery re-enters)  claim -> ``acquired``
    processing, same job, newer fence (we are stale)          ``busy``
    processing, released (lease deadline 0)                   claim -> ``acquired``
    processing, same job with an older fence, or its owner's  claim -> ``taken_over``
    lease passed
    processing, another live owner                            ``busy``
    ========================================================  ==========================
    """
    if existing is None:
        return Decision(None)
    if existing.fingerprint != fingerprint:
        return Decision(MISMATCH)
    if existing.status in (COMPLETED, FAILED):
        return Decision(existing.status)
    same_job = existing.job_id == job_id
    if same_job and existing.fence == fence:
        return Decision(ACQUIRED, claim=True)
    if same_job and existing.fence > fence:
        return Decision(BUSY)
    if (same_job and existing.fence < fence) or existing.lease_deadline_ms <= now_ms:
        released = existing.lease_deadline_ms == 0
        return Decision(ACQUIRED if released else TAKEN_OVER, claim=True)
    return Decision(BUSY)


class CompletedCache:
    """In-process TTL + LRU cache of completed keys -> :class:`Record`; an accelerator only.

    Never the source of truth: only ``completed`` records (which never change back on their own)
    are cached, for at most ``ttl_ms``. A ``reset(key, force=True)`` in *another* process is not
    seen here until the entry expires - keep the TTL short.
    """

    def __init__(
        self, ttl_ms: int = 60_000, max_entries: int = 10_000, clock: Callable[[], int] = system_ms
    ) -> None:
        self.ttl_ms = int(ttl_ms)
        self.max_entries = int(max_entries)
        self.clock = clock
        self._data: OrderedDict[str, tuple[int, Record]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Record | None:
        now = self.clock()
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self.misses += 1
                return None
            expires, rec = item
            if expires <= now:
                del self._data[key]
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return rec

    def peek(self, key: str) -> Record | None:
        """The cached record of ``key`` if it is there and fresh, without counting a hit or a
        miss (a look ahead, not a decision)."""
        with self._lock:
            item = self._data.get(key)
        return item[1] if item is not None and item[0] > self.clock() else None

    def put(self, record: Record) -> None:
        if record.status != COMPLETED:
            return
        with self._lock:
            self._data[record.key] = (self.clock() + self.ttl_ms, record)
            self._data.move_to_end(record.key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def invalidate(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class _Compiled:
    """A statement compiled once and run straight on a pooled DBAPI connection, with the bind
    processors of its column types applied: a statement that runs once per job skips
    SQLAlchemy's per-execution work (about a third of its cost). Errors are wrapped and
    disconnects detected as SQLAlchemy does (``DBAPIError.connection_invalidated``)."""

    def __init__(self, stmt: Any, engine: Any) -> None:
        dialect = engine.dialect
        self.engine, self.dialect = engine, dialect
        self.compiled = stmt.compile(dialect=dialect)
        self.sql = self.compiled.string
        self.order = list(self.compiled.positiontup) if self.compiled.positional else None
        self.processors = {}
        for name, bind in self.compiled.binds.items():
            proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                self.processors[name] = proc

    def first(self, params: dict[str, Any]) -> Any:
        return self._run(params, all_rows=False)

    def all(self, params: dict[str, Any]) -> list[Any]:
        rows: list[Any] = self._run(params, all_rows=True)
        return rows

    def _run(self, params: dict[str, Any], all_rows: bool) -> Any:
        values = self.compiled.construct_params(params)
        for name, proc in self.processors.items():
            values[name] = proc(values[name])
        args = values if self.order is None else tuple(values[n] for n in self.order)
        raw = self.engine.raw_connection()
        cursor = None
        try:
            cursor = raw.cursor()
            cursor.execute(self.sql, args)
            row = cursor.fetchall() if all_rows else cursor.fetchone()
            cursor.close()
            raw.commit()  # nothing to do on an autocommit connection; SQLite's implicit one
            return row
        except self.dialect.loaded_dbapi.Error as e:
            gone = self.dialect.is_disconnect(e, raw.dbapi_connection, cursor)
            if gone:
                raw.invalidate(e)
            raise DBAPIError.instance(self.sql, args, e, self.dialect.loaded_dbapi.Error,
                                      connection_invalidated=gone, dialect=self.dialect) from e
        finally:
            raw.close()


@dataclass(frozen=True)
class Completed:
    """One owned key to mark completed (:meth:`IdempotencyStore.complete_many`)."""

    key: str
    fence: int
    job_id: str
    result: Any = None
    lock_fence: int | None = None  # the business lock's token it ran under (kept if None)


def _complete_many_pg() -> Any:
    """``complete`` for many keys in one PostgreSQL statement (arrays unnested in step)."""
    return text(
        "UPDATE antre_idempotency AS t SET status = 'completed', result = v.result, "
        "lock_fence = COALESCE(v.lock_fence, t.lock_fence), "
        "updated_at = :b_now, expires_at = :b_expires "
        "FROM unnest(CAST(:b_keys AS VARCHAR[]), CAST(:b_fences AS BIGINT[]), "
        "CAST(:b_job_ids AS VARCHAR[]), CAST(:b_results AS TEXT[]), "
        "CAST(:b_lock_fences AS BIGINT[])) AS v(key, fence, job_id, result, lock_fence) "
        "WHERE t.key = v.key AND t.fence = v.fence AND t.job_id = v.job_id "
        "AND t.status = 'processing' RETURNING t.key"
    ).bindparams(bindparam("b_now", type_=_C.updated_at.type),
                 bindparam("b_expires", type_=_C.expires_at.type),
                 bindparam("b_keys"), bindparam("b_fences"), bindparam("b_job_ids"),
                 bindparam("b_results"), bindparam("b_lock_fences"))


@dataclass(frozen=True)
class Claim:
    """One key to claim (:meth:`IdempotencyStore.claim_many`), as :meth:`~IdempotencyStore.begin`
    takes it."""

    key: str
    fingerprint: str
    job_type: str
    job_id: str
    fence: int
    owner: str | None
    lease_deadline_ms: int
    lock_fence: int | None = None


_CLAIM_ARRAYS = {"key": "VARCHAR", "fingerprint": "VARCHAR", "job_type": "VARCHAR",
                 "job_id": "VARCHAR", "fence": "BIGINT", "lock_fence": "BIGINT",
                 "owner": "VARCHAR", "lease_deadline_ms": "BIGINT"}


def _claim_many_pg() -> Any:
    """``begin``'s insert for many keys in one PostgreSQL statement (arrays unnested in step)."""
    names = list(_CLAIM_ARRAYS)
    arrays = ", ".join(f"CAST(:b_{n} AS {t}[])" for n, t in _CLAIM_ARRAYS.items())
    return text(
        f"INSERT INTO antre_idempotency ({', '.join(names)}, status, result, last_error, "
        "created_at, updated_at, expires_at) "
        f"SELECT {', '.join('v.' + n for n in names)}, 'processing', NULL, NULL, "
        ":b_now, :b_now, :b_expires "
        f"FROM unnest({arrays}) AS v({', '.join(names)}) "
        "ON CONFLICT (key) DO NOTHING RETURNING key"
    ).bindparams(bindparam("b_now", type_=_C.updated_at.type),
                 bindparam("b_expires", type_=_C.expires_at.type),
                 *[bindparam(f"b_{n}") for n in names])


class IdempotencyStore:
    """The idempotency records in SQL (SQLite or PostgreSQL). Thread-safe; one per process is enough.

    ``clock`` returns epoch milliseconds (inject ``ManualClock`` in tests). ``cache`` is an
    optional :class:`CompletedCache` consulted by :meth:`begin` before the database.
    """

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        clock: Callable[[], int] = system_ms,
        retention_s: float = DEFAULT_RETENTION_S,
        *,
        cache: CompletedCache | None = None,
        max_rounds: int = 8,
    ) -> None:
        self._sf = session_factory
        # every statement of the store outside the caller's transaction is a single atomic
        # statement: run it in autocommit, without BEGIN and COMMIT round trips
        # (PostgreSQL: a pool of its own, so connections are not switched back and forth)
        bind = session_factory.kw.get("bind")
        if bind is None:
            raise ValueError("the session factory must be bound to an engine")
        auto = (make_engine(bind.url, isolation_level="AUTOCOMMIT")
                if bind.dialect.name == "postgresql"
                else bind.execution_options(isolation_level="AUTOCOMMIT"))
        self._auto = auto
        self._one = sessionmaker(bind=auto, expire_on_commit=False)
        self.clock = clock
        self.retention_ms = int(retention_s * 1000)
        self.cache = cache
        self.max_rounds = max_rounds
        # the hot path's statements, built once (their compiled form is cached by SQLAlchemy)
        self._claim_stmt = (
            dialect_insert(_T, bind.dialect.name)
            .on_conflict_do_nothing(index_elements=[_C.key])
            .returning(_C.key)  # what was inserted is the record: no columns to read back
        )
        self._read_stmt = select(_T).where(_C.key == bindparam("b_key"))
        owned = [_C.key == bindparam("b_key"), _C.fence == bindparam("b_fence"),
                 _C.status == "processing"]
        done = {"status": "completed", "result": bindparam("b_result", type_=_C.result.type),
                "updated_at": bindparam("b_now", type_=_C.updated_at.type),
                "expires_at": bindparam("b_expires", type_=_C.expires_at.type)}
        self._complete_stmt = update(_T).where(*owned).values(done).returning(_C.key)
        self._complete_job_stmt = (
            update(_T).where(*owned, _C.job_id == bindparam("b_job_id"))
            .values(done).returning(_C.key))
        self._complete_many_stmt = (  # SQLite's complete_many, a key at a time
            update(_T).where(*owned, _C.job_id == bindparam("b_job_id"))
            .values({**done, "lock_fence": func.coalesce(
                bindparam("b_lock_fence", type_=_C.lock_fence.type), _C.lock_fence)})
            .returning(_C.key))
        # ... and the two that run once per job on their own go straight to the driver
        self._raw = {id(stmt): _Compiled(stmt, auto)
                     for stmt in (self._claim_stmt, self._complete_stmt, self._complete_job_stmt)}
        if bind.dialect.name == "postgresql":
            self._complete_many_pg = _Compiled(_complete_many_pg(), auto)
            self._claim_many_pg = _Compiled(_claim_many_pg(), auto)

    def _autocommit(self, stmt: Any, params: dict[str, Any]) -> Any:
        """One statement in autocommit; the first row or None. A connection found dead while in
        use (the database restarted, or it was terminated) is retried once on a fresh one: the
        pool replaces every connection older than that error."""
        raw = self._raw.get(id(stmt))
        for attempt in (1, 2):
            try:
                if raw is not None:
                    return raw.first(params)
                with self._auto.connect() as c:
                    return c.execute(stmt, params).first()
            except DBAPIError as e:
                if attempt == 2 or not e.connection_invalidated:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    fingerprint = staticmethod(fingerprint)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def check_key(key: str) -> None:
        """Raise ``InvalidJob`` unless every store (SQLite, PostgreSQL) can keep ``key``."""
        if not isinstance(key, str) or not key:
            raise InvalidJob("idempotency key must be a non-empty string")
        if len(key) > MAX_KEY_LENGTH:
            raise InvalidJob(f"idempotency key is longer than {MAX_KEY_LENGTH} characters")
        if "\x00" in key:
            raise InvalidJob("idempotency key contains a NUL character, which PostgreSQL "
                             "cannot store")
        if not key.isascii():
            try:
                key.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidJob("idempotency key is not valid text (a lone surrogate, or "
                                 "bytes that are not UTF-8)") from None

    def _read(self, key: str) -> Record | None:
        row = self._autocommit(self._read_stmt, {"b_key": key})
        return Record.from_row(row) if row is not None else None

    def _cas(self, cur: Record, values: dict[str, Any]) -> Record | None:
        """Update the row only if it is still exactly the owner state ``cur`` we decided on."""
        stmt = (
            update(_T)
            .where(
                _C.key == cur.key,
                _C.status == "processing",
                _C.fence == cur.fence,
                _C.job_id == cur.job_id,
                _C.lease_deadline_ms == cur.lease_deadline_ms,
            )
            .values(**values)
            .returning(*_T.c)
        )
        with self._one() as s:
            row = s.execute(stmt).first()
        return Record.from_row(row) if row is not None else None

    # ------------------------------------------------------------------ the flow

    def begin(
        self,
        key: str,
        fingerprint: str,
        job_type: str,
        job_id: str,
        fence: int,
        owner: str | None,
        lease_deadline_ms: int,
        lock_fence: int | None = None,
    ) -> Begin:
        """Claim ``key`` for this delivery, or say why not (see the module docstring).

        Insert-if-absent is one ``INSERT ... ON CONFLICT DO NOTHING ... RETURNING``; take-overs are
        compare-and-sets on the exact owner state read. Races are re-read and decided again, at
        most ``max_rounds`` times; if still undecided the answer is ``busy`` (retry shortly).
        """
        self.check_key(key)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return Begin(
                    COMPLETED if hit.fingerprint == fingerprint else MISMATCH, hit, cached=True
                )

        fence = int(fence)
        lease_deadline_ms = int(lease_deadline_ms)
        cur: Record | None = None
        for _ in range(self.max_rounds):
            now = self.clock()
            claim: dict[str, Any] = {
                "fence": fence, "job_id": job_id, "job_type": job_type, "owner": owner,
                "lease_deadline_ms": lease_deadline_ms, "lock_fence": lock_fence,
                "updated_at": ms_to_datetime(now),
            }
            row = {**claim, "key": key, "status": "processing", "fingerprint": fingerprint,
                   "result": None, "last_error": None, "created_at": claim["updated_at"],
                   "expires_at": ms_to_datetime(now + self.retention_ms)}
            if self._autocommit(self._claim_stmt, row) is not None:
                return Begin(ACQUIRED, Record(**row))
            cur = self._read(key)
            decision = decide(cur, fingerprint, job_id, fence, now)
            if cur is None or decision.outcome is None:
                continue  # deleted (reset/prune) between our insert and read: try again
            if not decision.claim:
                if decision.outcome == COMPLETED and self.cache is not None:
                    self.cache.put(cur)
                return Begin(decision.outcome, cur)
            new = self._cas(cur, claim)
            if new is not None:
                return Begin(decision.outcome, new)
            # the row changed since we read it: read and decide again
        return Begin(BUSY, cur)

    def claim_many(self, claims: list[Claim]) -> dict[str, Begin]:
        """Insert-if-absent several keys at once, in ONE transaction of its own (committed
        before this returns): the keys whose row this inserted are ``acquired`` (their
        ``Begin``); any other key is left out, for :meth:`begin` to decide on its own (its row
        exists: completed, busy, ...). A worker claims the next jobs of its prefetched batch
        this way (each under its business lock, if any). PostgreSQL: one ``INSERT ... SELECT
        FROM unnest(...) ON CONFLICT DO NOTHING``; SQLite: one insert per key in one
        transaction."""
        claims = [c for c in claims if c.key and len(c.key) <= MAX_KEY_LENGTH]
        if not claims:
            return {}
        now = self.clock()
        at, expires = ms_to_datetime(now), ms_to_datetime(now + self.retention_ms)
        rows: dict[str, dict[str, Any]] = {c.key: {
                        "key": c.key, "status": "processing", "fingerprint": c.fingerprint,
                        "job_type": c.job_type, "job_id": c.job_id, "result": None,
                        "last_error": None, "fence": int(c.fence), "lock_fence": c.lock_fence,
                        "owner": c.owner, "lease_deadline_ms": int(c.lease_deadline_ms),
                        "created_at": at, "updated_at": at, "expires_at": expires}
                for c in claims}
        if self._auto.dialect.name != "postgresql":
            inserted: set[str] = set()
            with self._sf() as s, s.begin():  # one transaction (the autocommit one has none)
                for row in rows.values():
                    if s.execute(self._claim_stmt, row).first() is not None:
                        inserted.add(row["key"])
        else:
            cols = list(rows.values())
            params = {"b_now": at, "b_expires": expires,
                      **{f"b_{name}": [row[name] for row in cols] for name in _CLAIM_ARRAYS}}
            inserted = set()
            for attempt in (1, 2):
                try:
                    inserted = {str(r[0]) for r in self._claim_many_pg.all(params)}
                    break
                except DBAPIError as e:
                    if attempt == 2 or not e.connection_invalidated:
                        raise
        return {k: Begin(ACQUIRED, Record(**rows[k])) for k in inserted}

    def unclaim(self, key: str, fence: int, job_id: str) -> bool:
        """Take back a claim this delivery made and never used (``claim_many`` ahead of a job
        that then did not run): its row goes, as if never claimed. Fenced like
        :meth:`complete`; False when the row was not that claim any more."""
        with self._one() as s:
            row = s.execute(delete(_T).where(
                _C.key == key, _C.fence == int(fence), _C.job_id == job_id,
                _C.status == "processing").returning(_C.key)).first()
        return row is not None

    def complete(
        self, session: Session | Connection | None, key: str, fence: int, result: Any, *,
        job_id: str | None = None
    ) -> None:
        """Mark ``key`` completed with ``result``, in the caller's session; does not commit.

        ``UPDATE ... SET status='completed' WHERE key=:k AND fence=:f AND status='processing'``
        (and ``job_id`` when given). Zero rows -> :class:`LeaseLost`: the caller must roll back,
        which also undoes its own writes made in the same transaction. The caller commits, so the
        handler's writes and the completion are one transaction (``session`` may be the session's
        connection: the same transaction, without the ORM's work). ``session=None`` (the handler
        wrote nothing through SQL): the update runs on its own, in autocommit.
        """
        self.check_result(result)
        now = self.clock()
        params = {"b_key": key, "b_fence": int(fence), "b_result": result,
                  "b_now": ms_to_datetime(now), "b_expires": ms_to_datetime(now + self.retention_ms)}
        if job_id is not None:
            params["b_job_id"] = job_id
        stmt = self._complete_stmt if job_id is None else self._complete_job_stmt
        row = (self._autocommit(stmt, params) if session is None
               else session.execute(stmt, params).first())
        if row is None:
            raise LeaseLost(f"idempotency record {key!r} is no longer owned by fence {fence}")

    @staticmethod
    def check_result(result: Any) -> None:
        """Raise :class:`Permanent` if ``result`` cannot be stored (not JSON)."""
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise Permanent(f"handler result is not JSON-serialisable: {e}") from e

    def complete_many(self, items: list[Completed]) -> set[str]:
        """Mark several owned keys completed at once, each fenced as :meth:`complete` fences it
        (key, fence, job id, still ``processing``), in ONE transaction of its own (committed
        before this returns); returns the keys that were still owned and are now completed
        (a key missing from the answer is no longer owned: :class:`LeaseLost` for its job).

        PostgreSQL: one ``UPDATE ... FROM unnest(...)`` statement; SQLite: one statement per key
        in one transaction. A worker completes a prefetched batch's successes this way, right
        before their batched ack: one commit for the batch instead of one per job. A connection
        found dead is retried once on a fresh one (the whole statement: nothing of it landed).
        """
        if not items:
            return set()
        for item in items:
            self.check_result(item.result)
        now = self.clock()
        params: dict[str, Any] = {"b_now": ms_to_datetime(now),
                                  "b_expires": ms_to_datetime(now + self.retention_ms)}
        if self._auto.dialect.name != "postgresql":
            done: set[str] = set()
            with self._sf() as s, s.begin():  # one transaction (the autocommit one has none)
                for it in items:
                    row = s.execute(self._complete_many_stmt, {
                        **params, "b_key": it.key, "b_fence": int(it.fence),
                        "b_result": it.result, "b_job_id": it.job_id,
                        "b_lock_fence": it.lock_fence}).first()
                    if row is not None:
                        done.add(it.key)
            return done
        params.update(
            b_keys=[it.key for it in items], b_fences=[int(it.fence) for it in items],
            b_job_ids=[it.job_id for it in items],
            b_lock_fences=[it.lock_fence for it in items],
            b_results=[None if it.result is None else
                       json.dumps(it.result, separators=(",", ":"), ensure_ascii=False,
                                  allow_nan=False) for it in items])
        for attempt in (1, 2):
            try:
                return {str(row[0]) for row in self._complete_many_pg.all(params)}
            except DBAPIError as e:
                if attempt == 2 or not e.connection_invalidated:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def fail(
        self, key: str, fence: int, error: str, permanent: bool, *, job_id: str | None = None
    ) -> bool:
        """Record a failure of the owning delivery; returns False if ``fence`` no longer owns it.

        ``permanent=True``: status ``failed`` (the key stays failed until :meth:`reset`).
        ``permanent=False``: the row is *released* - it stays ``processing`` with
        ``lease_deadline_ms=0`` and no owner, keeping ``created_at`` and ``last_error`` - so the
        next delivery (a retry) claims it at once and gets ``acquired`` (not ``taken_over``).
        """
        now = self.clock()
        conds = [_C.key == key, _C.fence == int(fence), _C.status == "processing"]
        if job_id is not None:
            conds.append(_C.job_id == job_id)
        values: dict[str, Any] = {"last_error": error, "updated_at": ms_to_datetime(now)}
        if permanent:
            values.update(status="failed", expires_at=ms_to_datetime(now + self.retention_ms))
        else:
            values.update(lease_deadline_ms=0, owner=None)
        with self._one() as s:
            row = s.execute(update(_T).where(*conds).values(**values).returning(_C.key)).first()
        return row is not None

    def extend_lease(
        self, key: str, fence: int, lease_deadline_ms: int, *, job_id: str | None = None
    ) -> bool:
        """Move the owner's lease deadline (call when the Redis lease is extended); fenced."""
        conds = [_C.key == key, _C.fence == int(fence), _C.status == "processing"]
        if job_id is not None:
            conds.append(_C.job_id == job_id)
        with self._one() as s:
            row = s.execute(
                update(_T)
                .where(*conds)
                .values(
                    lease_deadline_ms=int(lease_deadline_ms),
                    updated_at=ms_to_datetime(self.clock()),
                )
                .returning(_C.key)
            ).first()
        return row is not None

    def reset(self, key: str, *, force: bool = False) -> bool:
        """Forget a ``failed`` key on purpose (DLQ replay), so the next delivery runs again.

        ``force=True`` forgets the key whatever its status - including ``completed``, which lets
        the effect run again; only for an operator who means it. Returns whether a row went.
        """
        stmt = delete(_T).where(_C.key == key)
        if not force:
            stmt = stmt.where(_C.status == "failed")
        with self._one() as s:
            row = s.execute(stmt.returning(_C.key)).first()
        if self.cache is not None:
            self.cache.invalidate(key)
        return row is not None

    def forget_processing(self, key: str, fence: int, job_id: str) -> bool:
        """Delete ``key``'s record only while it is still ``processing`` under ``fence`` for
        ``job_id`` (an operator resetting an abandoned record; a delivery that took it over
        since changed the fence and keeps it). Returns whether the row went."""
        stmt = delete(_T).where(_C.key == key, _C.fence == int(fence), _C.job_id == job_id,
                                _C.status == "processing")
        with self._one() as s:
            row = s.execute(stmt.returning(_C.key)).first()
        if self.cache is not None:
            self.cache.invalidate(key)
        return row is not None

    def lookup(self, key: str) -> Record | None:
        """The record for ``key`` as stored now (from the database, never the cache)."""
        return self._read(key)

    def lookup_many(self, keys: Iterable[str]) -> dict[str, Record]:
        keys = list(keys)
        if not keys:
            return {}
        with self._one() as s:
            rows = s.execute(select(_T).where(_C.key.in_(keys))).all()
        return {r.key: r for r in (Record.from_row(row) for row in rows)}

    def prune(self, now_ms: int | None = None, *, batch: int = 5000) -> int:
        """Delete records whose ``expires_at`` is before ``now_ms`` (default: the clock); returns
        how many. Works in batches so a large backlog never holds one huge transaction."""
        cutoff = ms_to_datetime(self.clock() if now_ms is None else int(now_ms))
        total = 0
        while True:
            with self._sf() as s, s.begin():
                keys = (
                    s.execute(
                        select(_C.key)
                        .where(_C.expires_at < cutoff)
                        .order_by(_C.expires_at)
                        .limit(batch)
                    )
                    .scalars()
                    .all()
                )
                if not keys:
                    break
                s.execute(delete(_T).where(_C.key.in_(keys), _C.expires_at < cutoff))
            total += len(keys)
            if self.cache is not None:
                for k in keys:
                    self.cache.invalidate(k)
            if len(keys) < batch:
                break
        return total

    def counts(self) -> dict[str, int]:
        """``{'processing': n, 'completed': n, 'failed': n}`` (for the dashboard)."""
        out = {"processing": 0, "completed": 0, "failed": 0}
        with self._one() as s:
            for status, n in s.execute(select(_C.status, func.count()).group_by(_C.status)):
                out[status] = int(n)
        return out
