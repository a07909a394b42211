"""A handler's ``VersionConflict`` (``ctx.versioned_update``) through a real
worker: its SQL rolls back, the job is re-queued with no attempt spent, behind its lock_key's
next job when it has one, counted (queue stats, the worker's counts, ``/metrics``' counter) and
on its timeline; the next run applies once."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from helpers import burst

from antre import Antre
from antre.observe.finder import Finder

META = sa.MetaData()
ROWS = sa.Table("rows", META, sa.Column("id", sa.String(20), primary_key=True),
                sa.Column("n", sa.Integer, nullable=False),
                sa.Column("version", sa.Integer, nullable=False))


@pytest.fixture
def dbapp(redis_url, clock, db_url):
    app = Antre(redis_url=redis_url, database_url=db_url, clock=clock)
    META.create_all(app.engine)
    with app.engine.begin() as c:
        c.execute(ROWS.insert().values(id="r", n=0, version=0))
    return app


def test_a_conflict_requeues_behind_the_key_without_an_attempt(dbapp, clock):
    ran: list[str] = []

    @dbapp.handler("bump")
    def bump(ctx, payload):
        ran.append(payload["name"])
        version = ctx.db.execute(sa.select(ROWS.c.version)).scalar_one()
        if payload["name"] == "first" and ran.count("first") == 1:
            with dbapp.engine.begin() as other:  # another writer, mid-run
                other.execute(sa.update(ROWS).values(version=ROWS.c.version + 1))
        return ctx.versioned_update(ROWS, {"id": "r"}, version, {"n": ROWS.c.n + 1})

    q = dbapp.queue()
    first = dbapp.enqueue("bump", {"name": "first"}, idempotency_key="b:1", lock_key="row:r")
    second = dbapp.enqueue("bump", {"name": "second"}, idempotency_key="b:2", lock_key="row:r")
    _, counts = burst(dbapp, clock)
    clock.advance(1000)
    q.promote()
    _, more = burst(dbapp, clock)
    counts.update(more)
    assert ran == ["first", "second", "first"]  # the conflict went behind the key's next job
    a, b = q.get(first), q.get(second)
    assert (a.state, b.state) == ("done", "done") and a.attempt == 0 and a.result == 3
    with dbapp.engine.connect() as c:
        assert c.execute(sa.select(ROWS.c.n, ROWS.c.version)).one() == (2, 3)
    assert counts["version_conflict"] == 1 and q.stats()["version_conflict"] == 1
    kinds = [e.kind for e in Finder(dbapp.redis).timeline("default", first).events]
    assert "snoozed" in kinds and kinds[-1] == "completed"
    from antre.observe.metrics import render
    text = render(dbapp.redis)[0].decode()
    assert 'antre_version_conflicts_total{queue="default"} 1.0' in text
