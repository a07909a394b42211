"""Optimistic locking as a primitive: a versioned row's compare-and-set
through a handler's SQL session (``ctx.db``), raising ``VersionConflict`` when the row is no
longer at the version that was read. The worker turns that conflict into a re-queue behind the
job's lock_key without spending an attempt (``antre.engine.retry.classify``), counted as
``version_conflict`` (queue stats, ``antre_version_conflicts``) and on the job's timeline.

May import: ``antre.errors``, sqlalchemy. Works on SQLite and PostgreSQL alike: one UPDATE
whose WHERE carries the version, its rowcount says whether it applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Table, and_, update
from sqlalchemy.sql.elements import ColumnElement

from antre.errors import VersionConflict


def versioned_update(db: Any, table: Table, key: Mapping[str, Any], version: int,
                     values: Mapping[str, Any], *, version_column: str = "version",
                     where: Iterable[ColumnElement[bool]] = ()) -> int:
    """``UPDATE table SET <values>, <version_column> = version + 1 WHERE <key columns> =
    <key values> AND <version_column> = version [AND <where>]`` in ``db`` (a SQLAlchemy
    session or connection). Returns the row's new version; raises ``VersionConflict`` (nothing
    written) when no row matched: another writer moved it on since ``version`` was read, or it
    is gone, or an extra ``where`` (e.g. a lock's fencing token) refused it. ``values`` may use
    column expressions (``{"quantity": table.c.quantity + 5}``)."""
    if not key:
        raise ValueError("versioned_update needs the row's key columns, e.g. {'sku': 'A-1'}")
    if version_column in values:
        raise ValueError(f"do not set {version_column!r} yourself: it becomes version + 1")
    col = table.c[version_column]
    conds = [table.c[name] == value for name, value in key.items()]
    conds += [col == version, *where]
    res = db.execute(update(table).where(and_(*conds))
                     .values({**values, version_column: col + 1}))
    if res.rowcount != 1:
        raw = next(iter(key.values())) if len(key) == 1 else dict(key)
        raise VersionConflict(table.name, raw, version)
    return version + 1
