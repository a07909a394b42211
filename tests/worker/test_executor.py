"""antre_worker.runner in-process: every job outcome, on a real Redis, with an injected clock."""

from __future__ import annotations

import threading
import time

from helpers import burst, make_worker, wait_for

from antre import Permanent, RateLimited, Retryable
from antre.engine import keys
from antre.engine.queue import Queue
from antre.observe.registry import WorkerRegistry
from antre_worker.runner import EXIT_RECYCLE


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
    # every job once, in enqueue order except the second "c": it waits behind the first
    # (not reserved, so not in the first batch) and runs when the first is acked
    order = [n for n, _ in seen]
    assert sorted(order) == list(range(len(locks))) and order.index(3) < order.index(4)
    assert [n for n in order if n != 4] == [n for n in range(len(locks)) if n != 4]
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


def test_hard_timeout_interrupts_the_handler_and_the_process_carries_on(app, clock, q):
    started, seen, release = threading.Event(), [], threading.Event()

    @app.handler("spin", timeout_s=2)
    def spin(ctx, payload):
        started.set()
        try:
            while not release.is_set():  # ignores ctx.cancelled, runs Python code
                time.sleep(0.005)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise
        return "too late"

    @app.handler("echo")
    def echo(ctx, payload):
        return payload

    job_id = app.enqueue("spin", {}, idempotency_key="sp:1")
    w = make_worker(app, clock)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert started.wait(5)
        clock.advance(2_000)
        w.heartbeat_once()  # soft timeout: ctx.cancelled
        assert q.get(job_id).state == "inflight" and not seen
        clock.advance(2_000)
        w.heartbeat_once()  # hard timeout (2 s + grace min(5, 2) s): raised into its thread
        assert wait_for(lambda: w.counts["retried"] == 1)  # (counted once it is settled)
        job = q.get(job_id)
        assert job.state == "scheduled" and job.attempt == 1 and job.error_kind == "timeout"
        assert seen == ["HardTimeout"]
        assert "hard timeout after 4 s (its timeout is 2 s)" in job.last_error
        assert not w.stopping and w.exit_code == 0
        other = app.enqueue("echo", {"n": 1}, idempotency_key="e:1")  # still serving
        assert wait_for(lambda: q.get(other).state == "done")
    finally:
        release.set()
        w.stop()
        t.join(10)
    assert w.exit_code == 0 and "dropped" not in w.counts


def test_an_interrupt_racing_the_handlers_return_never_escapes_into_the_worker(app, q):
    """Interrupts raised at every moment of a handler's short run (as the heartbeat does,
    under the guard): each run comes out as its result or as a JobTimeout, never as an
    exception raised into the worker's code after the handler returned."""
    from collections import Counter

    from antre import JobTimeout
    from antre_worker.held import Running
    from antre_worker.interrupt import raise_in
    from antre_worker import execution

    @app.handler("quick")
    def quick(ctx, payload):
        for _ in range(2000):
            pass
        return "done"

    app.enqueue("quick", {}, idempotency_key="qk:1")
    job, me = q.reserve("w", count=1)[0], threading.get_ident()
    box: dict[str, Running | None] = {"r": None}
    stop = threading.Event()

    def heartbeat():
        while not stop.is_set():
            r = box["r"]
            if r is not None:
                with r.handler_guard:
                    if r.in_handler and not r.interrupted_ms and raise_in(me):
                        r.interrupted_ms = 1
            time.sleep(0)

    import sys
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the threads take turns at every moment
    t = threading.Thread(target=heartbeat)
    t.start()
    seen: Counter[str] = Counter()
    try:
        for _ in range(500):
            r = Running(job, q)
            r.spec = app.handlers["quick"]
            box["r"] = r
            try:
                seen[execution._call(r, None)] += 1
            except JobTimeout:
                seen["timeout"] += 1
            box["r"] = None
            assert not r.in_handler
            for _ in range(200):  # bytecodes of the worker's own: nothing may be raised here
                pass
    finally:
        stop.set()
        t.join(5)
        sys.setswitchinterval(switch)
    assert seen["timeout"] > 0 and seen["done"] > 0 and sum(seen.values()) == 500


def test_a_handler_stuck_where_it_cannot_be_interrupted_retires_the_process(app, clock, q):
    started, release = threading.Event(), threading.Event()

    @app.handler("hang", timeout_s=2)
    def hang(ctx, payload):
        started.set()
        release.wait(10)  # a lock's wait in C: the interrupt waits for it to return
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
        clock.advance(2_000)
        w.heartbeat_once()  # hard timeout: interrupted, but the thread is in C
        assert q.get(job_id).state == "inflight"
        clock.advance(2_000)
        w.heartbeat_once()  # the interrupt's grace is over: abandoned, the process retires
        t.join(5)
        assert not t.is_alive() and out["code"] == EXIT_RECYCLE
        job = q.get(job_id)
        assert job.state == "scheduled" and job.attempt == 1 and job.error_kind == "timeout"
        assert "did not return to Python" in job.last_error and "JobTimeout" in job.last_error
        assert w.retired_for == ("hard_timeout", "hang")
        assert WorkerRegistry(app.redis, clock).restart_counts() == {("hard_timeout", "hang"): 1}
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


def test_the_jobs_a_stuck_handlers_batch_ran_before_it_are_acked_when_it_is_abandoned(
        app, clock, q):
    started, release = threading.Event(), threading.Event()

    @app.handler("quick")
    def quick(ctx, payload):
        return "fine"

    @app.handler("hang", timeout_s=2)
    def hang(ctx, payload):
        started.set()
        release.wait(10)  # in C: only the process's retirement ends it
        return "too late"

    fine = app.enqueue("quick", {}, idempotency_key="qk:2")
    stuck = app.enqueue("hang", {}, idempotency_key="h:2")
    w = make_worker(app, clock)
    batch = w._hold(q, q.reserve(w.worker_id, count=2))  # one runner's prefetched batch
    assert [r.job.id for r in batch] == [fine, stuck]
    t = threading.Thread(target=w._work, args=(batch, 2))
    t.start()
    try:
        assert started.wait(5)
        assert q.get(fine).state == "inflight"  # its ack waits for the batch's end
        for _ in range(3):  # soft timeout, hard timeout (interrupt), the interrupt's grace
            clock.advance(2_000)
            w.heartbeat_once()
        assert wait_for(lambda: q.get(fine).state == "done")  # sent for the stuck thread
        assert t.is_alive() and q.get(stuck).state == "scheduled"
    finally:
        release.set()
        t.join(10)
    assert q.stats()["acked"] == 1 and q.get(fine).deliveries == 1
