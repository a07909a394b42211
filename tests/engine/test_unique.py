"""Dedup at enqueue (``unique=True``): decided in enqueue.lua with a per-key index that the
ack / bury scripts clean when the job ends; ``unique_for_s`` holds a completed job's key."""

from __future__ import annotations

import threading

import pytest

from antre import Antre, InvalidJob
from antre.observe.metrics import render
from antre.engine.queue import JobSpec


def test_a_pending_unique_job_is_returned_instead_of_a_second(q):
    first = q.enqueue("t", {"v": 1}, idempotency_key="order:7", unique=True)
    again = q.enqueue("t", {"v": 2}, idempotency_key="order:7", unique=True)
    assert again == first
    assert q.redis.llen(q.keys.ready) == 1
    assert q.stats()["enqueue_deduplicated"] == 1
    assert q.get(first).payload == {"v": 1}


def test_without_unique_the_same_key_adds_a_second_job(q):
    a = q.enqueue("t", {}, idempotency_key="order:7")
    b = q.enqueue("t", {}, idempotency_key="order:7")
    assert a != b and q.redis.llen(q.keys.ready) == 2


@pytest.mark.parametrize("delay_s", [0, 60])
def test_scheduled_and_in_flight_jobs_hold_the_key(q, delay_s):
    first = q.enqueue("t", {}, idempotency_key="k", unique=True, delay_s=delay_s)
    assert q.enqueue("t", {}, idempotency_key="k", unique=True) == first
    if delay_s == 0:
        [job] = q.reserve("w1")
        assert job.id == first
        assert q.enqueue("t", {}, idempotency_key="k", unique=True) == first


def test_ten_threads_racing_get_one_id(q):
    ids: list[str] = []
    barrier = threading.Barrier(10)

    def push() -> None:
        barrier.wait()
        ids.append(q.enqueue("t", {}, idempotency_key="race", unique=True))

    threads = [threading.Thread(target=push) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 10 and len(set(ids)) == 1
    assert q.redis.llen(q.keys.ready) == 1
    assert q.stats()["enqueue_deduplicated"] == 9


def test_the_key_is_free_again_once_the_job_is_done(q):
    first = q.enqueue("t", {}, idempotency_key="k", unique=True)
    [job] = q.reserve("w1")
    q.ack(job)
    assert not q.redis.exists(q.keys.unique("k"))
    second = q.enqueue("t", {}, idempotency_key="k", unique=True)
    assert second != first


def test_a_dead_job_frees_its_key(q):
    first = q.enqueue("t", {}, idempotency_key="k", unique=True, unique_for_s=600)
    [job] = q.reserve("w1")
    q.bury(job, reason="boom")
    assert not q.redis.exists(q.keys.unique("k"))
    assert q.enqueue("t", {}, idempotency_key="k", unique=True) != first


def test_unique_for_refuses_a_recently_completed_key(q):
    first = q.enqueue("t", {}, idempotency_key="k", unique=True, unique_for_s=60)
    [job] = q.reserve("w1")
    q.ack(job)
    assert q.enqueue("t", {}, idempotency_key="k", unique=True) == first
    assert q.redis.llen(q.keys.ready) == 0
    assert q.stats()["enqueue_refused_recent"] == 1
    assert 0 < q.redis.pttl(q.keys.unique("k")) <= 60_000


def test_a_stale_index_entry_does_not_block_the_key(q):
    q.redis.set(q.keys.unique("k"), "gone-job")  # e.g. a job record removed by hand
    job_id = q.enqueue("t", {}, idempotency_key="k", unique=True)
    assert job_id != "gone-job"
    assert q.redis.get(q.keys.unique("k")) == job_id


def test_enqueue_many_mixes_unique_and_plain_jobs(q):
    held = q.enqueue("t", {}, idempotency_key="u1", unique=True)
    ids = q.enqueue_many([JobSpec("t", {}, "u1", unique=True), JobSpec("t", {}, "p1"),
                          JobSpec("t", {}, "u2", unique=True), JobSpec("t", {}, "u2", unique=True)])
    assert ids[0] == held
    assert ids[2] == ids[3] != held
    assert q.redis.llen(q.keys.ready) == 3  # u1, p1, u2


def test_handler_default_makes_enqueue_unique(redis_url):
    app = Antre(redis_url=redis_url)

    @app.handler("sync_stock", unique=True)
    def sync_stock(ctx, payload):
        return None

    a = app.enqueue("sync_stock", {}, idempotency_key="stock:1")
    assert app.enqueue("sync_stock", {}, idempotency_key="stock:1") == a
    assert app.enqueue("sync_stock", {}, idempotency_key="stock:1", unique=False) != a
    app.redis.close()


def test_metrics_count_deduplicated_enqueues(q):
    q.enqueue("t", {}, idempotency_key="k", unique=True)
    q.enqueue("t", {}, idempotency_key="k", unique=True)
    body = render(q.redis)[0].decode()
    assert 'antre_enqueue_deduplicated_total{queue="jobs"} 1.0' in body


@pytest.mark.parametrize("window", [-1, float("nan"), "5", True])
def test_a_bad_window_is_refused_with_the_reason(q, window):
    with pytest.raises(InvalidJob, match="unique_for_s must be"):
        q.enqueue("t", {}, idempotency_key="k", unique=True, unique_for_s=window)


def test_a_replayed_unique_job_holds_its_key_again(q):
    first = q.enqueue("t", {}, idempotency_key="k", unique=True)
    [job] = q.reserve("w1")
    q.bury(job, reason="boom")
    assert q.replay(first)
    assert q.enqueue("t", {}, idempotency_key="k", unique=True) == first
    assert q.redis.llen(q.keys.ready) == 1
