"""SQL side of Antre: the tables (idempotency records, outbox, users, audit log) and engine helpers.

SQLite is the embedded default, PostgreSQL the production database; every statement in the
stores works on both. The schema is owned by the Alembic migrations in ``antre/stores/migrations``
(``migrate(url)`` runs them); the models below describe the same tables for the ORM.

Times are stored as timezone-aware UTC datetimes (``timestamptz`` on PostgreSQL; on SQLite,
which has no time zone type, as UTC text, handed back as aware UTC datetimes).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    exc,
)
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

__all__ = [
    "AUDIT_OUTCOMES",
    "IDEMPOTENCY_STATUSES",
    "ROLES",
    "VERSION_TABLE",
    "AuditEntry",
    "Base",
    "IdempotencyRecord",
    "JSONText",
    "LockFence",
    "OutboxMessage",
    "RevokedSession",
    "UTCDateTime",
    "User",
    "datetime_to_ms",
    "dialect_insert",
    "make_engine",
    "migrate",
    "ms_to_datetime",
    "session_factory",
    "unreachable",
    "unstorable",
]

def unstorable(error: BaseException) -> bool:
    """Whether a store's ``error`` is about the value given, which no retry can store (a NUL
    in a PostgreSQL text, text that is not UTF-8, a value the driver cannot adapt), rather
    than an outage (a connection lost, a timeout, a lock wait): the caller buries the job
    with the reason instead of waiting for the database to come back."""
    if isinstance(error, exc.DataError):
        return not getattr(error, "connection_invalidated", False)
    if isinstance(error, exc.StatementError) and not isinstance(error, exc.DBAPIError):
        return isinstance(error.orig, (ValueError, TypeError))  # raised binding a parameter
    return isinstance(error, (ValueError, TypeError)) and not isinstance(error, exc.SQLAlchemyError)


def unreachable(error: BaseException) -> bool:
    """Whether a store's ``error`` says the database cannot be reached (a connection refused or
    lost, a pool or lock timeout), as opposed to a refusal of the statement or its values (a
    NUL in a PostgreSQL text, a constraint, a trigger): only the first is an outage."""
    if getattr(error, "connection_invalidated", False):
        return True
    return isinstance(error, (exc.OperationalError, exc.InterfaceError, exc.DisconnectionError,
                              exc.TimeoutError))


IDEMPOTENCY_STATUSES = ("processing", "completed", "failed")
ROLES = ("viewer", "operator", "admin")
#: ``started``: written before the change runs; the change's outcome replaces it
AUDIT_OUTCOMES = ("started", "ok", "refused", "failed")

#: Alembic's version table for Antre's own schema. Not the default ``alembic_version``, so that
#: an application keeping its own Alembic history in the same database/schema does not clash.
VERSION_TABLE = "antre_alembic_version"

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def ms_to_datetime(ms: int) -> datetime:
    """Epoch milliseconds -> aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC)


def datetime_to_ms(dt: datetime) -> int:
    """Aware (or naive, taken as UTC) datetime -> epoch milliseconds."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


class UTCDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always stores UTC and always returns aware UTC datetimes.

    PostgreSQL keeps the zone itself (timestamptz); SQLite stores text without a zone, so values
    are normalised to UTC on the way in and marked UTC on the way out.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class JSONText(TypeDecorator[Any]):
    """A JSON document kept in a TEXT column (portable, and byte-for-byte what was stored).

    SQL NULL is returned as ``None``; a JSON ``null`` is stored as SQL NULL too.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        return json.loads(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class IdempotencyRecord(Base):
    """One business operation (``idempotency_key``) and what became of it.

    ``fence`` is the lease epoch of the delivery that owns the record; ``lease_deadline_ms`` is
    that owner's lease deadline (a record whose owner's deadline passed can be taken over);
    ``lock_fence`` is the fencing token of the business lock held while processing, if any.
    """

    __tablename__ = "antre_idempotency"

    key: Mapped[str] = mapped_column(String(500), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    fingerprint: Mapped[str] = mapped_column(String(64), nullable=False)
    job_type: Mapped[str] = mapped_column(String(200), nullable=False)
    job_id: Mapped[str] = mapped_column(String(100), nullable=False)
    result: Mapped[Any | None] = mapped_column(JSONText, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    fence: Mapped[int] = mapped_column(BigInteger, nullable=False)
    lock_fence: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_deadline_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)

    __table_args__ = (
        CheckConstraint("status IN ('processing', 'completed', 'failed')", name="status"),
        Index("ix_antre_idempotency_expires_at", "expires_at"),
        Index("ix_antre_idempotency_status", "status"),
        Index("ix_antre_idempotency_job_id", "job_id"),
    )


class LockFence(Base):
    """The highest fencing token under which SQL effects were committed for a business lock
    (``antre.stores.fencing``): a holder whose lock was lost and taken by somebody else cannot commit
    after them."""

    __tablename__ = "antre_lock_fences"

    lock_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    fence: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)


class OutboxMessage(Base):
    """A job written in the caller's own transaction, waiting for the relay to push it to Redis."""

    __tablename__ = "antre_outbox"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    queue: Mapped[str] = mapped_column(String(200), nullable=False)
    job_id: Mapped[str] = mapped_column(String(100), nullable=False)
    envelope: Mapped[Any] = mapped_column(JSONText, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    __table_args__ = (
        Index("uq_antre_outbox_job_id", "job_id", unique=True),
        Index("ix_antre_outbox_sent_at", "sent_at"),
    )


class User(Base):
    """A dashboard user. ``password_hash`` is an argon2id hash (``antre.stores.users``)."""

    __tablename__ = "antre_users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    password_hash: Mapped[str] = mapped_column(String(255), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    #: Signed into every dashboard session; a session whose number differs is over. Changed on
    #: logout-everywhere, role change, disable / enable and password change (``antre.stores.users``).
    session_gen: Mapped[int] = mapped_column(Integer, nullable=False, default=0)

    __table_args__ = (
        CheckConstraint("role IN ('viewer', 'operator', 'admin')", name="role"),
        Index("uq_antre_users_name", "name", unique=True),
    )


class RevokedSession(Base):
    """A dashboard session ended by its logout (``sid``: SHA-256 of the session's random id),
    kept until the session would have expired anyway."""

    __tablename__ = "antre_revoked_sessions"

    sid: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)

    __table_args__ = (Index("ix_antre_revoked_sessions_expires_at", "expires_at"),)


class AuditEntry(Base):
    """Who did what to which jobs, why, when, and how it went."""

    __tablename__ = "antre_audit"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    user: Mapped[str] = mapped_column(String(200), nullable=False)
    role: Mapped[str | None] = mapped_column(String(16), nullable=True)
    action: Mapped[str] = mapped_column(String(100), nullable=False)
    target: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16), nullable=False)
    detail: Mapped[Any | None] = mapped_column(JSONText, nullable=True)
    remote_addr: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        CheckConstraint("outcome IN ('started', 'ok', 'refused', 'failed')", name="outcome"),
        Index("ix_antre_audit_at", "at"),
        Index("ix_antre_audit_action", "action"),
        Index("ix_antre_audit_user", "user"),
    )


# --------------------------------------------------------------------------- engine helpers


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cur = dbapi_connection.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=5000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
    finally:
        cur.close()


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with Antre's settings.

    SQLite: WAL journal, ``busy_timeout=5000`` ms and ``synchronous=NORMAL`` on every connection
    (so concurrent writers wait rather than fail with "database is locked"); an in-memory
    database (``sqlite://``) gets a single shared connection so all threads see the same data;
    the parent directory of a database file is created. ``kwargs`` go to ``create_engine``.

    Dead connections: a connection that sat in the pool for ``ping_idle_s`` or longer is pinged
    when it is checked out (and replaced if the ping fails), so a database restart does not hand
    out dead connections; a connection in steady use is not pinged (``pool_pre_ping`` would cost
    one round trip per checkout). A connection that dies while in use raises a disconnect error
    once, and the pool then replaces every connection older than that error.
    """
    u = make_url(url)
    ping_idle_s = kwargs.pop("ping_idle_s", PING_IDLE_S)
    engine = _create(u, kwargs)
    if not kwargs.get("pool_pre_ping"):  # asked for: the caller's pre-ping replaces ours
        ping_when_idle(engine, ping_idle_s)
    return engine


def _create(u: Any, kwargs: dict[str, Any]) -> Engine:
    # a failed statement's parameters (a new password's hash, an idempotency key) stay out of
    # the exception text, and so out of every log line and page that shows it
    kwargs.setdefault("hide_parameters", True)
    if u.get_backend_name() != "sqlite" and "poolclass" not in kwargs:
        # a pool keeps only what was in use at once, so a larger size opens nothing more; with
        # SQLAlchemy's default of 5, a worker with more threads than that would close and
        # reopen a connection for nearly every job
        kwargs.setdefault("pool_size", POOL_SIZE)
        kwargs.setdefault("max_overflow", POOL_SIZE)
    if u.get_backend_name() == "sqlite":
        database = u.database or ""
        in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
        connect_args = dict(kwargs.pop("connect_args", {}) or {})
        if in_memory:
            connect_args.setdefault("check_same_thread", False)
            kwargs.setdefault("poolclass", StaticPool)
        else:
            parent = os.path.dirname(os.path.abspath(database))
            if parent:
                os.makedirs(parent, exist_ok=True)
            if not database.startswith("file:"):  # a URI filename: SQLite opens it
                _create_private(database)
        engine = create_engine(u, connect_args=connect_args, **kwargs)
        event.listen(engine, "connect", _sqlite_on_connect)
        return engine
    return create_engine(u, **kwargs)


def _create_private(path: str) -> None:
    """Create the SQLite file readable by its owner only (0600) unless it exists: it holds the
    password hashes and the audit log. SQLite gives its -wal and -shm files the same mode."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


PING_IDLE_S = 1.0
POOL_SIZE = 20


def ping_when_idle(engine: Engine, idle_s: float = PING_IDLE_S) -> None:
    """Ping a pooled connection at checkout only if it has been idle ``idle_s`` or longer."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["antre_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("antre_idle_since", None)
        if since is None or time.monotonic() - since < idle_s:
            return
        try:
            alive = dialect.do_ping(dbapi_connection)
        except Exception as e:  # the pool retries the checkout on a new connection
            raise exc.DisconnectionError(f"stale pooled connection: {e}") from e
        if not alive:
            raise exc.DisconnectionError("stale pooled connection")


def dialect_insert(table: Table, dialect_name: str) -> PgInsert | SqliteInsert:
    """``INSERT`` with ``ON CONFLICT`` for the two supported databases."""
    if dialect_name == "postgresql":
        return pg_insert(table)
    if dialect_name == "sqlite":
        return sqlite_insert(table)
    raise NotImplementedError(  # pragma: no cover - only SQLite and PostgreSQL are supported
        f"Antre's SQL stores do not support the {dialect_name!r} dialect")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A ``sessionmaker`` bound to ``engine``; objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False, future=True)


def _migrations_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def alembic_config(url: str | None = None) -> Any:
    """An Alembic ``Config`` for Antre's migrations, built in code (no alembic.ini needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", _migrations_dir())
    if url is not None:
        # ConfigParser interpolation: a '%' (e.g. '%3D' in options=) must be doubled.
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url_or_engine: str | Engine, revision: str = "head") -> None:
    """Bring the database's Antre tables up to ``revision`` (Alembic ``upgrade``).

    Works on a fresh SQLite file and on a fresh PostgreSQL schema. No schema name is hard-coded:
    tables and the version table (``antre_alembic_version``) land in the connection's current
    schema, e.g. the first entry of ``?options=-csearch_path%3D<schema>``.
    """
    if isinstance(url_or_engine, Engine):
        engine, owned = url_or_engine, False
    else:
        engine, owned = make_engine(url_or_engine), True
    try:
        cfg = alembic_config()
        with _migration_lock(engine), engine.begin() as connection:
            if engine.dialect.name == "postgresql":  # held until this transaction ends
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)
    finally:
        if owned:
            engine.dispose()


# pg_advisory_xact_lock key of Antre's migrations (any constant; 'antre' in ASCII)
MIGRATION_LOCK_ID = 0x616E747265


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """One migration at a time per database: processes started together (a worker pool's
    children, the dashboard beside them) each migrate on start, and two that both read "no
    version yet" would both create the tables; the loser failed with "table ... already
    exists". PostgreSQL: an advisory lock held by the migration's transaction (taken in
    ``migrate``). SQLite file: an exclusive ``flock`` on ``<database>.migrate-lock`` beside it
    (SQLite's own locks do not cover DDL run outside a transaction). In-memory: nothing to
    share."""
    database = engine.url.database or ""
    if (engine.dialect.name != "sqlite" or database in ("", ":memory:")
            or database.startswith("file:")):
        yield
        return
    with open(os.path.abspath(database) + ".migrate-lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
