"""Alembic environment for Antre's own tables (see ``antre.stores.sql``).

Where the connection comes from, first match wins:
1. ``config.attributes["connection"]`` - set by ``antre.stores.sql.migrate()`` (runtime, no ini file);
2. ``alembic -x url=...`` on the command line;
3. the ``ANTRE_DATABASE_URL`` environment variable;
4. ``sqlalchemy.url`` in the ini file.

No schema name is hard-coded: the tables and the version table ``antre_alembic_version`` go to
the connection's current schema (on PostgreSQL the first entry of its ``search_path``).
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import Connection

import antre.settings as settings
from antre.stores.sql import VERSION_TABLE, Base, make_engine

config = context.config

# Only when run from the command line with an ini file: never reconfigure an application's
# logging when migrate() is called programmatically.
if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    x = context.get_x_argument(as_dictionary=True)
    url = (
        x.get("url")
        or settings.DATABASE_URL.get()
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise SystemExit(
            "no database URL: pass -x url=..., set ANTRE_DATABASE_URL, or set sqlalchemy.url"
        )
    return url


def _configure(**kw: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        **kw,
    )


def run_migrations_offline() -> None:
    url = _url()
    _configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_with(connection: Connection) -> None:
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.begin() as connection:
            _run_with(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
