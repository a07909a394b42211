"""A prefetched batch's idempotency records cost a statement per batch, not two per job: a job's
claim also inserts fresh claims for the next jobs of its batch (``claim_many``), and the
successes that wrote nothing through ``ctx.db`` are completed in one commit right before their
batched ack (``complete_many``); the lock release's compare-and-delete reply replaces the renew
round trip before that commit. Counted here (statements, renewals), on SQLite and PostgreSQL;
unused claims are taken back, a lock lost before its release keeps the job from completing."""

from __future__ import annotations

import logging

import psycopg
import pytest
from helpers import make_worker

from antre import Antre
from antre.stores.idempotency import Claim, Completed, fingerprint


@pytest.fixture
def app(redis_url, db_url, clock):
    return Antre(redis_url=redis_url, database_url=db_url, clock=clock)


def work(w, n):
    """One prefetched batch of ``n`` jobs through the runner's own batch path."""
    q = w.queues[0]
    held = w._hold(q, q.reserve(w.worker_id, count=n))
    assert len(held) == n
    w._work(held)


def test_claim_many_inserts_only_fresh_keys_and_complete_many_is_fenced(app, clock):
    store = app.idempotency
    fp = fingerprint("t", {})
    assert store.begin("old", fp, "t", "j0", 1, "w", clock() + 30_000).should_run
    got = store.claim_many([Claim("old", fp, "t", "j9", 1, "w", clock() + 30_000),
                            Claim("a", fp, "t", "ja", 2, "w", clock() + 30_000, 7),
                            Claim("b", fp, "t", "jb", 1, None, clock() + 30_000),
                            Claim("x" * 501, fp, "t", "jx", 1, None, clock() + 30_000)])
    assert sorted(got) == ["a", "b"]  # an existing row is left to begin(), a bad key too
    assert got["a"].outcome == "acquired" and got["a"].record.lock_fence == 7
    assert store.lookup("old").job_id == "j0"
    done = store.complete_many([Completed("a", 2, "ja", {"n": 1}, 8),
                                Completed("b", 2, "jb", None),  # not its fence
                                Completed("old", 1, "j0", "r")])
    assert done == {"a", "old"}
    a, b = store.lookup("a"), store.lookup("b")
    assert (a.status, a.result, a.lock_fence) == ("completed", {"n": 1}, 8)
    assert b.status == "processing"
    assert store.unclaim("b", 2, "jb") is False and store.unclaim("b", 1, "jb") is True
    assert store.lookup("b") is None
    assert store.complete_many([]) == set() and store.claim_many([]) == {}


@pytest.mark.postgres
def test_a_batch_of_locked_jobs_costs_two_statements_and_no_renewal(redis_url, pg_url, clock,
                                                                    monkeypatch):
    app = Antre(redis_url=redis_url, database_url=pg_url, clock=clock)
    ran = []

    @app.handler("t")
    def t(ctx, payload):
        ran.append(payload["n"])
        return payload["n"]

    n = 12
    ids = app.enqueue_many([app.spec("t", {"n": i}, idempotency_key=f"k{i}", lock_key=f"sku:{i}")
                      for i in range(n)])
    w = make_worker(app, clock)
    assert app.idempotency.lookup("k0") is None  # the schema is in place before counting
    renewals = []
    renew = w.locks.renew
    w.locks.renew = lambda lock: renewals.append(lock.key) or renew(lock)
    statements = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        if "antre_idempotency" in str(query):
            statements.append(str(query).split()[0])
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    work(w, n)
    monkeypatch.undo()
    assert ran == list(range(n))
    # before: a claim and a completion per job (24); now one of each for the batch
    assert statements == ["INSERT", "UPDATE"]
    assert renewals == []  # the release's reply says the lock was held to the end
    assert [app.queue().get(i).state for i in ids] == ["done"] * n
    for i in range(n):
        rec = app.idempotency.lookup(f"k{i}")
        assert (rec.status, rec.result, rec.lock_fence) == ("completed", i, 1)
    assert app.locks.held() == []


def test_a_claim_taken_ahead_for_a_job_that_does_not_run_is_taken_back(app, clock, caplog):
    ran = []

    @app.handler("t")
    def t(ctx, payload):
        ran.append(payload["n"])

    ids = [app.enqueue("t", {"n": i}, idempotency_key=f"k{i}", lock_key=f"sku:{i}")
           for i in range(3)]
    other = app.locks.acquire("sku:1", 30_000, owner="elsewhere")
    work(make_worker(app, clock), 3)
    q = app.queue()
    assert ran == [0, 2]
    assert q.get(ids[1]).state == "scheduled"  # lock busy: snoozed
    assert app.idempotency.lookup("k1") is None  # its claim (inserted with job 0's) went back
    assert [app.idempotency.lookup(k).status for k in ("k0", "k2")] == ["completed"] * 2
    app.locks.release(other)
    clock.advance(2_000)
    caplog.set_level(logging.WARNING, logger="antre.worker")
    make_worker(app, clock).run_burst()
    assert ran == [0, 2, 1] and q.get(ids[1]).state == "done"
    assert not [rec for rec in caplog.records if getattr(rec, "event", "") == "taken_over"]


def test_a_lock_lost_before_its_release_keeps_the_batched_job_from_completing(app, clock):
    ran = []

    @app.handler("t")
    def t(ctx, payload):
        ran.append(payload["n"])
        if payload["n"] == 0 and len(ran) == 1:  # force-released while the handler ran
            app.locks.release_token(ctx.lock.key, ctx.lock.token)

    ids = [app.enqueue("t", {"n": i}, idempotency_key=f"k{i}", lock_key=f"sku:{i}")
           for i in range(2)]
    w = make_worker(app, clock)
    work(w, 2)
    q = app.queue()
    assert q.get(ids[0]).state == "scheduled" and q.stats()["lock_lost"] == 1
    assert app.idempotency.lookup("k0").status == "processing"  # not completed
    assert q.get(ids[1]).state == "done" and app.idempotency.lookup("k1").status == "completed"
    clock.advance(2_000)
    make_worker(app, clock).run_burst()
    assert ran == [0, 1, 0] and q.get(ids[0]).state == "done"
    assert app.idempotency.lookup("k0").status == "completed"


def test_a_batched_completion_that_cannot_commit_snoozes_its_jobs(app, clock):
    ran = []

    @app.handler("t")
    def t(ctx, payload):
        ran.append(payload["n"])
        if payload["n"] == 2 and ran.count(2) == 1:  # the store goes away before the commit
            with app.engine.begin() as c:
                c.exec_driver_sql("ALTER TABLE antre_idempotency RENAME TO antre_idem_away")

    ids = [app.enqueue("t", {"n": i}, idempotency_key=f"k{i}", lock_key=f"sku:{i}")
           for i in range(3)]
    w = make_worker(app, clock)
    work(w, 3)
    q = app.queue()
    assert ran == [0, 1, 2]
    assert [q.get(i).state for i in ids] == ["scheduled"] * 3  # none acked, none lost
    assert w.counts["processed"] == 0
    with app.engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE antre_idem_away RENAME TO antre_idempotency")
    clock.advance(6_000)
    make_worker(app, clock).run_burst()
    assert [q.get(i).state for i in ids] == ["done"] * 3
    assert sorted(ran) == [0, 0, 1, 1, 2, 2]  # at least once: run again, then recorded
    assert {app.idempotency.lookup(f"k{i}").status for i in range(3)} == {"completed"}


def test_a_duplicate_in_the_same_batch_is_answered_from_the_first_ones_record(app, clock):
    ran = []

    @app.handler("t")
    def t(ctx, payload):
        ran.append(ctx.job.id)
        return "once"

    ids = [app.enqueue("t", {}, idempotency_key="same", lock_key=f"sku:{i}") for i in range(2)]
    w = make_worker(app, clock)
    work(w, 2)
    q = app.queue()
    assert ran == [ids[0]]
    assert [q.get(i).state for i in ids] == ["done", "done"]  # not snoozed as busy
    assert w.counts["deduplicated"] == 1 and q.get(ids[1]).result == "once"
