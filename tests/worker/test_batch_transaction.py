"""The ctx.db writers of a prefetched batch share one transaction: each job's effects, fence
and completion in a savepoint of its own, the batch committed once before its acks. A failing
job rolls back only its savepoint; a commit that fails sends every job back unacked, to run
again with one committed effect each; a job whose lock was lost cannot commit. On SQLite and
PostgreSQL, with a real Redis and the runner's own batch path."""

from __future__ import annotations

import psycopg
import pytest
from helpers import make_worker
from sqlalchemy import text

from antre import Antre, Permanent


@pytest.fixture
def app(redis_url, db_url, clock):
    app = Antre(redis_url=redis_url, database_url=db_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k VARCHAR(100) PRIMARY KEY, n INTEGER)"))
    return app


def work(w, n):
    """One prefetched batch of ``n`` jobs through the runner's own batch path."""
    q = w.queues[0]
    held = w._hold(q, q.reserve(w.worker_id, count=n))
    assert len(held) == n
    w._work(held)


def effects(app):
    with app.engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(text("SELECT k, n FROM effects")))


def writer(app, ran, fail=()):
    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        if payload["n"] in fail:
            raise Permanent("no")  # after its write: only its savepoint rolls back
        return payload["n"]


def enqueue(app, n, lock=False):
    return app.enqueue_many([app.spec("w", {"n": i}, idempotency_key=f"k{i}",
                                      lock_key=f"sku:{i}" if lock else None)
                             for i in range(n)])


@pytest.mark.parametrize("lock", [False, True])
def test_a_failing_job_rolls_back_only_its_savepoint(app, clock, lock):
    ran = []
    writer(app, ran, fail={2})
    ids = enqueue(app, 5, lock)
    work(make_worker(app, clock), 5)
    q = app.queue()
    assert ran == [0, 1, 2, 3, 4]
    assert effects(app) == [(f"k{i}", i) for i in (0, 1, 3, 4)]
    assert [q.get(i).state for i in ids] == ["done", "done", "dead", "done", "done"]
    assert [q.get(i).result for i in ids if q.get(i).state == "done"] == [0, 1, 3, 4]
    assert app.idempotency.lookup("k2").status == "failed"
    assert {app.idempotency.lookup(f"k{i}").status for i in (0, 1, 3, 4)} == {"completed"}
    assert app.locks.held() == []


@pytest.mark.postgres
@pytest.mark.parametrize("lock", [False, True])
def test_a_batch_of_ctx_db_writers_costs_a_fifth_of_a_commit_per_job(redis_url, pg_url, clock,
                                                                    lock):
    app = Antre(redis_url=redis_url, database_url=pg_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k VARCHAR(100) PRIMARY KEY, n INTEGER)"))
    ran = []
    writer(app, ran)
    n = 20
    ids = enqueue(app, n, lock)
    w = make_worker(app, clock)
    assert app.idempotency.lookup("k0") is None  # the schema is in place before counting
    admin = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")
                            .split("?")[0], autocommit=True)

    def commits():
        admin.execute("SELECT pg_stat_clear_snapshot()")
        return admin.execute("SELECT xact_commit FROM pg_stat_database "
                             "WHERE datname = current_database()").fetchone()[0]

    before = commits()
    work(w, n)
    spent = commits() - before - 1  # (the reading's own transaction)
    admin.close()
    assert ran == list(range(n))
    assert [app.queue().get(i).state for i in ids] == ["done"] * n
    assert effects(app) == sorted((f"k{i}", i) for i in range(n))
    # before: one commit per job (a transaction each) plus the claims' one
    assert spent / n <= 0.2, spent


def test_a_commit_that_fails_sends_every_job_back_and_they_run_again_once(app, clock,
                                                                          monkeypatch):
    ran = []
    writer(app, ran)
    ids = enqueue(app, 4, lock=True)
    w = make_worker(app, clock)
    from antre_worker.transaction import BatchTransaction
    finish = BatchTransaction.finish

    def failing(self):
        if self.session is not None:  # the commit goes to a connection that died under it
            self.session.connection().invalidate()
        return finish(self)

    monkeypatch.setattr(BatchTransaction, "finish", failing)
    work(w, 4)
    monkeypatch.undo()
    q = app.queue()
    assert [q.get(i).state for i in ids] == ["scheduled"] * 4  # back, unacked
    assert q.get(ids[0]).attempt == 0  # no attempt spent
    assert effects(app) == []
    assert app.locks.held() == []
    clock.advance(2_000)
    make_worker(app, clock).run_burst()
    assert ran[:4] == [0, 1, 2, 3] and sorted(ran[4:]) == [0, 1, 2, 3]
    assert [q.get(i).state for i in ids] == ["done"] * 4
    assert effects(app) == [(f"k{i}", i) for i in range(4)]  # one committed effect each
    assert {app.idempotency.lookup(f"k{i}").status for i in range(4)} == {"completed"}


@pytest.mark.postgres
def test_a_commit_killed_by_the_server_sends_every_job_back(redis_url, pg_url, clock):
    app = Antre(redis_url=redis_url, database_url=pg_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k VARCHAR(100) PRIMARY KEY, n INTEGER)"))
    ran = []
    admin = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")
                            .split("?")[0], autocommit=True)

    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        if payload["n"] == 2 and len(ran) == 3:  # the last of the batch: its session dies
            pid = ctx.db.execute(text("SELECT pg_backend_pid()")).scalar()
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return payload["n"]

    ids = enqueue(app, 3)
    work(make_worker(app, clock), 3)
    q = app.queue()
    assert [q.get(i).state for i in ids] == ["scheduled"] * 3
    assert effects(app) == []
    clock.advance(2_000)
    make_worker(app, clock).run_burst()
    admin.close()
    assert [q.get(i).state for i in ids] == ["done"] * 3
    assert effects(app) == [(f"k{i}", i) for i in range(3)]


@pytest.mark.postgres
def test_a_deferred_constraint_failing_at_commit_sends_every_job_back(redis_url, pg_url, clock):
    app = Antre(redis_url=redis_url, database_url=pg_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k VARCHAR(100) PRIMARY KEY, n INTEGER, "
                          "CONSTRAINT one_n UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)"))
        conn.execute(text("INSERT INTO effects (k, n) VALUES ('before', 100)"))
    ran = []

    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        first = len(ran) <= 3  # its first run writes a row the commit refuses
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key,
                        "n": 100 if first and payload["n"] == 1 else payload["n"]})
        return payload["n"]

    ids = enqueue(app, 3)
    work(make_worker(app, clock), 3)
    q = app.queue()
    assert [q.get(i).state for i in ids] == ["scheduled"] * 3  # none acked
    assert effects(app) == [("before", 100)]
    clock.advance(2_000)
    make_worker(app, clock).run_burst()
    assert sorted(ran) == [0, 0, 1, 1, 2, 2]
    assert [q.get(i).state for i in ids] == ["done"] * 3
    assert effects(app) == [("before", 100), ("k0", 0), ("k1", 1), ("k2", 2)]


def test_a_job_whose_lock_was_lost_mid_batch_cannot_commit(app, clock):
    ran = []

    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        if payload["n"] == 1 and len(ran) == 2:  # force-released while the handler ran
            app.locks.release_token(ctx.lock.key, ctx.lock.token)
        return payload["n"]

    ids = enqueue(app, 3, lock=True)
    work(make_worker(app, clock), 3)
    q = app.queue()
    # the locks are checked together before the commit: job 1's is gone, so nothing of the
    # batch commits (its savepoint was released), and every job goes back unacked
    assert [q.get(i).state for i in ids] == ["scheduled"] * 3
    assert q.stats()["lock_lost"] == 1
    assert effects(app) == []
    assert {app.idempotency.lookup(f"k{i}").status for i in range(3)} == {"processing"}
    assert app.locks.held() == []
    clock.advance(2_000)
    make_worker(app, clock).run_burst()
    assert [q.get(i).state for i in ids] == ["done"] * 3
    assert effects(app) == [(f"k{i}", i) for i in range(3)]


def test_a_lock_found_lost_before_its_savepoint_is_released_fails_that_job_alone(app, clock):
    ran = []

    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        if payload["n"] == 1 and len(ran) == 2:
            # taken by another holder, and the heartbeat's renewal found it gone
            app.locks.release_token(ctx.lock.key, ctx.lock.token)
            app.locks.acquire(ctx.lock.key, 30_000, owner="elsewhere")
            ctx.lock.lost = True
        return payload["n"]

    ids = enqueue(app, 3, lock=True)
    work(make_worker(app, clock), 3)
    q = app.queue()
    assert q.get(ids[1]).state == "scheduled" and q.stats()["lock_lost"] == 1
    assert effects(app) == [("k0", 0), ("k2", 2)]  # its savepoint alone rolled back
    assert q.get(ids[0]).state == q.get(ids[2]).state == "done"
    assert app.idempotency.lookup("k1").status == "processing"


def test_a_job_whose_lease_was_lost_after_its_savepoint_rolls_the_batch_back(app, clock):
    ran, held = [], []

    @app.handler("w")
    def handler(ctx, payload):
        ran.append(payload["n"])
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        if payload["n"] == 1:  # job 0's lease is found lost (the heartbeat's word) meanwhile
            held[0].lease_lost = True
        return payload["n"]

    ids = enqueue(app, 2)
    w = make_worker(app, clock)
    q = w.queues[0]
    held.extend(w._hold(q, q.reserve(w.worker_id, count=2)))
    w._work(held)
    assert ran == [0, 1]
    assert effects(app) == []  # job 0 could not commit, and job 1 with it
    assert app.queue().get(ids[1]).state == "scheduled"
    assert {app.idempotency.lookup(k).status for k in ("k0", "k1")} == {"processing"}


def test_the_window_commits_before_the_batch_ends(app, clock, monkeypatch):
    ran, seen = [], []
    monkeypatch.setenv("ANTRE_DB_COMMIT_WINDOW_MS", "5")

    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        seen.append(len(effects(app)))  # committed so far, read from another connection
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        if payload["n"] == 1:
            clock.advance(5)  # the window passes as job 1 ends
        return payload["n"]

    ids = enqueue(app, 4)
    work(make_worker(app, clock), 4)
    assert seen == [0, 0, 2, 2]  # jobs 0 and 1 committed when 1 ended, 2 and 3 at the end
    assert [app.queue().get(i).state for i in ids] == ["done"] * 4


def test_a_window_of_zero_commits_each_job_alone(app, clock, monkeypatch):
    ran, seen = [], []
    monkeypatch.setenv("ANTRE_DB_COMMIT_WINDOW_MS", "0")

    @app.handler("w")
    def w(ctx, payload):
        ran.append(payload["n"])
        seen.append(len(effects(app)))
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key, "n": payload["n"]})
        return payload["n"]

    enqueue(app, 3)
    work(make_worker(app, clock), 3)
    assert seen == [0, 1, 2]


@pytest.mark.parametrize("lock", [False, True])
def test_four_runner_threads_of_writers_commit_each_effect_once(app, clock, lock):
    ran = []
    writer(app, ran, fail={7})
    n = 120
    ids = enqueue(app, n, lock)
    counts = make_worker(app, clock, threads=4).run_burst()
    q = app.queue()
    states = [q.get(i).state for i in ids]
    assert states.count("done") == n - 1 and states[7] == "dead"
    assert effects(app) == sorted((f"k{i}", i) for i in range(n) if i != 7)
    assert counts["succeeded"] == n - 1
    assert app.locks.held() == []


@pytest.mark.postgres
def test_a_job_whose_effect_never_commits_runs_alone_next_and_fails_by_itself(redis_url, pg_url,
                                                                          clock):
    app = Antre(redis_url=redis_url, database_url=pg_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k VARCHAR(100) PRIMARY KEY, n INTEGER, "
                          "CONSTRAINT one_n UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)"))
        conn.execute(text("INSERT INTO effects (k, n) VALUES ('before', 100)"))

    @app.handler("w", max_attempts=1)
    def w(ctx, payload):
        ctx.db.execute(text("INSERT INTO effects (k, n) VALUES (:k, :n)"),
                       {"k": ctx.job.idempotency_key,
                        "n": 100 if payload["n"] == 1 else payload["n"]})  # refused at commit
        return payload["n"]

    ids = enqueue(app, 3)
    worker = make_worker(app, clock)
    work(worker, 3)
    q = app.queue()
    assert [q.get(i).state for i in ids] == ["scheduled"] * 3
    clock.advance(2_000)
    assert q.promote() == 3
    work(worker, 3)  # the same process, a batch of three again: each commits on its own
    assert [q.get(i).state for i in ids] == ["done", "dead", "done"]
    assert effects(app) == [("before", 100), ("k0", 0), ("k2", 2)]
