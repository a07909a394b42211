"""Transactional enqueue: rows written in the caller's transaction, relayed once, never lost."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from antre.stores.outbox import Outbox, OutboxRow
from antre.stores.sql import make_engine, migrate, session_factory


@pytest.fixture
def engine(migrated_engine):
    return migrated_engine


@pytest.fixture
def sf(engine):
    return session_factory(engine)


@pytest.fixture
def outbox(sf, clock):
    return Outbox(sf, clock=clock)


class FakeQueue:
    """Like the queue's enqueue script: a job id that already exists is refused (no duplicate)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        self.pushes = 0
        self.refused = 0

    def push(self, rows: list[OutboxRow]) -> None:
        for row in rows:
            self.pushes += 1
            if row.job_id in self.jobs:
                self.refused += 1
                continue
            self.jobs[row.job_id] = row.envelope


def add_committed(sf, outbox, n, start=0, queue="default"):
    with sf() as s, s.begin():
        for i in range(start, start + n):
            outbox.add(s, queue, f"job-{i}", {"job_id": f"job-{i}", "payload": {"i": i}})


def test_add_is_part_of_the_callers_transaction(sf, outbox):
    with sf() as s:
        outbox.add(s, "default", "job-1", {"job_id": "job-1"})
        s.rollback()
    assert outbox.pending() == 0
    q = FakeQueue()
    assert outbox.relay(q.push) == 0 and q.jobs == {}


def test_crash_between_commit_and_push_loses_and_duplicates_nothing(sf, outbox, clock):
    add_committed(sf, outbox, 3)
    # The process that committed dies before any relay ran: a new process relays.
    q = FakeQueue()
    later = Outbox(sf, clock=clock)
    assert later.pending() == 3
    assert later.relay(q.push) == 3
    assert sorted(q.jobs) == ["job-0", "job-1", "job-2"]
    assert q.jobs["job-1"] == {"job_id": "job-1", "payload": {"i": 1}}
    assert later.relay(q.push) == 0
    assert q.pushes == 3 and later.pending() == 0


def test_push_raising_leaves_rows_unsent(sf, outbox):
    add_committed(sf, outbox, 2)

    def broken(rows):
        raise ConnectionError("redis down")

    with pytest.raises(ConnectionError):
        outbox.relay(broken)
    assert outbox.pending() == 2
    q = FakeQueue()
    assert outbox.relay(q.push) == 2
    assert len(q.jobs) == 2 and q.pushes == 2


def test_crash_after_push_before_mark_sent_pushes_again_harmlessly(sf, outbox):
    add_committed(sf, outbox, 2)
    q = FakeQueue()

    def push_then_die(rows):
        q.push(rows)
        raise SystemExit("killed after push, before the sent mark committed")

    with pytest.raises(SystemExit):
        outbox.relay(push_then_die)
    assert outbox.pending() == 2
    assert outbox.relay(q.push) == 2
    assert len(q.jobs) == 2 and q.refused == 2  # the second push added nothing


def test_relay_batches_in_id_order(sf, outbox):
    add_committed(sf, outbox, 7)
    batches: list[list[str]] = []
    assert (
        outbox.relay(lambda rows: batches.append([r.job_id for r in rows]), batch=3, max_batches=2)
        == 6
    )
    assert batches == [["job-0", "job-1", "job-2"], ["job-3", "job-4", "job-5"]]
    assert outbox.pending() == 1
    assert outbox.relay(lambda rows: batches.append([r.job_id for r in rows]), batch=3) == 1
    assert batches[-1] == ["job-6"]


def test_duplicate_job_id_is_refused_at_commit(sf, outbox):
    add_committed(sf, outbox, 1)
    with pytest.raises(IntegrityError), sf() as s, s.begin():
        outbox.add(s, "default", "job-0", {"again": True})
    assert outbox.pending() == 1


def test_prune_sent_keeps_unsent_rows(sf, outbox, clock):
    add_committed(sf, outbox, 2)
    assert outbox.relay(FakeQueue().push) == 2
    add_committed(sf, outbox, 1, start=10)
    clock.advance(3_600_000)
    assert outbox.oldest_pending_ms() == clock() - 3_600_000
    assert outbox.prune_sent(timedelta(hours=2)) == 0
    assert outbox.prune_sent(timedelta(minutes=30)) == 2
    assert outbox.pending() == 1
    with sf() as s:
        assert s.execute(sa.text("SELECT count(*) FROM antre_outbox")).scalar_one() == 1


def test_envelope_must_be_a_dict(sf, outbox):
    with sf() as s, pytest.raises(TypeError):
        outbox.add(s, "default", "j", ["not", "a", "dict"])


def test_concurrent_relays_skip_locked_rows(pg_url):
    """On PostgreSQL a second relay skips the batch the first one holds."""
    eng = make_engine(pg_url)
    try:
        migrate(eng)
        sf = session_factory(eng)
        outbox = Outbox(sf)
        add_committed(sf, outbox, 4)
        q = FakeQueue()
        holding = threading.Event()
        release = threading.Event()

        def slow_push(rows):
            holding.set()
            assert release.wait(10)
            q.push(rows)

        t = threading.Thread(target=lambda: outbox.relay(slow_push, batch=2, max_batches=1))
        t.start()
        assert holding.wait(10)
        seen: list[str] = []
        assert (
            outbox.relay(lambda rows: (seen.extend(r.job_id for r in rows), q.push(rows)), batch=10)
            == 2
        )
        release.set()
        t.join(10)
        assert seen == ["job-2", "job-3"]
        assert sorted(q.jobs) == ["job-0", "job-1", "job-2", "job-3"] and q.refused == 0
    finally:
        eng.dispose()
