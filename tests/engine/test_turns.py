"""Per-key turns: jobs of one queue sharing a lock_key wait behind the key's head in
state 'waiting', and the next becomes ready in the same script that ends the head: ack, bury,
an unordered retry, sweep to the DLQ, cancel, purge, replay. Against a real Redis, on the
injected clock."""

from __future__ import annotations

import pytest

from antre.control.purge import Purger, PurgeFilter
from antre.engine.queue import JobSpec, Queue


def enqueue(q: Queue, n: int, key: str = "order:42", **options) -> list[str]:
    return [q.enqueue("t", {"i": i}, idempotency_key=f"k{key}{i}", lock_key=key, **options)
            for i in range(n)]


def one(q: Queue, worker: str = "w1"):
    jobs = q.reserve(worker, count=10)
    assert len(jobs) == 1, [j.id for j in jobs]
    return jobs[0]


def place(q: Queue, job_id: str) -> str:
    where = q.where(job_id)
    state = q.get(job_id).state
    assert where == [state], (where, state)
    return state


def test_only_the_head_of_a_key_is_ready_the_rest_wait_in_order(q):
    ids = enqueue(q, 3)
    assert [place(q, i) for i in ids] == ["ready", "waiting", "waiting"]
    head = one(q)
    assert head.id == ids[0]
    assert q.reserve("w2", count=10) == []  # nothing else of the key is deliverable
    q.ack(head)
    assert [place(q, i) for i in ids] == ["done", "ready", "waiting"]
    nxt = one(q)
    assert nxt.id == ids[1] and nxt.deliveries == 1 and nxt.attempt == 0


def test_many_jobs_of_one_key_run_in_enqueue_order_without_snoozes(q):
    ids = [s for s in q.enqueue_many(
        [JobSpec("t", {"i": i}, f"k{i}", "hot") for i in range(50)])]
    order = []
    while True:
        jobs = q.reserve("w", count=10)
        if not jobs:
            break
        assert len(jobs) == 1
        order.append(jobs[0].id)
        q.ack_many([(jobs[0], None)])
    assert order == ids
    assert q.stats().get("retried", 0) == 0 and q.stats().get("snoozed", 0) == 0


def test_other_keys_and_unkeyed_jobs_are_not_held(q):
    a = enqueue(q, 2, key="a")
    b = enqueue(q, 2, key="b")
    free = q.enqueue("t", {}, idempotency_key="free")
    got = {j.id for j in q.reserve("w", count=10)}
    assert got == {a[0], b[0], free}


def test_a_retried_head_keeps_its_turn(q, clock):
    ids = enqueue(q, 2)
    head = one(q)
    q.retry(head, delay_ms=5000, error="boom")
    assert place(q, ids[0]) == "scheduled" and place(q, ids[1]) == "waiting"
    clock.advance(5001)
    q.promote()
    again = one(q)
    assert again.id == ids[0] and again.attempt == 1


def test_an_unordered_retry_gives_the_turn_to_the_next_and_waits_at_the_end(q, clock):
    ids = enqueue(q, 3)
    head = one(q)
    q.retry(head, delay_ms=5000, error="boom", keep_turn=False)
    assert [place(q, i) for i in ids] == ["waiting", "ready", "waiting"]
    for expected in (ids[1], ids[2]):
        j = one(q)
        assert j.id == expected
        q.ack(j)
    # its turn comes before its backoff ended: scheduled for its visible_at
    assert place(q, ids[0]) == "scheduled"
    clock.advance(5001)
    q.promote()
    assert one(q).id == ids[0]


def test_an_unordered_retry_alone_on_its_key_keeps_the_key(q):
    ids = enqueue(q, 1)
    head = one(q)
    q.retry(head, delay_ms=0, error="boom", keep_turn=False)
    assert place(q, ids[0]) == "ready"
    later = enqueue(q, 1)[0]
    assert place(q, later) == "waiting"


def test_a_snooze_keeps_the_turn(q, clock):
    ids = enqueue(q, 2)
    q.snooze(one(q), 1000, "lock_busy")
    assert [place(q, i) for i in ids] == ["scheduled", "waiting"]


def test_a_buried_head_passes_the_turn(q):
    ids = enqueue(q, 2)
    q.bury(one(q), reason="bad")
    assert [place(q, i) for i in ids] == ["dead", "ready"]


def test_a_swept_head_stays_the_head_and_a_poison_head_passes_it(q, clock):
    ids = enqueue(q, 2, max_deliveries=2)
    one(q)
    clock.advance(60_000)
    q.sweep()
    assert [place(q, i) for i in ids] == ["ready", "waiting"]
    assert one(q).id == ids[0]
    clock.advance(60_000)
    q.sweep()  # the second delivery never finished either: poison
    assert [place(q, i) for i in ids] == ["dead", "ready"]


def test_a_cancelled_head_passes_the_turn_both_ways(q):
    ids = enqueue(q, 3)
    q.finish_cancelled(one(q), to="dlq", reason="cancelled by ops: test")
    assert [place(q, i) for i in ids] == ["dead", "ready", "waiting"]
    q.finish_cancelled(one(q), to="discard", reason="cancelled by ops: test")
    assert q.get(ids[1]) is None
    assert place(q, ids[2]) == "ready"


def test_replay_of_a_dead_job_rejoins_the_end_of_its_line(q):
    ids = enqueue(q, 2)
    q.bury(one(q), reason="bad")
    assert q.replay(ids[0])
    assert [place(q, i) for i in ids] == ["waiting", "ready"]
    q.ack(one(q))
    assert place(q, ids[0]) == "ready"


def test_replay_onto_a_free_key_is_ready(q):
    ids = enqueue(q, 1)
    q.bury(one(q), reason="bad")
    assert q.replay(ids[0]) and place(q, ids[0]) == "ready"


def test_purging_the_head_passes_the_turn_and_waiting_jobs_can_be_purged(q, r, clock):
    ids = enqueue(q, 4)
    purger = Purger(r, clock=clock)
    assert purger.delete("jobs", ids[0]) == "ready"
    assert place(q, ids[1]) == "ready"
    assert purger.delete("jobs", ids[2]) == "waiting"
    assert purger.count("jobs", PurgeFilter("waiting")) == 1
    q.ack(one(q))  # ids[1]: the purged ids[2] is stepped over
    assert place(q, ids[3]) == "ready"
    assert purger.purge("jobs", PurgeFilter("waiting"), 10) == 0


def test_a_delayed_job_keeps_its_place_in_the_line(q, clock):
    first = enqueue(q, 1, delay_s=10)[0]
    second = enqueue(q, 1)[0]
    assert [place(q, first), place(q, second)] == ["scheduled", "waiting"]
    clock.advance(10_001)
    q.promote()
    q.ack(one(q))
    assert place(q, second) == "ready"


def test_a_head_whose_record_vanished_does_not_block_its_key(q, r):
    ids = enqueue(q, 2)
    r.delete(q.keys.job(ids[0]))  # removed by hand: the key's head is gone
    later = enqueue(q, 1)[0]
    assert place(q, ids[1]) == "ready"  # the line moved on first
    assert place(q, later) == "waiting"


def test_keys_live_in_the_queue_slot(q):
    k = q.keys
    for name in (k.turns, k.line("order:42"), k.waiting):
        assert name.startswith(k.tag + ":")


@pytest.mark.parametrize("n", [1, 3])
def test_ack_many_passes_each_keys_turn(q, n):
    heads = [enqueue(q, 2, key=f"k{i}")[0] for i in range(n)]
    jobs = q.reserve("w", count=10)
    assert {j.id for j in jobs} == set(heads)
    q.ack_many([(j, None) for j in jobs])
    assert len(q.reserve("w", count=10)) == n


def test_a_unique_job_waiting_behind_its_key_still_holds_its_idempotency_key(q):
    q.enqueue("t", {}, idempotency_key="first", lock_key="k")
    waiting = q.enqueue("t", {}, idempotency_key="u", lock_key="k", unique=True)
    assert q.get(waiting).state == "waiting"
    assert q.enqueue("t", {}, idempotency_key="u", lock_key="k", unique=True) == waiting


def test_the_finder_searches_waiting_jobs_with_the_others(q, r, clock):
    from antre.observe.finder import Finder
    q.enqueue("t", {"order": 1}, idempotency_key="a", lock_key="k")
    waiting = q.enqueue("t", {"order": 2}, idempotency_key="b", lock_key="k")
    hits = Finder(r, clock).search("order=2").hits
    assert [(h.job_id, h.state) for h in hits] == [(waiting, "waiting")]
