"""Fencing tokens checked in SQL: a holder that lost its business lock cannot commit after the
holder that took it, on SQLite and PostgreSQL; a Redis whose fence counters were lost heals."""

from __future__ import annotations

import pytest

from sqlalchemy import text

from antre import Antre
from antre.stores.fencing import FenceRejected, LockFences
from antre.stores.sql import session_factory
from antre_worker.runner import WorkerProcess


def test_tokens_only_move_forward_and_a_refusal_names_the_winner(migrated_engine, clock):
    fences = LockFences(migrated_engine.dialect.name, clock)
    sf = session_factory(migrated_engine)
    with migrated_engine.begin() as c:
        c.execute(text("CREATE TABLE effects (k VARCHAR(20))"))
    for fence in (3, 5, 5):  # the same token again is the same holder: allowed
        with sf() as s:
            fences.advance(s, "sku:1", fence)
            s.commit()
    with sf() as s:
        s.execute(text("INSERT INTO effects (k) VALUES ('stale')"))
        with pytest.raises(FenceRejected) as info:
            fences.advance(s, "sku:1", 4)
        s.rollback()
    assert (info.value.fence, info.value.current) == (4, 5)
    assert "older than 5" in str(info.value)
    with sf() as s:
        assert fences.current(s, "sku:1") == 5 and fences.current(s, "sku:2") is None
        assert s.execute(text("SELECT count(*) FROM effects")).scalar_one() == 0
        fences.advance(s, "sku:2", 1)  # keys are independent
        s.commit()


def _app(redis_url, db_url, clock):
    app = Antre(redis_url=redis_url, database_url=db_url, clock=clock)
    with app.engine.begin() as c:
        c.execute(text("CREATE TABLE effects (k VARCHAR(50), fence INTEGER)"))
    return app


def _effects(app):
    with app.engine.connect() as c:
        return [tuple(r) for r in c.execute(text("SELECT k, fence FROM effects ORDER BY fence"))]


def _worker(app, clock):
    return WorkerProcess(app, queues=["default"], threads=1, worker_id="w1", clock=clock,
                         heartbeat_s=60)


def test_a_holder_that_lost_its_lock_cannot_commit_after_the_new_holder(redis_url, db_url,
                                                                        clock):
    app = _app(redis_url, db_url, clock)

    @app.handler("stock")
    def stock(ctx, payload):
        if payload["who"] == "slow" and ctx.attempt == 1 and not stock.stalled:
            stock.stalled = True
            # this holder stalls past its lock: the lock goes to another worker, which commits
            app.locks.release_token("sku:1", ctx.lock.token)
            other = app.locks.acquire("sku:1", 30_000, owner="w2")
            with app.session_factory() as s:
                s.execute(text("INSERT INTO effects (k, fence) VALUES ('fast', :f)"),
                          {"f": other.fence})
                app.fences.advance(s, "sku:1", other.fence)
                s.commit()
            app.locks.release(other)
        ctx.db.execute(text("INSERT INTO effects (k, fence) VALUES (:k, :f)"),
                       {"k": payload["who"], "f": ctx.fence})
    stock.stalled = False

    job_id = app.enqueue("stock", {"who": "slow"}, idempotency_key="op:1", lock_key="sku:1")
    w = _worker(app, clock)
    w.locks.renew = lambda lock: True  # the stall came after the last renewal: Redis cannot tell
    counts = w.run_burst()
    assert counts["fence_rejected"] == 1
    assert _effects(app) == [("fast", 2)]  # the stale holder's write was rolled back
    job = app.queue().get(job_id)
    assert job.state == "scheduled" and job.attempt == 0  # retried, no attempt spent
    clock.advance(1000)
    _worker(app, clock).run_burst()
    assert _effects(app) == [("fast", 2), ("slow", 3)]
    assert app.queue().get(job_id).state == "done"


def test_lost_redis_fence_counters_heal_after_one_refusal(redis_url, db_url, clock):
    app = _app(redis_url, db_url, clock)
    with app.session_factory() as s:  # SQL remembers token 10 from before Redis was replaced
        app.fences.advance(s, "sku:9", 10)
        s.commit()

    @app.handler("stock")
    def stock(ctx, payload):
        ctx.db.execute(text("INSERT INTO effects (k, fence) VALUES ('x', :f)"), {"f": ctx.fence})

    job_id = app.enqueue("stock", {}, idempotency_key="op:9", lock_key="sku:9")
    counts = _worker(app, clock).run_burst()  # the fresh counter hands out token 1: refused
    assert counts["fence_rejected"] == 1 and _effects(app) == []
    assert int(app.redis.get("antre:lock:{sku:9}:fence")) == 10
    clock.advance(1000)
    _worker(app, clock).run_burst()
    assert _effects(app) == [("x", 11)]
    assert app.queue().get(job_id).state == "done" and app.queue().get(job_id).attempt == 0


def test_no_session_means_no_fence_statement(redis_url, db_url, clock):
    app = _app(redis_url, db_url, clock)

    @app.handler("email")
    def email(ctx, payload):
        return "sent"  # no SQL effect: nothing to fence in SQL

    app.enqueue("email", {}, idempotency_key="e:1", lock_key="user:1")
    _worker(app, clock).run_burst()
    with app.session_factory() as s:
        assert app.fences.current(s, "user:1") is None
    assert app.idempotency.lookup("e:1").status == "completed"
