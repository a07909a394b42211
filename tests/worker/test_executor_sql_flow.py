"""antre_worker.runner in-process, continued: the idempotency store (SQL) and flow control,
checkpoints, on a real Redis with an injected clock."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import burst, make_worker

from antre import Antre, Permanent, Retryable
from antre.engine import keys as k


# -- idempotency (SQL) ------------------------------------------------------------------------
@pytest.fixture
def dbapp(redis_url, clock, sqlite_url):
    return Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)


def test_duplicate_delivery_returns_the_stored_result_without_running(dbapp, clock):
    runs = []

    @dbapp.handler("invoice")
    def invoice(ctx, payload):
        runs.append(ctx.job.id)
        return {"invoice": f"INV-{payload['order']}"}

    q = dbapp.queue()
    first = dbapp.enqueue("invoice", {"order": 7}, idempotency_key="order:7")
    second = dbapp.enqueue("invoice", {"order": 7}, idempotency_key="order:7")
    _, counts = burst(dbapp, clock)
    assert runs == [first]
    assert q.get(first).result == q.get(second).result == {"invoice": "INV-7"}
    assert counts["deduplicated"] == 1 and q.stats()["deduplicated"] == 1
    assert dbapp.idempotency.lookup("order:7").status == "completed"


def test_reused_key_with_other_payload_is_buried(dbapp, clock):
    @dbapp.handler("invoice")
    def invoice(ctx, payload):
        return "ok"

    q = dbapp.queue()
    dbapp.enqueue("invoice", {"order": 1}, idempotency_key="order:x")
    other = dbapp.enqueue("invoice", {"order": 2}, idempotency_key="order:x")
    burst(dbapp, clock)
    job = q.get(other)
    assert job.state == "dead" and job.error_kind == "idempotency_mismatch"
    assert job.reason == "idempotency key reused with a different payload"


def test_handler_writes_commit_with_the_completion(dbapp, clock):
    from sqlalchemy import text

    with dbapp.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k TEXT PRIMARY KEY)"))

    @dbapp.handler("effect")
    def effect(ctx, payload):
        ctx.db.execute(text("INSERT INTO effects (k) VALUES (:k)"), {"k": payload["k"]})
        if payload.get("fail"):
            raise Permanent("no")
        return "written"

    dbapp.enqueue("effect", {"k": "a"}, idempotency_key="eff:a")
    dbapp.enqueue("effect", {"k": "b", "fail": True}, idempotency_key="eff:b")
    burst(dbapp, clock)
    with dbapp.engine.connect() as conn:
        assert [row[0] for row in conn.execute(text("SELECT k FROM effects"))] == ["a"]
    assert dbapp.idempotency.lookup("eff:a").status == "completed"
    assert dbapp.idempotency.lookup("eff:b").status == "failed"


@pytest.mark.postgres
def test_connection_lost_under_the_commit_snoozes_without_spending_an_attempt(redis_url, pg_url,
                                                                             clock):
    import psycopg
    from sqlalchemy import text

    app = Antre(redis_url=redis_url, database_url=pg_url, clock=clock)
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (k TEXT PRIMARY KEY)"))
    libpq = pg_url.replace("postgresql+psycopg://", "postgresql://")
    runs = []

    @app.handler("effect")
    def effect(ctx, payload):
        ctx.db.execute(text("INSERT INTO effects (k) VALUES (:k)"), {"k": payload["k"]})
        runs.append(ctx.job.epoch)
        if len(runs) == 1:  # the database drops this connection before the commit
            pid = ctx.db.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with psycopg.connect(libpq, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return "written"

    q = app.queue()
    job_id = app.enqueue("effect", {"k": "a"}, idempotency_key="eff:a")
    _, counts = burst(app, clock)
    job = q.get(job_id)
    assert job.state == "scheduled" and job.attempt == 0
    assert counts["snoozed"] == 1
    clock.advance(1000)
    burst(app, clock)
    job = q.get(job_id)
    assert job.state == "done" and job.attempt == 0 and runs == [1, 2]
    with app.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM effects")).scalar_one() == 1
    assert app.idempotency.lookup("eff:a").status == "completed"


# -- flow control, checkpoints ----------------------------------------------------------------

def test_concurrency_limit_of_one_is_never_exceeded_across_threads(app, clock, q):
    """The limit shared across queues (``across_queues``: a semaphore the worker takes after
    delivery, snoozing the excess); held at reserve: tests/worker/antre_worker/test_flow_held.py."""
    from antre import LimitPolicy
    active, peak, lock = [0], [0], threading.Lock()

    @app.handler("exclusive", flow=LimitPolicy(concurrency=1, across_queues=True))
    def exclusive(ctx, payload):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1

    ids = [app.enqueue("exclusive", {"i": i}, idempotency_key=f"ex:{i}") for i in range(8)]
    held = 0
    for _ in range(40):
        _, counts = burst(app, clock, threads=4)
        held += counts.get("concurrency_limited", 0)
        if all(q.get(i).state == "done" for i in ids):
            break
        clock.advance(2000)
        q.promote()
    assert all(q.get(i).state == "done" for i in ids)
    assert peak[0] == 1
    assert held > 0  # the other threads were held back, not run
    assert all(q.get(i).attempt == 0 for i in ids)  # holding spends no attempt


def test_open_breaker_holds_jobs_without_spending_attempts(app, clock, q):
    from antre import LimitPolicy
    from antre.limits.admission import CircuitBreaker
    app.downstream("provider", LimitPolicy(failure_threshold=2, window_s=60, cooldown_s=30))
    calls = []

    @app.handler("call", downstream="provider", max_attempts=10)
    def call(ctx, payload):
        calls.append(payload["i"])
        raise Retryable("provider 503")

    for i in range(2):
        app.enqueue("call", {"i": i}, idempotency_key=f"call:{i}")
    burst(app, clock)
    breaker = CircuitBreaker(app.redis, "downstream:provider", 2, 60, 30, clock)
    assert breaker.state().state == "open" and len(calls) == 2
    held_id = app.enqueue("call", {"i": 9}, idempotency_key="call:9")
    _, counts = burst(app, clock)
    job = q.get(held_id)
    assert counts.get("breaker_open") == 1 and len(calls) == 2  # held, not run
    assert (job.state, job.attempt) == ("scheduled", 0)


def test_checkpoint_is_persisted_and_resumed_after_a_retry(app, clock, q):
    seen = []

    @app.handler("long")
    def long(ctx, payload):
        seen.append(ctx.last_checkpoint)
        if ctx.last_checkpoint is None:
            ctx.checkpoint({"done_pages": 3})
            raise Retryable("connection reset")
        return ctx.last_checkpoint

    job_id = app.enqueue("long", {}, idempotency_key="long:1")
    burst(app, clock)
    clock.advance(60_000)
    q.promote()
    burst(app, clock)
    assert seen == [None, {"done_pages": 3}]
    assert q.get(job_id).result == {"done_pages": 3}


def test_replay_resets_a_permanently_failed_idempotency_key(redis_url, sqlite_url, clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    q = app.queue()
    fixed = []

    @app.handler("charge")
    def charge(ctx, payload):
        if not fixed:
            raise Permanent("card declined")
        return {"charged": True}

    job_id = app.enqueue("charge", {"order": 1}, idempotency_key="charge:order:1")
    burst(app, clock)
    assert q.get(job_id).state == "dead"
    assert app.idempotency.lookup("charge:order:1").status == "failed"
    # a duplicate delivery of the failed operation stays failed...
    dup = app.enqueue("charge", {"order": 1}, idempotency_key="charge:order:1")
    clock.advance(1000)
    burst(app, clock)
    assert "failed permanently" in q.get(dup).reason
    # ...while a replay on purpose runs it again
    fixed.append(True)
    clock.advance(1000)
    assert q.replay(job_id)
    burst(app, clock)
    job = q.get(job_id)
    assert (job.state, job.result) == ("done", {"charged": True})
    assert app.idempotency.lookup("charge:order:1").status == "completed"


def test_jobs_held_by_a_rate_limit_are_spread_over_the_backlog(app, clock, q):
    from antre import LimitPolicy
    app.downstream("sms", LimitPolicy(rate_per_s=1, burst=1, across_queues=True))  # (the bucket)

    @app.handler("sms", downstream="sms")
    def sms(ctx, payload):
        return "sent"

    ids = [app.enqueue("sms", {"i": i}, idempotency_key=f"sms:{i}") for i in range(40)]
    _, counts = burst(app, clock)
    assert counts["succeeded"] == 1 and counts["rate_limited"] == 39
    due = sorted(q.get(i).visible_at - clock() for i in ids if q.get(i).state == "scheduled")
    assert len(due) == 39 and all(q.get(i).attempt == 0 for i in ids)
    # not a herd coming back together: spread over roughly backlog / rate seconds
    assert due[-1] - due[0] > 10_000


def test_adaptive_prefetch_grows_on_short_jobs_and_shrinks_on_slow_ones(app, clock):
    w = make_worker(app, clock, prefetch=16)
    sizes = [1]
    for _ in range(6):  # full batches done fast: 1, 2, 4, 8, 16, capped
        sizes.append(w._next_batch(sizes[-1], sizes[-1], 0.001))
    assert sizes == [1, 2, 4, 8, 16, 16, 16]
    assert w._next_batch(16, 3, 0.001) == 16  # a short batch (queue ran dry) does not grow
    assert w._next_batch(16, 16, 2.0) == 8  # slow jobs: fewer held at once
    assert w._next_batch(1, 1, 2.0) == 1


def test_the_heartbeat_renews_a_running_jobs_lock_and_notices_its_loss(app, clock, q):
    from antre.engine import keys as k
    go, started = threading.Event(), threading.Event()

    @app.handler("hold", lock_ttl_s=30)
    def hold(ctx, payload):
        started.set()
        assert go.wait(10)
        return "done"

    job_id = app.enqueue("hold", {}, idempotency_key="hold:1", lock_key="acct:7")
    w = make_worker(app, clock)
    runner = threading.Thread(target=w.run_burst, daemon=True)
    runner.start()
    assert started.wait(10)
    (r,) = [x for x in w._running.values() if x.job.id == job_id]
    lock_key = k.lock("acct:7")
    app.redis.pexpire(lock_key, 1000)
    r.lock_renewed = 0.0  # a third of the TTL has passed
    w.heartbeat_once()
    assert app.redis.pttl(lock_key) > 20_000  # renewed by compare-and-expire
    app.redis.delete(lock_key)  # the lock expired and someone else may take it
    r.lock_renewed = 0.0
    w.heartbeat_once()
    assert r.lock is not None and r.lock.lost
    go.set()
    runner.join(10)
    job = q.get(job_id)
    assert (job.state, job.attempt) == ("scheduled", 0)  # not committed; retried later, free


@pytest.mark.parametrize("keep_s, gone", [(60, True), (3_600, False)])
def test_the_worker_trims_done_jobs_by_the_apps_retention(app, clock, q, keep_s, gone):
    """``app.retention(queue, done_max_age_s=...)`` reaches the worker's acks (which trim the
    done jobs older than that): the worker's queues used to keep the default hour whatever the
    app said."""
    app.retention("default", done_max_age_s=keep_s)

    @app.handler("noop")
    def noop(ctx, payload):
        return None

    first = app.enqueue("noop", {}, idempotency_key="old")
    burst(app, clock)
    assert q.get(first).state == "done"
    clock.advance(120_000)  # two minutes later
    app.enqueue("noop", {}, idempotency_key="new")
    burst(app, clock)
    assert (q.get(first) is None) is gone


# -- a stalled database never stops the Redis heartbeat ------------------------------------------
def _stall(app: Antre, url: str):
    """Another connection holding the idempotency table exclusively (PostgreSQL ``LOCK TABLE
    ... ACCESS EXCLUSIVE``; SQLite ``BEGIN EXCLUSIVE``): every statement on it waits."""
    from sqlalchemy import create_engine, text

    if url.startswith("sqlite"):
        conn = create_engine(url, connect_args={"timeout": 30}).connect()
        conn.exec_driver_sql("BEGIN EXCLUSIVE")
    else:
        conn = app.engine.connect()
        conn.execute(text("LOCK TABLE antre_idempotency IN ACCESS EXCLUSIVE MODE"))
    return conn


@pytest.mark.parametrize("db_url", ["sqlite", "pg"], indirect=True)
def test_a_stalled_database_does_not_stop_the_redis_lease_extensions(redis_url, clock, db_url):
    """A 15 s database stall does not let the Redis leases expire: the SQL owner lease is
    extended on a thread of its own, so the Redis lease is extended on time while SQL waits,
    and the owner lease follows once the database is back."""
    app = Antre(redis_url=redis_url, database_url=db_url, clock=clock)
    go, started = threading.Event(), threading.Event()

    @app.handler("hold", visibility_timeout_s=30)
    def hold(ctx, payload):
        started.set()
        assert go.wait(30)
        return "done"

    q = app.queue()
    job_id = app.enqueue("hold", {}, idempotency_key="hold:stall", lock_key="acct:stall")
    w = make_worker(app, clock)
    runner = threading.Thread(target=w.run_burst, daemon=True)
    runner.start()
    assert started.wait(10)
    before = q.get(job_id).deadline
    (r,) = w._running.values()
    app.redis.pexpire(k.lock("acct:stall"), 1000)
    r.lock_renewed = 0.0  # the lock's renewal is due too
    stall = _stall(app, db_url)
    try:
        clock.advance(20_000)  # 10 s of the 30 s lease left: the extension is due
        beat = threading.Thread(target=w.heartbeat_once, daemon=True)
        beat.start()
        beat.join(3)
        assert not beat.is_alive(), "the heartbeat waited for the stalled database"
        assert q.get(job_id).deadline == clock() + 30_000 > before  # Redis: extended now
        assert app.redis.pttl(k.lock("acct:stall")) > 20_000  # and the lock renewed
    finally:
        stall.rollback()
        stall.close()
    assert w.leases.sql.idle(10)  # the database is back: the owner lease follows
    assert app.idempotency.lookup("hold:stall").lease_deadline_ms == clock() + 30_000
    go.set()
    runner.join(10)
    assert q.get(job_id).state == "done"
