"""Optimistic locking as a primitive: ``versioned_update`` is one UPDATE whose
WHERE carries the version, on SQLite and PostgreSQL: it returns the new version, and raises
``VersionConflict`` (writing nothing) when another writer moved the row on, when the row is
gone, or when an extra condition (a fencing token) refuses it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from antre import VersionConflict
from antre.stores.versioned import versioned_update

META = sa.MetaData()
ACCOUNTS = sa.Table("accounts", META, sa.Column("id", sa.String(20), primary_key=True),
                    sa.Column("balance", sa.Integer, nullable=False),
                    sa.Column("fence", sa.Integer, nullable=False, default=0),
                    sa.Column("version", sa.Integer, nullable=False))


@pytest.fixture
def engine(db_url):
    eng = sa.create_engine(db_url)
    META.create_all(eng)
    with eng.begin() as c:
        c.execute(ACCOUNTS.insert().values(id="a", balance=10, fence=0, version=3))
    yield eng
    eng.dispose()


def row(engine) -> tuple[int, int]:
    with engine.connect() as c:
        r = c.execute(sa.select(ACCOUNTS.c.balance, ACCOUNTS.c.version)).one()
    return int(r.balance), int(r.version)


def test_a_matching_version_applies_once_and_returns_the_next(engine):
    with engine.begin() as c:
        assert versioned_update(c, ACCOUNTS, {"id": "a"}, 3,
                                {"balance": ACCOUNTS.c.balance + 5}) == 4
    assert row(engine) == (15, 4)


def test_a_row_moved_on_by_another_writer_is_a_conflict_and_nothing_is_written(engine):
    with engine.connect() as mine:
        seen = mine.execute(sa.select(ACCOUNTS.c.version)).scalar_one()
        mine.rollback()
        with engine.begin() as other:  # another writer commits in between
            versioned_update(other, ACCOUNTS, {"id": "a"}, seen, {"balance": 20})
        with pytest.raises(VersionConflict) as err:
            with mine.begin():
                versioned_update(mine, ACCOUNTS, {"id": "a"}, seen, {"balance": 99})
    assert err.value.table == "accounts" and err.value.key == "a" and err.value.expected == 3
    assert "accounts 'a' is no longer at version 3" in str(err.value)
    assert row(engine) == (20, 4)


def test_a_gone_row_or_a_refusing_fence_is_a_conflict(engine):
    with engine.begin() as c, pytest.raises(VersionConflict):
        versioned_update(c, ACCOUNTS, {"id": "nobody"}, 3, {"balance": 1})
    with engine.begin() as c, pytest.raises(VersionConflict):
        versioned_update(c, ACCOUNTS, {"id": "a"}, 3, {"balance": 1},
                         where=[ACCOUNTS.c.fence > 7])
    assert row(engine) == (10, 3)


def test_bad_calls_say_what_to_pass(engine):
    with engine.begin() as c:
        with pytest.raises(ValueError, match="key columns"):
            versioned_update(c, ACCOUNTS, {}, 3, {"balance": 1})
        with pytest.raises(ValueError, match="becomes version \\+ 1"):
            versioned_update(c, ACCOUNTS, {"id": "a"}, 3, {"version": 9})
