"""Flow control against a real Redis with an injected clock: semaphores, rate limits, breakers."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from antre.engine import keys
from antre.errors import InvalidJob, RateLimited
from antre.limits.admission import CircuitBreaker, Limits, LimitPolicy, RateLimiter, Semaphore


# -- semaphore ------------------------------------------------------------------------------

def test_two_holders_never_exceed_a_limit_of_one(r, clock):
    a = Semaphore(r, "type:send_email", 1, clock)
    b = Semaphore(r, "type:send_email", 1, clock)  # another worker's instance
    deadline = clock() + 30_000
    assert a.acquire("job1:1", deadline)
    assert not b.acquire("job2:1", deadline)
    assert b.try_acquire("job2:1", deadline) == pytest.approx(30.0)
    assert a.count() == 1
    assert a.release("job1:1")
    assert b.acquire("job2:1", deadline)
    assert not a.acquire("job1:2", deadline)
    assert a.count() == 1


def test_many_threads_racing_never_exceed_the_limit(redis_url, clock):
    limit, threads, rounds = 2, 16, 25
    inside, peak, lock = [0], [0], threading.Lock()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        sem = Semaphore(client, "downstream:smtp", limit, clock)
        try:
            for i in range(rounds):
                holder = f"job{n}-{i}:1"
                if sem.acquire(holder, clock() + 60_000):
                    with lock:
                        inside[0] += 1
                        peak[0] = max(peak[0], inside[0])
                    assert sem.count() <= limit
                    with lock:
                        inside[0] -= 1
                    sem.release(holder)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            client.close()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    assert 1 <= peak[0] <= limit
    assert Semaphore(redis.Redis.from_url(redis_url), "downstream:smtp", limit, clock).count() == 0


def test_a_killed_workers_slot_frees_itself_when_its_lease_ends(r, clock):
    sem = Semaphore(r, "type:report", 1, clock)
    assert sem.acquire("dead-job:1", clock() + 30_000)  # then its worker is kill -9'd
    assert not sem.acquire("next-job:1", clock() + 30_000)
    clock.advance(29_999)
    assert not sem.acquire("next-job:1", clock() + 30_000)
    clock.advance(2)
    assert sem.count() == 0
    assert sem.acquire("next-job:1", clock() + 30_000)
    assert [h for h, _ in sem.holders()] == ["next-job:1"]


def test_renew_moves_the_expiry_and_fails_once_the_slot_expired(r, clock):
    sem = Semaphore(r, "type:long", 1, clock)
    assert sem.acquire("j:1", clock() + 10_000)
    clock.advance(9_000)
    assert sem.renew("j:1", clock() + 10_000)
    clock.advance(9_000)
    assert not sem.acquire("other:1", clock() + 10_000)  # renewed: still held
    clock.advance(2_000)
    assert not sem.renew("j:1", clock() + 10_000)  # expired: not resurrected
    assert not sem.renew("never-held:1", clock() + 10_000)
    assert sem.acquire("other:1", clock() + 10_000)


def test_reacquire_by_the_same_holder_does_not_take_a_second_slot(r, clock):
    sem = Semaphore(r, "type:x", 2, clock)
    assert sem.acquire("j:1", clock() + 1000)
    assert sem.acquire("j:1", clock() + 5000)
    assert sem.count() == 1
    assert sem.holders() == [("j:1", clock() + 5000)]


# -- rate limiter -----------------------------------------------------------------------------

def test_rate_limiter_holds_its_rate_over_a_window(r, clock):
    rl = RateLimiter(r, "downstream:email-provider", 5, 5, clock)
    allowed = 0
    for _ in range(1000):  # 10 simulated seconds, a take every 10 ms
        if rl.take() == 0:
            allowed += 1
        clock.advance(10)
    assert 50 <= allowed <= 55


def test_rate_limiter_burst_then_wait(r, clock):
    rl = RateLimiter(r, "api", 2, 3, clock)
    assert [rl.take() for _ in range(3)] == [0, 0, 0]
    assert rl.take() == pytest.approx(0.5)
    with pytest.raises(RateLimited) as info:
        rl.take_or_raise()
    assert info.value.retry_after_s == pytest.approx(0.5)
    clock.advance(499)
    assert rl.take() > 0
    clock.advance(1)
    assert rl.take() == 0
    assert rl.tokens() == pytest.approx(0)
    clock.advance(10_000)
    assert rl.tokens() == 3


def test_rate_limiter_shared_by_two_workers(r, clock):
    a = RateLimiter(r, "shared", 1, 2, clock)
    b = RateLimiter(r, "shared", 1, 2, clock)
    assert a.take() == 0 and b.take() == 0
    assert a.take() > 0 and b.take() > 0


def test_rate_limiter_rejects_more_than_its_burst(r, clock):
    with pytest.raises(ValueError):
        RateLimiter(r, "x", 1, 2, clock).take(3)


# -- circuit breaker --------------------------------------------------------------------------

def make_breaker(r, clock, **kw):
    kw = {"failure_threshold": 3, "window_s": 60, "cooldown_s": 30, **kw}
    return CircuitBreaker(r, "downstream:email-provider", clock=clock, **kw)


def test_breaker_opens_after_threshold_failures_in_the_window(r, clock):
    cb = make_breaker(r, clock)
    assert cb.allow("a") == (True, "closed", 0)
    assert cb.record_failure() == "closed"
    clock.advance(61_000)  # the first failure leaves the window
    assert cb.record_failure() == "closed"
    assert cb.record_failure() == "closed"
    assert cb.state().failures == 2
    assert cb.record_failure() == "open"
    st = cb.state()
    assert (st.state, st.opens, st.opened_at, st.code) == ("open", 1, clock(), 2)
    assert st.retry_after_s == 30


def test_open_breaker_holds_then_lets_exactly_one_probe(r, clock):
    cb = make_breaker(r, clock)
    for _ in range(3):
        cb.record_failure()
    clock.advance(10_000)
    assert cb.allow("j1") == (False, "open", 20.0)
    clock.advance(20_000)
    results = [cb.allow(f"j{i}") for i in range(5)]
    assert results[0] == (True, "half_open", 0)
    assert all(not ok and state == "half_open" for ok, state, _ in results[1:])
    assert all(0 < wait <= 1.0 for _, _, wait in results[1:])
    assert cb.allow("j0") == (True, "half_open", 0)  # the probe itself asking again
    assert cb.state().probe == "j0"


def test_probe_success_closes_the_breaker(r, clock):
    cb = make_breaker(r, clock)
    for _ in range(3):
        cb.record_failure()
    clock.advance(30_000)
    assert cb.allow("probe")[0]
    assert cb.record_success() == "closed"
    assert cb.allow("anyone") == (True, "closed", 0)
    st = cb.state()
    assert (st.state, st.failures, st.probe, st.code) == ("closed", 0, "", 0)


def test_probe_failure_reopens_with_a_new_cooldown(r, clock):
    cb = make_breaker(r, clock)
    for _ in range(3):
        cb.record_failure()
    clock.advance(30_000)
    assert cb.allow("probe")[0]
    assert cb.record_failure() == "open"
    assert cb.allow("x") == (False, "open", 30.0)
    assert cb.state().opens == 2


def test_a_probe_that_never_reports_is_replaced_after_its_timeout(r, clock):
    cb = make_breaker(r, clock, probe_timeout_s=10)
    for _ in range(3):
        cb.record_failure()
    clock.advance(30_000)
    assert cb.allow("died")[0]
    clock.advance(9_000)
    assert not cb.allow("next")[0]
    clock.advance(1_000)
    assert cb.allow("next") == (True, "half_open", 0)


def test_released_probe_goes_to_the_next_caller(r, clock):
    cb = make_breaker(r, clock)
    for _ in range(3):
        cb.record_failure()
    clock.advance(30_000)
    assert cb.allow("p1")[0]
    assert not cb.release_probe("someone-else")
    assert cb.release_probe("p1")
    assert cb.allow("p2") == (True, "half_open", 0)


def test_success_while_open_does_not_close(r, clock):
    cb = make_breaker(r, clock)
    for _ in range(3):
        cb.record_failure()
    assert cb.record_success() == "open"
    cb.reset()
    assert cb.state().state == "closed"


# -- the executor's gate and the index ------------------------------------------------------------

def test_admit_holds_and_gives_back_what_it_took(r, clock):
    flow = Limits(r, clock)
    tp = LimitPolicy(concurrency=1)
    dp = LimitPolicy(concurrency=5, rate_per_s=1, burst=1, failure_threshold=2, cooldown_s=10)
    exp = clock() + 30_000
    a = flow.admit("j1:1", exp, job_type="send", type_policy=tp, downstream="smtp",
                   downstream_policy=dp)
    assert a.allowed and len(a.semaphores) == 2
    b = flow.admit("j2:1", exp, job_type="send", type_policy=tp, downstream="smtp",
                   downstream_policy=dp)
    assert (b.allowed, b.reason) == (False, "concurrency_limited")
    a.release()
    c = flow.admit("j2:1", exp, job_type="send", type_policy=tp, downstream="smtp",
                   downstream_policy=dp)
    assert (c.allowed, c.reason, c.wait_s) == (False, "rate_limited", 1.0)
    assert flow.semaphore("type:send", 1).count() == 0  # the denied admit gave its slot back
    a.failed()
    a.failed()
    d = flow.admit("j3:1", exp, job_type="send", downstream="smtp", downstream_policy=dp)
    assert (d.allowed, d.reason, d.wait_s) == (False, "breaker_open", 10.0)


def test_admit_denied_after_the_probe_gives_the_probe_back(r, clock):
    flow = Limits(r, clock)
    dp = LimitPolicy(rate_per_s=0.1, burst=1, failure_threshold=1, cooldown_s=5)
    exp = clock() + 30_000
    flow.rate_limiter("downstream:smtp", 0.1, 1).take()  # bucket empty for 10 s
    flow.breaker("downstream:smtp", 1, 60, 5).record_failure()
    clock.advance(5_000)
    adm = flow.admit("j1:1", exp, job_type="send", downstream="smtp", downstream_policy=dp)
    assert (adm.allowed, adm.reason) == (False, "rate_limited")
    assert flow.breaker("downstream:smtp", 1, 60, 5).state().probe == ""
    clock.advance(5_000)
    adm = flow.admit("j2:1", exp, job_type="send", downstream="smtp", downstream_policy=dp)
    assert adm.allowed and adm.breaker is not None
    adm.succeeded()
    adm.release()
    assert flow.breakers()[0].state == "closed"


def test_flow_control_lists_what_is_in_use(r, clock):
    flow = Limits(r, clock)
    flow.semaphore("type:a", 3).acquire("h:1", clock() + 1000)
    flow.rate_limiter("downstream:b", 2, 4).take()
    flow.breaker("downstream:b", 2, 30, 15).record_failure()
    assert [(s.name, s.limit, s.in_use) for s in flow.semaphores()] == [("type:a", 3, 1)]
    [rl] = flow.rate_limiters()
    assert (rl.name, rl.rate_per_s, rl.burst, rl.tokens) == ("downstream:b", 2, 4, 3)
    [cb] = flow.breakers()
    assert (cb.name, cb.state, cb.failures, cb.failure_threshold, cb.cooldown_s) == (
        "downstream:b", "closed", 1, 2, 15)
    assert r.exists(keys.flow_index())
    flow.forget("sem", "type:a")
    assert flow.semaphores() == []


def test_bad_names_are_refused(r, clock):
    with pytest.raises(ValueError):
        Semaphore(r, "has {braces}", 1, clock).acquire("h", 1)


def test_flow_scripts_run_on_redis_cluster(redis_cluster, clock):
    rc = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in redis_cluster],
                      decode_responses=True)
    try:
        rc.flushall(target_nodes=RedisCluster.PRIMARIES)
        flow = Limits(rc, clock)
        sem = flow.semaphore("type:c", 1)
        assert sem.acquire("a", clock() + 100) and not sem.acquire("b", clock() + 100)
        assert sem.release("a") and sem.count() == 0
        assert flow.rate_limiter("downstream:c", 1, 1).take() == 0
        cb = flow.breaker("downstream:c", 1, 60, 5)
        assert cb.record_failure() == "open"
        clock.advance(5_000)
        assert cb.allow("p")[0] and cb.record_success() == "closed"
        assert [b.state for b in flow.breakers()] == ["closed"]
    finally:
        rc.close()


@pytest.mark.parametrize("kwargs, message", [
    ({"concurrency": -1}, "bad concurrency -1: an int from 1"),
    ({"concurrency": 0}, "bad concurrency 0"),
    ({"concurrency": "2"}, "bad concurrency '2'"),
    ({"rate_per_s": -2}, "bad rate_per_s -2: a number above 0"),
    ({"rate_per_s": float("nan")}, "bad rate_per_s"),
    ({"rate_per_s": 5, "burst": 0}, "bad burst 0"),
    ({"failure_threshold": -1}, "bad failure_threshold"),
    ({"window_s": 0}, "bad window_s"),
])
def test_a_negative_or_malformed_limit_is_refused_saying_what_to_pass(kwargs, message):
    with pytest.raises(InvalidJob, match=message):
        LimitPolicy(**kwargs)


@pytest.mark.parametrize("options, message", [
    ({"group": "bad name"}, "bad group 'bad name'"),
    ({"group": "t", "group_concurrency": -1}, "bad group_concurrency -1"),
    ({"group": lambda p: p["t"], "group_rate": "fast"}, "bad group_rate 'fast'"),
    ({"flow": None, "group_concurrency": 0}, "bad group_concurrency 0"),
])
def test_a_handlers_bad_group_defaults_are_refused_when_declared(app, options, message):
    with pytest.raises(InvalidJob, match=message):
        app.handler("h", **options)
    assert "h" not in app.handlers
