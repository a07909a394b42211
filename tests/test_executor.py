"""antre_worker.executor in-process: every job outcome, on a real Redis, with an injected clock."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import app, clock, make_worker, q, wait_for  # noqa: F401 - fixtures

from antre import Antre, Permanent, RateLimited, Retryable, keys
from antre.queue import Queue
from antre.registry import WorkerRegistry
from antre_worker.executor import EXIT_RECYCLE


def burst(app, clock, **kw):
    w = make_worker(app, clock, **kw)
    return w, w.run_burst()


def test_success_acks_with_result(app, clock, q):
    @app.handler("add")
    def add(ctx, payload):
        assert ctx.fence == ctx.job.epoch == 1 and ctx.attempt == 1
        return payload["a"] + payload["b"]

    job_id = app.enqueue("add", {"a": 2, "b": 3}, idempotency_key="add:1")
    _, counts = burst(app, clock)
    job = q.get(job_id)
    assert (job.state, job.result) == ("done", 5)
    assert q.where(job_id) == ["done"]
    assert counts["processed"] == 1 and counts["succeeded"] == 1
    assert q.stats()["acked"] == 1


def test_retryable_is_scheduled_with_backoff_and_spends_an_attempt(app, clock, q):
    @app.handler("flaky")
    def flaky(ctx, payload):
        raise Retryable("downstream 503")

    job_id = app.enqueue("flaky", {}, idempotency_key="flaky:1")
    _, counts = burst(app, clock)
    job = q.get(job_id)
    low, high = app.handlers["flaky"].retry.bounds_ms(1)
    assert job.state == "scheduled" and job.attempt == 1
    assert clock() + low <= job.visible_at <= clock() + high
    assert job.error_kind == "retryable" and "downstream 503" in job.last_error
    assert "Retryable" in job.traceback
    assert counts["retried"] == 1 and counts["failed"] == 1


def test_permanent_goes_straight_to_the_dlq(app, clock, q):
    @app.handler("bad")
    def bad(ctx, payload):
        raise Permanent("card declined")

    job_id = app.enqueue("bad", {}, idempotency_key="bad:1", max_attempts=5)
    burst(app, clock)
    job = q.get(job_id)
    assert job.state == "dead" and job.attempt == 1
    assert "permanent error" in job.reason and "card declined" in job.reason


def test_rate_limited_is_snoozed_without_spending_an_attempt(app, clock, q):
    @app.handler("limited")
    def limited(ctx, payload):
        raise RateLimited(7)

    job_id = app.enqueue("limited", {}, idempotency_key="rl:1")
    _, counts = burst(app, clock)
    job = q.get(job_id)
    assert job.state == "scheduled" and job.attempt == 0 and job.deliveries == 0
    assert job.visible_at == clock() + 7000
    assert counts["snoozed"] == 1


def test_exhausted_attempts_end_in_the_dlq(app, clock, q):
    calls = []

    @app.handler("flaky", max_attempts=2)
    def flaky(ctx, payload):
        calls.append(ctx.attempt)
        raise ValueError("boom")

    job_id = app.enqueue("flaky", {}, idempotency_key="flaky:2")
    burst(app, clock)
    assert q.get(job_id).state == "scheduled"
    clock.advance(60_000)
    burst(app, clock)
    job = q.get(job_id)
    assert calls == [1, 2]
    assert job.state == "dead" and job.attempt == 2
    assert job.reason.startswith("attempts exhausted (2/2)") and "ValueError: boom" in job.reason


def test_unknown_type_is_buried_with_the_reason(app, clock, q):
    @app.handler("known")
    def known(ctx, payload):
        return 1

    job_id = q.enqueue("mystery", {}, idempotency_key="m:1")
    burst(app, clock)
    job = q.get(job_id)
    assert job.state == "dead" and job.attempt == 0
    assert job.reason == ("no handler for job type 'mystery' in this worker (registered: "
                          "known); deploy a worker that has it, then replay")
    assert job.error_kind == "unknown_type"


def test_malformed_payload_is_buried_and_the_next_job_runs(app, clock, q, r):
    @app.handler("echo")
    def echo(ctx, payload):
        return payload

    bad = app.enqueue("echo", {"x": 1}, idempotency_key="e:1")
    good = app.enqueue("echo", {"x": 2}, idempotency_key="e:2")
    r.hset(keys.QueueKeys("default").job(bad), "payload", "{not json")
    burst(app, clock)
    job = q.get(bad)
    assert job.state == "dead" and job.error_kind == "malformed"
    assert job.reason.startswith("payload cannot be decoded: cannot decode JSON")
    assert q.get(good).state == "done" and q.get(good).result == {"x": 2}


def test_lock_busy_snoozes_without_spending_an_attempt(app, clock, q, r):
    ran = []

    @app.handler("stock")
    def stock(ctx, payload):
        ran.append(1)

    held = app.locks.acquire("sku:42", ttl_ms=60_000, owner="someone-else")
    job_id = app.enqueue("stock", {}, idempotency_key="s:1", lock_key="sku:42")
    _, counts = burst(app, clock)
    job = q.get(job_id)
    assert ran == []
    assert job.state == "scheduled" and job.attempt == 0 and job.deliveries == 0
    assert clock() + 200 <= job.visible_at <= clock() + 1000
    assert counts["lock_busy"] == 1 and q.stats()["lock_busy"] == 1
    assert app.locks.top_conflicts() == [("sku:42", 1)]
    app.locks.release(held)
    clock.advance(1000)
    burst(app, clock)
    assert ran == [1] and q.get(job_id).state == "done"


def test_lock_fence_is_ctx_fence_and_lock_is_released(app, clock, q):
    seen = []

    @app.handler("stock")
    def stock(ctx, payload):
        seen.append((ctx.fence, ctx.lock.key))

    app.locks.release(app.locks.acquire("sku:7", 1000))  # fence 1
    app.enqueue("stock", {}, idempotency_key="s:2", lock_key="sku:7")
    burst(app, clock)
    assert seen == [(2, "sku:7")]
    assert app.locks.held() == []


def test_in_a_batch_a_lock_is_released_before_the_next_handler_runs(app, clock, q, r):
    seen = []

    @app.handler("t")
    def t(ctx, payload):
        held = sorted(k for k in r.keys("antre:lock:*") if not k.endswith(":fence"))
        seen.append((payload["n"], held))

    locks = ["a", "b", None, "c", "c", None, "d", "e", "f", None, "g"]
    for n, key in enumerate(locks):
        app.enqueue("t", {"n": n}, idempotency_key=f"k{n}", lock_key=key)
    burst(app, clock, prefetch=8)
    assert [n for n, _ in seen] == list(range(len(locks)))
    for n, held in seen:  # only the running job's own lock, never the previous job's
        assert held == ([f"antre:lock:{{{locks[n]}}}"] if locks[n] else []), (n, held)
    assert r.keys("antre:lock:*") == [] or all(k.endswith(":fence") for k in r.keys("antre:lock:*"))
    assert app.locks.held() == []
    assert int(r.get("antre:lock:{c}:fence")) == 2  # taken twice, released in between


def test_late_ack_after_lost_lease_is_refused(app, clock, q):
    other = Queue(app.redis, "default", clock=clock)

    @app.handler("slowpoke", visibility_timeout_s=10)
    def slowpoke(ctx, payload):
        clock.advance(10_001)  # the lease expires while we run ...
        assert other.sweep().requeued == 1  # ... the sweeper returns the job ...
        assert other.reserve("w2")[0].epoch == 2  # ... and another worker takes it
        return "late"

    job_id = app.enqueue("slowpoke", {}, idempotency_key="sp:1")
    w = make_worker(app, clock)
    t = threading.Thread(target=w.run)
    t.start()
    assert wait_for(lambda: w.counts["lease_lost"] == 1)
    w.stop()
    t.join(5)
    job = q.get(job_id)
    assert "succeeded" not in w.counts
    assert (job.state, job.epoch, job.worker_id, job.result) == ("inflight", 2, "w2", None)
    assert "acked" not in q.stats()


def test_heartbeat_extends_leases_and_registers_the_worker(app, clock, q):
    started, release = threading.Event(), threading.Event()

    @app.handler("long", visibility_timeout_s=10, max_runtime_s=25)
    def long(ctx, payload):
        started.set()
        release.wait(5)

    job_id = app.enqueue("long", {}, idempotency_key="l:1")
    w = make_worker(app, clock)
    t = threading.Thread(target=w.run_burst)
    t.start()
    try:
        assert started.wait(5)
        reserved_at = q.get(job_id).reserved_at
        clock.advance(8_000)
        w.heartbeat_once()
        assert q.get(job_id).deadline == clock() + 10_000
        clock.advance(9_000)
        w.heartbeat_once()
        assert q.get(job_id).deadline == reserved_at + 25_000  # capped by max_runtime_s
        info = WorkerRegistry(app.redis, clock).get("w1")
        assert info.current == [job_id] and info.kind == "process" and info.threads == 1
    finally:
        release.set()
        t.join(5)
    assert q.get(job_id).state == "done"
    info = WorkerRegistry(app.redis, clock).get("w1")
    assert info.state == "stopped" and info.processed == 1 and info.current == []


def test_hard_timeout_retries_as_timeout_and_recycles(app, clock, q):
    started, release = threading.Event(), threading.Event()

    @app.handler("hang", timeout_s=2)
    def hang(ctx, payload):
        started.set()
        release.wait(10)
        return "too late"

    job_id = app.enqueue("hang", {}, idempotency_key="h:1")
    w = make_worker(app, clock)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("code", w.run()))
    t.start()
    try:
        assert started.wait(5)
        clock.advance(2_000)
        w.heartbeat_once()  # soft timeout: ctx.cancelled
        assert q.get(job_id).state == "inflight"
        clock.advance(2_000)
        w.heartbeat_once()  # hard timeout (timeout 2 s + grace min(5, 2) s)
        t.join(5)
        assert not t.is_alive() and out["code"] == EXIT_RECYCLE
        job = q.get(job_id)
        assert job.state == "scheduled" and job.attempt == 1 and job.error_kind == "timeout"
        assert "JobTimeout" in job.last_error
    finally:
        release.set()
    assert wait_for(lambda: w.counts["dropped"] == 1)  # the abandoned handler returned
    assert q.get(job_id).state == "scheduled" and "acked" not in q.stats()


def test_soft_timeout_cancels_a_cooperative_handler(app, clock, q):
    started = threading.Event()

    @app.handler("coop", timeout_s=5)
    def coop(ctx, payload):
        started.set()
        while True:
            ctx.checkpoint()
            time.sleep(0.01)

    job_id = app.enqueue("coop", {}, idempotency_key="c:1")
    w = make_worker(app, clock)
    t = threading.Thread(target=w.run_burst)
    t.start()
    assert started.wait(5)
    clock.advance(5_000)
    w.heartbeat_once()
    t.join(5)
    job = q.get(job_id)
    assert job.state == "scheduled" and job.attempt == 1 and job.error_kind == "timeout"
    assert w.exit_code == 0


def test_stop_hands_back_what_does_not_finish_in_the_grace(app, clock, q):
    started, release = threading.Event(), threading.Event()

    @app.handler("hang")
    def hang(ctx, payload):
        started.set()
        release.wait(10)

    job_id = app.enqueue("hang", {}, idempotency_key="h:2")
    w = make_worker(app, clock, stop_grace_s=0.3)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert started.wait(5)
        w.stop()
        t.join(5)
        job = q.get(job_id)
        assert (job.state, job.attempt, job.deliveries) == ("ready", 0, 0)
        assert q.stats()["handed_back"] == 1
    finally:
        release.set()
    # the handler returns after its job was handed back: its outcome is dropped (and the test
    # waits for it, so no thread of this test logs or settles during the next one)
    assert wait_for(lambda: w.counts["dropped"] == 1)
    assert q.get(job_id).state == "ready" and "acked" not in q.stats()


def test_stop_lets_a_job_finish_within_the_grace(app, clock, q):
    started = threading.Event()

    @app.handler("short")
    def short(ctx, payload):
        started.set()
        time.sleep(0.2)
        return "ok"

    job_id = app.enqueue("short", {}, idempotency_key="sh:1")
    w = make_worker(app, clock, stop_grace_s=5)
    t = threading.Thread(target=w.run)
    t.start()
    assert started.wait(5)
    w.stop()
    t.join(5)
    assert q.get(job_id).state == "done"


def test_prefetched_jobs_are_handed_back_on_stop(app, clock, q):
    started, release = threading.Event(), threading.Event()

    @app.handler("hang")
    def hang(ctx, payload):
        started.set()
        release.wait(10)

    ids = [app.enqueue("hang", {"n": n}, idempotency_key=f"h:{n}") for n in range(3)]
    w = make_worker(app, clock, prefetch=3, stop_grace_s=0.3)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert started.wait(5)
        w.stop()
        t.join(5)
        assert [q.get(i).state for i in ids] == ["ready"] * 3
        assert all(q.get(i).deliveries == 0 for i in ids)
    finally:
        release.set()
    assert wait_for(lambda: w.counts["dropped"] == 1)  # the one that ran, handed back
    assert [q.get(i).state for i in ids] == ["ready"] * 3


def test_many_threads_process_everything_once(app, clock, q, r):
    @app.handler("count")
    def count(ctx, payload):
        r.incr("test:count")

    ids = [app.enqueue("count", {"n": n}, idempotency_key=f"c:{n}") for n in range(40)]
    _, counts = burst(app, clock, threads=4, prefetch=2)
    assert counts["processed"] == 40 and r.get("test:count") == "40"
    assert all(q.where(i) == ["done"] for i in ids)


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
    from antre import FlowPolicy
    active, peak, lock = [0], [0], threading.Lock()

    @app.handler("exclusive", flow=FlowPolicy(concurrency=1))
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
    from antre import FlowPolicy
    from antre.flow import CircuitBreaker
    app.downstream("provider", FlowPolicy(failure_threshold=2, window_s=60, cooldown_s=30))
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
    from antre import FlowPolicy
    app.downstream("sms", FlowPolicy(rate_per_s=1, burst=1))

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
    from antre import keys as k
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
