"""The idempotency store on SQLite and PostgreSQL: every outcome of begin, fenced completion in the
caller's transaction, races, retention."""

from __future__ import annotations

import dataclasses
import multiprocessing
import threading

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from antre.errors import InvalidJob, LeaseLost, Permanent
from antre.stores.idempotency import (
    ACQUIRED,
    BUSY,
    COMPLETED,
    FAILED,
    MISMATCH,
    TAKEN_OVER,
    CompletedCache,
    IdempotencyStore,
    Record,
    fingerprint,
)
from antre.stores.sql import VERSION_TABLE, alembic_config, make_engine, migrate, session_factory

LEASE_MS = 30_000


@pytest.fixture
def engine(migrated_engine):
    return migrated_engine


@pytest.fixture
def sf(engine):
    return session_factory(engine)


@pytest.fixture
def store(sf, clock):
    return IdempotencyStore(sf, clock=clock, retention_s=3600)


# A business table living next to the idempotency records (the handler's own writes).
effects_md = sa.MetaData()
effects = sa.Table(
    "test_effects",
    effects_md,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("what", sa.String(100), nullable=False),
)


@pytest.fixture
def effects_table(engine):
    effects_md.create_all(engine)
    return effects


def count_effects(sf) -> int:
    with sf() as s:
        return s.execute(sa.select(sa.func.count()).select_from(effects)).scalar_one()


FP = fingerprint("send_email", {"to": "a@example.org"})


def begin(
    store,
    clock,
    job_id="j1",
    fence=1,
    owner="w1",
    key="k",
    fp=FP,
    lease_ms=LEASE_MS,
    lock_fence=None,
):
    return store.begin(
        key, fp, "send_email", job_id, fence, owner, clock() + lease_ms, lock_fence=lock_fence
    )


# --------------------------------------------------------------------------- pure parts


def test_fingerprint_is_canonical_and_pure():
    a = fingerprint("t", {"b": 1, "a": [1, 2, {"y": 1, "x": 2}]})
    b = fingerprint("t", {"a": [1, 2, {"x": 2, "y": 1}], "b": 1})
    assert a == b and len(a) == 64 and int(a, 16) >= 0
    assert fingerprint("u", {"b": 1}) != fingerprint("t", {"b": 1})
    assert fingerprint("t", {"b": 1}) != fingerprint("t", {"b": 2})
    assert fingerprint("t", {"s": "é"}) == fingerprint("t", {"s": "é"})
    with pytest.raises(TypeError):
        fingerprint("t", {"x": object()})


def test_a_database_at_0001_is_upgraded_to_lock_fences(db_url):
    engine = make_engine(db_url)
    try:
        migrate(engine, "0001")
        assert "antre_lock_fences" not in sa.inspect(engine).get_table_names()
        migrate(engine)
        assert "antre_lock_fences" in sa.inspect(engine).get_table_names()
        cols = {c["name"] for c in sa.inspect(engine).get_columns("antre_lock_fences")}
        assert cols == {"lock_key", "fence", "updated_at"}
    finally:
        engine.dispose()


def test_migrate_is_idempotent_and_uses_its_own_version_table(engine):
    migrate(engine)  # second time: nothing to do
    names = set(sa.inspect(engine).get_table_names())
    assert {
        "antre_idempotency",
        "antre_outbox",
        "antre_users",
        "antre_audit",
        "antre_lock_fences",
        VERSION_TABLE,
    } <= names
    with engine.connect() as c:
        version = c.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()
    assert version == ScriptDirectory.from_config(alembic_config()).get_current_head()
    idx = {i["name"] for i in sa.inspect(engine).get_indexes("antre_idempotency")}
    assert "ix_antre_idempotency_expires_at" in idx


def test_migrate_from_url_on_fresh_database(db_url):
    migrate(db_url)
    eng = make_engine(db_url)
    try:
        assert "antre_idempotency" in sa.inspect(eng).get_table_names()
    finally:
        eng.dispose()


def _migrate_at_barrier(url, barrier, results):
    engine = make_engine(url)
    try:
        barrier.wait()
        migrate(engine)
        results.put("ok")
    except Exception as e:  # the reply names the failure
        results.put(repr(e)[:200])
    finally:
        engine.dispose()


def test_processes_migrating_one_fresh_database_at_once_all_succeed(db_url):
    """A worker pool's children and the dashboard each migrate on start. Before the migration
    lock, of four processes released at one barrier onto a fresh database, all but one
    usually failed with "table ... already exists" (the loser then failed every job)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_migrate_at_barrier, args=(db_url, barrier, results))
             for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert outcomes == ["ok"] * 4
    eng = make_engine(db_url)
    try:
        with eng.connect() as c:
            versions = c.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
        assert [v[0] for v in versions] == [
            ScriptDirectory.from_config(alembic_config()).get_current_head()]
    finally:
        eng.dispose()


# --------------------------------------------------------------------------- begin outcomes


def test_acquired_then_same_delivery_reenters(store, clock):
    b = begin(store, clock, lock_fence=7)
    assert b.outcome == ACQUIRED and b.should_run
    assert isinstance(b.record, Record) and dataclasses.is_dataclass(b.record)
    assert b.record.status == "processing" and b.record.fence == 1 and b.record.lock_fence == 7
    assert b.record.created_at.tzinfo is not None
    assert (b.record.expires_at - b.record.created_at).total_seconds() == pytest.approx(3600)
    # The same delivery (same job, same epoch) coming back is still the owner.
    again = begin(store, clock, owner="w1b")
    assert again.outcome == ACQUIRED and again.record.owner == "w1b"


def test_other_job_with_live_lease_is_busy(store, clock):
    assert begin(store, clock, job_id="j1").outcome == ACQUIRED
    clock.advance(LEASE_MS - 1)
    b = begin(store, clock, job_id="j2", fence=5)
    assert b.outcome == BUSY and not b.should_run
    assert b.record.job_id == "j1"


def test_expired_lease_is_taken_over_and_old_owner_is_fenced_out(store, clock, sf, effects_table):
    assert begin(store, clock, job_id="j1", fence=1, owner="w1").outcome == ACQUIRED
    clock.advance(LEASE_MS + 1)
    b = begin(store, clock, job_id="j2", fence=1, owner="w2")
    assert b.outcome == TAKEN_OVER
    assert (b.record.job_id, b.record.owner) == ("j2", "w2")
    # The old owner wakes up: same fence number but another job -> refused (job_id given).
    with sf() as s:
        s.execute(effects.insert().values(what="old owner"))
        with pytest.raises(LeaseLost):
            store.complete(s, "k", 1, {"r": "old"}, job_id="j1")
        s.rollback()
    with sf() as s, s.begin():
        s.execute(effects.insert().values(what="new owner"))
        store.complete(s, "k", 1, {"r": "new"}, job_id="j2")
    assert count_effects(sf) == 1
    assert store.lookup("k").result == {"r": "new"}


def test_redelivery_with_newer_epoch_takes_over_even_while_lease_live(store, clock):
    assert begin(store, clock, job_id="j1", fence=1).outcome == ACQUIRED
    b = begin(store, clock, job_id="j1", fence=2, owner="w2")
    assert b.outcome == TAKEN_OVER and b.record.fence == 2
    # The stale delivery (epoch 1) is not the owner any more.
    assert begin(store, clock, job_id="j1", fence=1).outcome == BUSY
    assert store.fail("k", 1, "boom", permanent=True) is False
    assert store.lookup("k").status == "processing"


def test_completed_returns_stored_result(store, clock, sf):
    assert begin(store, clock).outcome == ACQUIRED
    with sf() as s, s.begin():
        store.complete(s, "k", 1, {"message_id": "m-1"})
    for job_id, fence in (("j1", 1), ("j1", 2), ("j9", 1)):
        b = begin(store, clock, job_id=job_id, fence=fence)
        assert b.outcome == COMPLETED and not b.should_run
        assert b.record.result == {"message_id": "m-1"}
    assert store.counts() == {"processing": 0, "completed": 1, "failed": 0}


def test_permanent_failure_stays_failed_until_reset(store, clock):
    assert begin(store, clock).outcome == ACQUIRED
    assert store.fail("k", 1, "ValueError: bad address", permanent=True) is True
    clock.advance(10 * LEASE_MS)
    b = begin(store, clock, job_id="j1", fence=2)
    assert b.outcome == FAILED and b.record.last_error == "ValueError: bad address"
    assert store.counts()["failed"] == 1
    assert store.reset("k") is True
    assert store.reset("k") is False
    assert begin(store, clock, job_id="j1", fence=3).outcome == ACQUIRED


def test_reset_does_not_forget_completed_keys_unless_forced(store, clock, sf):
    begin(store, clock)
    with sf() as s, s.begin():
        store.complete(s, "k", 1, "done")
    assert store.reset("k") is False
    assert store.lookup("k").status == "completed"
    assert store.reset("k", force=True) is True
    assert store.lookup("k") is None


def test_retryable_failure_releases_the_key(store, clock):
    assert begin(store, clock, job_id="j1", fence=1).outcome == ACQUIRED
    assert store.fail("k", 1, "TimeoutError", permanent=False) is True
    rec = store.lookup("k")
    assert (
        rec.status == "processing"
        and rec.lease_deadline_ms == 0
        and rec.last_error == "TimeoutError"
    )
    # The retry (same job, next epoch) acquires at once: a clean release, not a take-over.
    b = begin(store, clock, job_id="j1", fence=2)
    assert b.outcome == ACQUIRED and b.record.fence == 2
    assert b.record.created_at == rec.created_at


def test_mismatch_on_reused_key(store, clock, sf):
    assert begin(store, clock).outcome == ACQUIRED
    other = fingerprint("send_email", {"to": "b@example.org"})
    b = begin(store, clock, job_id="j2", fp=other)
    assert b.outcome == MISMATCH
    with sf() as s, s.begin():
        store.complete(s, "k", 1, None)
    assert begin(store, clock, job_id="j3", fp=other).outcome == MISMATCH


def test_extend_lease_keeps_others_out(store, clock):
    begin(store, clock, job_id="j1", fence=1)
    clock.advance(LEASE_MS - 1000)
    assert store.extend_lease("k", 1, clock() + LEASE_MS, job_id="j1") is True
    clock.advance(2000)
    assert begin(store, clock, job_id="j2").outcome == BUSY
    assert store.extend_lease("k", 99, clock() + LEASE_MS) is False


def test_invalid_keys(store, clock):
    with pytest.raises(InvalidJob):
        begin(store, clock, key="x" * 501)
    with pytest.raises(InvalidJob):
        begin(store, clock, key="")
    assert begin(store, clock, key="x" * 500).outcome == ACQUIRED


# --------------------------------------------------------------------------- exactly-once SQL effects


def test_complete_commits_with_the_handlers_writes(store, clock, sf, effects_table):
    begin(store, clock)
    with sf() as s, s.begin():
        s.execute(effects.insert().values(what="invoice 1"))
        store.complete(s, "k", 1, {"invoice": "INV-1"})
    assert count_effects(sf) == 1
    assert store.lookup("k").status == "completed"


def test_complete_with_stale_fence_raises_and_rolls_back_callers_writes(
    store, clock, sf, effects_table
):
    begin(store, clock, job_id="j1", fence=1)
    assert begin(store, clock, job_id="j1", fence=2).outcome == TAKEN_OVER  # newer delivery
    # s.begin() as a context manager rolls back on the exception.
    with pytest.raises(LeaseLost), sf() as s, s.begin():
        s.execute(effects.insert().values(what="should vanish"))
        store.complete(s, "k", 1, {"invoice": "INV-1"})
    assert count_effects(sf) == 0
    rec = store.lookup("k")
    assert rec.status == "processing" and rec.fence == 2 and rec.result is None


def test_crash_before_commit_leaves_it_to_run_again(store, clock, sf, effects_table):
    begin(store, clock, job_id="j1", fence=1)
    s = sf()
    s.execute(effects.insert().values(what="lost"))
    store.complete(s, "k", 1, "r")
    s.rollback()  # the worker died before commit
    s.close()
    assert count_effects(sf) == 0
    assert store.lookup("k").status == "processing"
    assert begin(store, clock, job_id="j1", fence=2).outcome == TAKEN_OVER


def test_complete_twice_second_is_refused(store, clock, sf):
    begin(store, clock)
    with sf() as s, s.begin():
        store.complete(s, "k", 1, 1)
    with pytest.raises(LeaseLost), sf() as s, s.begin():
        store.complete(s, "k", 1, 2)
    assert store.lookup("k").result == 1


def test_complete_without_a_session_is_one_fenced_autocommit_statement(store, clock):
    b = begin(store, clock, job_id="j1", fence=2)
    assert b.record == store.lookup("k")  # the record begin returns is the row as stored
    with pytest.raises(LeaseLost):
        store.complete(None, "k", 1, "stale", job_id="j1")
    with pytest.raises(LeaseLost):
        store.complete(None, "k", 2, "other job", job_id="j9")
    assert store.lookup("k").status == "processing"
    store.complete(None, "k", 2, {"sent": True}, job_id="j1")
    rec = store.lookup("k")
    assert (rec.status, rec.result) == ("completed", {"sent": True})
    with pytest.raises(LeaseLost):
        store.complete(None, "k", 2, "again", job_id="j1")


def test_complete_with_non_json_result_is_permanent(store, clock, sf):
    begin(store, clock)
    with sf() as s, pytest.raises(Permanent):
        store.complete(s, "k", 1, {"x": object()})


# --------------------------------------------------------------------------- races


def _race(n, fn):
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def run(i):
        try:
            barrier.wait(timeout=10)
            results[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return results


def test_ten_threads_racing_on_one_key_exactly_one_acquires(store, clock):
    outcomes = _race(10, lambda i: begin(store, clock, job_id=f"j{i}", owner=f"w{i}").outcome)
    assert sorted(outcomes) == [ACQUIRED] + [BUSY] * 9


def test_ten_threads_racing_to_take_over_exactly_one_wins(store, clock):
    assert begin(store, clock, job_id="dead").outcome == ACQUIRED
    clock.advance(LEASE_MS + 1)
    outcomes = _race(10, lambda i: begin(store, clock, job_id=f"j{i}", owner=f"w{i}").outcome)
    assert sorted(outcomes) == [BUSY] * 9 + [TAKEN_OVER]


def test_two_owners_complete_exactly_one_commit(store, clock, sf, effects_table):
    """An expired owner and the redelivery both reach complete(): one commit."""
    begin(store, clock, job_id="j1", fence=1)
    clock.advance(LEASE_MS + 1)
    assert begin(store, clock, job_id="j1", fence=2).outcome == TAKEN_OVER

    def finish(i):
        fence = i + 1
        try:
            with sf() as s, s.begin():
                s.execute(effects.insert().values(what=f"fence {fence}"))
                store.complete(s, "k", fence, fence)
            return "committed"
        except LeaseLost:
            return "lease lost"

    assert sorted(_race(2, finish)) == ["committed", "lease lost"]
    assert count_effects(sf) == 1
    assert store.lookup("k").result == 2


# --------------------------------------------------------------------------- retention, counts, cache


def test_prune_removes_expired_records_only(store, clock, sf):
    begin(store, clock, key="old")
    clock.advance(1_000_000)
    begin(store, clock, key="young")
    with sf() as s, s.begin():
        store.complete(s, "young", 1, "ok")
    assert store.prune() == 0
    clock.advance(3600 * 1000 - 1_000_000 + 1)  # "old" is now past created + retention
    assert store.prune() == 1
    assert store.lookup("old") is None and store.lookup("young") is not None
    assert store.prune(clock() + 3600 * 1000 + 1) == 1
    assert store.counts() == {"processing": 0, "completed": 0, "failed": 0}


def test_prune_in_batches(store, clock):
    for i in range(7):
        begin(store, clock, key=f"k{i}")
    assert store.prune(clock() + 3600 * 1000 + 1, batch=3) == 7


def test_completion_extends_retention(store, clock, sf):
    begin(store, clock)
    clock.advance(3000 * 1000)
    with sf() as s, s.begin():
        store.complete(s, "k", 1, "ok")
    clock.advance(1000 * 1000)  # past created + retention, not past completed + retention
    assert store.prune() == 0
    assert begin(store, clock, job_id="dup").outcome == COMPLETED


def test_counts(store, clock, sf):
    begin(store, clock, key="a")
    begin(store, clock, key="b")
    begin(store, clock, key="c")
    with sf() as s, s.begin():
        store.complete(s, "a", 1, None)
    store.fail("b", 1, "x", permanent=True)
    assert store.counts() == {"processing": 1, "completed": 1, "failed": 1}


def test_completed_cache_is_only_an_accelerator(sf, clock):
    cache = CompletedCache(ttl_ms=10_000, clock=clock)
    store = IdempotencyStore(sf, clock=clock, cache=cache)
    begin(store, clock)
    assert len(cache) == 0  # processing is never cached
    with sf() as s, s.begin():
        store.complete(s, "k", 1, "r")
    first = begin(store, clock, job_id="j2")
    assert first.outcome == COMPLETED and not first.cached
    second = begin(store, clock, job_id="j3")
    assert second.outcome == COMPLETED and second.cached and second.record.result == "r"
    assert begin(store, clock, job_id="j4", fp="0" * 64).outcome == MISMATCH
    clock.advance(10_001)
    assert not begin(store, clock, job_id="j5").cached  # expired -> back to the database
    assert store.reset("k", force=True)
    assert begin(store, clock, job_id="j6").outcome == ACQUIRED  # reset invalidated the cache


def test_driver_errors_on_the_direct_path_are_sqlalchemy_errors(store, clock):
    # the claim runs straight on the driver; its errors still look like SQLAlchemy's
    with pytest.raises(sa.exc.IntegrityError):
        store.begin("k", None, "t", "j1", 1, "w1", clock() + LEASE_MS)
    assert store.lookup("k") is None
    assert begin(store, clock).outcome == ACQUIRED  # the connection is usable afterwards
