"""The demo's own tables, in the application database next to Antre's (own ``MetaData``).

They are the *effects* of the demo handlers, written through ``ctx.db`` so that they commit in
the same transaction as the idempotency record. Counting their rows is how the demo (and the
tests) prove "effects at most once per idempotency key".

``demo_emails_sent`` deliberately has no unique constraint on the email key: it models what an
external provider recorded as sent, and a provider does not deduplicate for us. A unique index
would turn a duplicate effect into an error and hide it; here a duplicate shows up as a second
row, which :func:`antre_demo.report.report` counts.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

metadata = MetaData()

emails_sent = Table(
    "demo_emails_sent", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("email_key", String(300), nullable=False),  # email_type:user_id:campaign
    Column("email_type", String(50), nullable=False),
    Column("user_id", Integer, nullable=False),
    Column("campaign", String(100), nullable=False),
    Column("to_addr", String(200), nullable=False),
    Column("subject", Text, nullable=False),
    Column("message_id", String(100), nullable=False),
    Column("job_id", String(100), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("sent_at_ms", BigInteger, nullable=False),
    Index("ix_demo_emails_sent_email_key", "email_key"),
)

stock = Table(
    "demo_stock", metadata,
    Column("sku", String(100), primary_key=True),
    Column("quantity", Integer, nullable=False),
    Column("version", Integer, nullable=False),
    # fencing token of the business lock of the last writer (pessimistic side)
    Column("lock_fence", BigInteger, nullable=False, default=0),
)

stock_events = Table(
    "demo_stock_events", metadata,
    Column("event_id", String(100), primary_key=True),  # unique: event-id dedup
    Column("sku", String(100), nullable=False),
    Column("delta", Integer, nullable=False),
    Column("applied_version", Integer, nullable=False),
    Column("job_id", String(100), nullable=False),
    Column("applied_at_ms", BigInteger, nullable=False),
    Index("ix_demo_stock_events_sku", "sku"),
)

invoices = Table(
    "demo_invoices", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("order_id", String(100), nullable=False),
    Column("invoice_ref", String(100), nullable=False),
    Column("customer", String(200), nullable=False),
    Column("amount_cents", BigInteger, nullable=False),
    Column("job_id", String(100), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("uq_demo_invoices_order_id", "order_id", unique=True),
)

_ready: weakref.WeakSet[Engine] = weakref.WeakSet()
_ready_lock = threading.Lock()


def create_tables(engine: Engine) -> None:
    """Create the demo tables once per engine (idempotent; safe if another process races)."""
    if engine in _ready:
        return
    with _ready_lock:
        if engine in _ready:
            return
        try:
            metadata.create_all(engine)
        except SQLAlchemyError:
            # another process created them between the existence check and CREATE TABLE
            metadata.create_all(engine)
        _ready.add(engine)


def ensure_for_session(session: Any) -> None:
    bind = session.get_bind()
    create_tables(getattr(bind, "engine", bind))


def insert_for(session: Any, table: Table) -> Any:
    """A dialect ``insert`` that supports ``on_conflict_do_nothing`` (SQLite, PostgreSQL)."""
    name = session.get_bind().dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects import postgresql
        return postgresql.insert(table)
    if name == "sqlite":
        from sqlalchemy.dialects import sqlite
        return sqlite.insert(table)
    raise NotImplementedError(  # pragma: no cover
        f"the demo supports SQLite and PostgreSQL, not {name!r}")


# the invoice webhook as a chord: a stock hold per order, then the order closed
stock_holds = Table(
    "demo_stock_holds", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("order_id", String(100), nullable=False),
    Column("sku", String(100), nullable=False),
    Column("units", Integer, nullable=False),
    Column("job_id", String(100), nullable=False),
    Column("held_at_ms", BigInteger, nullable=False),
    Index("uq_demo_stock_holds_order_id", "order_id", unique=True),
)

orders_closed = Table(
    "demo_orders_closed", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("order_id", String(100), nullable=False),
    Column("invoice_ref", String(100), nullable=False),
    Column("message_id", String(100), nullable=False),
    Column("units_held", Integer, nullable=False),
    Column("job_id", String(100), nullable=False),
    Column("closed_at_ms", BigInteger, nullable=False),
    Index("uq_demo_orders_closed_order_id", "order_id", unique=True),
)
