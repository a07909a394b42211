"""``app.result(key).wait(timeout)`` and ``await app.aresult(key, timeout=...)``:
woken by the job's end (ack, deduplicated ack, bury, a cancel's end, a purge), every waiter of
a job, a key completed before the wait, a key whose job is not in Redis yet, a key completed
in SQL whose Redis job is gone, a Redis restart; and the commands a wait costs, counted on the
server. Real Redis, real SQLite; the jobs are ended by the test through the queue's own calls.
A waiter that was not woken would return ``timed_out`` only at its (long) timeout."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from helpers import run_async, wait_for

from antre import Antre, ResultUnavailable
from antre.control.cancel import Cancels
from antre.control.purge import Purger
from antre.engine import keys

LONG = 30.0  # a wait that must be ended by the job, never by its timeout


class Waiter(threading.Thread):
    """``app.result(key).wait(timeout)`` on a thread of its own; ``.answer`` once joined."""

    def __init__(self, app: Antre, key: str, timeout: float = LONG) -> None:
        super().__init__(daemon=True)
        self.app, self.key, self.timeout = app, key, timeout
        self.answer: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.answer = self.app.result(self.key).wait(self.timeout)
        except BaseException as exc:  # re-raised by result()
            self.error = exc

    def result(self) -> Any:
        self.join(LONG + 10)
        assert not self.is_alive(), "the waiter did not return"
        if self.error is not None:
            raise self.error
        return self.answer


def blocked(r: redis.Redis, n: int) -> None:
    """Until ``n`` clients are blocked in a BLPOP on the server (only INFO is sent)."""
    wait_for(lambda: int(r.info("clients")["blocked_clients"]) == n, what=f"{n} blocked waiters")


def reserved(app: Antre, key: str, payload: Any = None) -> Any:
    app.enqueue("work", payload or {}, idempotency_key=key)
    (job,) = app.queue().reserve("w1")
    return job


def test_an_ack_wakes_the_waiter_with_the_result(app, r):
    job = reserved(app, "order:1")
    w = Waiter(app, "order:1")
    blocked(r, 1)
    app.queue().ack(job, {"charged": 12})
    answer = w.result()
    assert (answer.status, answer.result, answer.timed_out) == ("completed", {"charged": 12},
                                                                False)
    assert answer.final and answer.job_id == job.id


def test_every_waiter_of_a_job_wakes(app, r):
    job = reserved(app, "order:2")
    waiters = [Waiter(app, "order:2") for _ in range(3)]
    blocked(r, 3)
    assert r.hget(keys.QueueKeys("default").job(job.id), "waiters") == "3"
    app.queue().ack_many([(job, "ok")])
    assert [w.result().status for w in waiters] == ["completed"] * 3
    assert r.hget(keys.QueueKeys("default").job(job.id), "waiters") is None  # cleared


def test_a_job_nobody_waits_for_gets_no_wake_list(app, r):
    job = reserved(app, "order:3")
    app.queue().ack(job, 1)
    assert not r.exists(keys.QueueKeys("default").result_wake(job.id))
    assert r.hget(keys.QueueKeys("default").job(job.id), "waiters") is None


def test_a_key_completed_before_the_wait_answers_at_once(app):
    job = reserved(app, "order:4")
    app.queue().ack(job, "done early")
    answer = app.result("order:4").wait(LONG)
    assert (answer.status, answer.result, answer.timed_out) == ("completed", "done early", False)


def test_a_deduplicated_ack_wakes_the_waiter(app, r):
    job = reserved(app, "order:5")
    w = Waiter(app, "order:5")
    blocked(r, 1)
    app.queue().ack(job, "stored before", counter="deduplicated")
    assert w.result().status == "completed"


def test_a_bury_wakes_the_waiter_as_failed(app, r):
    job = reserved(app, "order:6")
    w = Waiter(app, "order:6")
    blocked(r, 1)
    app.queue().bury(job, reason="card declined", error="card declined")
    answer = w.result()
    assert (answer.status, answer.error) == ("failed", "card declined")


def test_the_end_of_a_cancelled_job_wakes_the_waiter_as_cancelled(app, r, clock):
    job = reserved(app, "order:7")
    Cancels(app.redis, clock, app.scripts).request("default", job.id, "alice", "dlq", "wrong")
    w = Waiter(app, "order:7")
    blocked(r, 1)
    app.queue().finish_cancelled(job, to="dlq", reason="cancelled by alice: wrong")
    answer = w.result()
    assert (answer.status, answer.error) == ("cancelled", "cancelled by alice: wrong")


def test_a_cancel_that_discards_the_job_wakes_the_waiter_as_cancelled(app, r, clock):
    job = reserved(app, "order:17")
    Cancels(app.redis, clock, app.scripts).request("default", job.id, "bob", "discard", "dup")
    w = Waiter(app, "order:17")
    blocked(r, 1)
    app.queue().finish_cancelled(job, to="discard", reason="cancelled by bob: dup")
    answer = w.result()
    assert (answer.status, answer.job_id, answer.timed_out) == ("cancelled", job.id, False)


def test_a_purge_of_a_waited_job_wakes_the_waiter(app, r, clock):
    app.enqueue("work", {}, idempotency_key="order:8")
    w = Waiter(app, "order:8", timeout=LONG)
    blocked(r, 1)
    job_id = app.result("order:8").job_id
    assert Purger(app.redis, clock, app.scripts).delete("default", job_id) == "ready"
    answer = w.result()  # the job is gone: nothing will finish it, said at once
    assert (answer.status, answer.timed_out, answer.job_id) == ("unknown", False, job_id)
    assert "was removed before it ended" in answer.error


def test_the_timeout_returns_the_pending_status_with_its_progress(app):
    job = reserved(app, "order:9")
    app.queue().progress(job, 0.4, "rows 4,000/10,000")
    answer = app.result("order:9").wait(0.2)  # a real (short) BLPOP timeout is what is tested
    assert (answer.status, answer.timed_out, answer.final) == ("pending", True, False)
    assert (answer.progress.fraction, answer.progress.message) == (0.4, "rows 4,000/10,000")


def test_a_key_whose_job_is_not_in_redis_yet_is_waited_for_until_it_appears(app, r):
    w = Waiter(app, "order:10")
    assert app.result("order:10").status == "unknown"
    job = reserved(app, "order:10")  # e.g. relayed from the outbox meanwhile
    blocked(r, 1)
    app.queue().ack(job, "late")
    assert (w.result().status, w.answer.result) == ("completed", "late")


def test_a_key_completed_in_sql_whose_job_was_trimmed_answers_completed(redis_url, clock,
                                                                        sqlite_url):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    job = reserved(app, "order:11")
    app.idempotency.begin("order:11", "fp", "work", job.id, job.epoch, "w1", job.deadline)
    app.idempotency.complete(None, "order:11", job.epoch, {"n": 1}, job_id=job.id)
    app.redis.flushall()  # the done job trimmed (or lost)
    answer = app.result("order:11").wait(LONG)
    assert (answer.status, answer.result, answer.source) == ("completed", {"n": 1}, "sql")


def test_a_wait_survives_a_redis_restart(embedded_redis_factory, clock):
    server = embedded_redis_factory(appendonly=True)
    app = Antre(redis_url=server.url, clock=clock)
    job = reserved(app, "order:12")
    w = Waiter(app, "order:12")
    probe = redis.Redis.from_url(server.url, decode_responses=True)
    blocked(probe, 1)
    server.restart()  # the waiter's BLPOP is cut: it reconnects and counts itself again
    probe = redis.Redis.from_url(server.url, decode_responses=True)
    blocked(probe, 1)
    app.queue().ack(job, "after the restart")
    assert (w.result().status, w.answer.result) == ("completed", "after the restart")


def test_redis_unreachable_until_the_timeout_raises_result_unavailable(embedded_redis_factory,
                                                                       clock):
    server = embedded_redis_factory()
    app = Antre(redis_url=server.url, clock=clock)
    reserved(app, "order:13")
    w = Waiter(app, "order:13", timeout=1.0)
    blocked(redis.Redis.from_url(server.url), 1)
    server.stop()
    with pytest.raises(ResultUnavailable, match="wait again once Redis is back"):
        w.result()


def test_aresult_with_a_timeout_is_woken_by_the_ack(app, r):
    job = reserved(app, "order:14")

    async def both() -> Any:
        import asyncio
        waiting = asyncio.ensure_future(app.aresult("order:14", timeout=LONG))
        await asyncio.to_thread(blocked, r, 1)
        await asyncio.to_thread(app.queue().ack, job, {"async": True})
        return await waiting
    answer = run_async(both())
    assert (answer.status, answer.result, answer.timed_out) == ("completed", {"async": True},
                                                                False)


def test_aresult_waits_from_one_event_loop_after_another(app, r):
    """``asyncio.run`` twice in one program: each loop gets its own client for the pop."""
    import asyncio

    async def wait_for_end(key: str) -> Any:
        job = reserved(app, key)
        waiting = asyncio.ensure_future(app.aresult(key, timeout=LONG))
        await asyncio.to_thread(blocked, r, 1)
        await asyncio.to_thread(app.queue().ack, job, key)
        return await waiting
    assert run_async(wait_for_end("loop:1")).result == "loop:1"
    assert run_async(wait_for_end("loop:2")).result == "loop:2"


def test_aresult_without_a_timeout_is_the_snapshot(app):
    reserved(app, "order:15")
    answer = run_async(app.aresult("order:15"))
    assert (answer.status, answer.timed_out) == ("pending", False)


@pytest.mark.parametrize("timeout", [-1, "5", float("nan"), True])
def test_a_bad_timeout_says_what_to_pass(app, timeout):
    reserved(app, "order:16")
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        app.result("order:16").wait(timeout)


# -- what a wait costs ---------------------------------------------------------------------
def commands(r: redis.Redis) -> dict[str, int]:
    """Calls per command on the server so far (INFO commandstats), INFO itself left out."""
    stats = r.info("commandstats")
    return {name[len("cmdstat_"):]: int(v["calls"]) for name, v in stats.items()
            if not name.startswith("cmdstat_info")}


def cost_of_a_wait(app: Antre, r: redis.Redis, key: str, busy_s: float) -> dict[str, int]:
    """The commands the server ran while a producer waited for a job that took ``busy_s``
    (real seconds: the wait's own BLPOP is what is measured) before the test acked it."""
    job = reserved(app, key)
    app.result(key)  # (scripts loaded, connections made: not part of a wait)
    before = commands(r)
    w = Waiter(app, key)
    blocked(r, 1)  # (INFO only)
    threading.Event().wait(busy_s)  # the job "takes a while"
    app.queue().ack(job, {"key": key})
    assert w.result().status == "completed"
    after = commands(r)
    return {name: n - before.get(name, 0) for name, n in after.items()
            if n != before.get(name, 0)}


def test_a_wait_costs_a_bounded_number_of_commands_whatever_its_length(app, r):
    cost_of_a_wait(app, r, "cost:warm", 0.05)  # scripts loaded, the pool's connections made
    short = cost_of_a_wait(app, r, "cost:short", 0.05)
    long = cost_of_a_wait(app, r, "cost:long", 1.5)
    assert short == long  # no command is repeated while the job runs: no polling
    assert long["blpop"] == 1 and long["fcall"] == 2  # the wait's count, the test's ack
    # every command counts, those the scripts call too (the ack's own HSET, ZADD, ...): the
    # wait is two reads of the key's status, its count (result_wait.lua) and one BLPOP
    assert sum(long.values()) <= 60, long


@pytest.mark.parametrize("error", [
    redis.exceptions.ClusterDownError("The cluster is down"),
    redis.exceptions.SlotNotCoveredError('Slot "42" is not covered by the cluster.'),
    redis.exceptions.TryAgainError("Multiple keys request during rehashing")])
def test_a_cluster_failover_error_is_waited_through_as_an_outage(app, error):
    """A Redis Cluster failover surfaces as CLUSTERDOWN / an uncovered slot / TRYAGAIN once
    redis-py's own retries are spent (bench/cluster_chaos): the wait reads again after a pause,
    as for a refused connection, instead of raising the failover's error to the caller."""
    from antre.observe.waiting import ResultWaiter

    app.queue().ack(reserved(app, "order:fo"), {"ok": 1})
    failing = [error, error]

    def finder():
        if failing:
            raise failing.pop()
        return app.finder

    slept: list[float] = []
    waiter = ResultWaiter(finder, app.queue, sleep=slept.append)
    status = waiter.wait("order:fo", timeout=30.0)
    assert not failing and len(slept) == 2  # both failover errors were waited through
    assert status.status == "completed" and status.result == {"ok": 1}
