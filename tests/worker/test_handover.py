"""The hot key's hand-over: a locked job's end is one round trip that checks and
releases its lock, acks it, takes the lock for the key's next head and reserves that head
(``Queue.handover``, ``handover.lua``). Through a real in-process worker: two scripts per job
and no lock acquire of its own; the lock's fencing tokens still rise by one per job; a lock
lost while the handler ran is not acked over (the job is snoozed, nothing of its run counts); a
paused queue gets no head handed over and no lock is left taken for it; a next head holding a
cancel request, or of another type, leaves no lock behind; a lease lost while the handler ran
changes nothing and the lock is let go."""

from __future__ import annotations

import json

from helpers import burst, script_calls

from antre import Antre
from antre.control.pause import Pauses
from antre.engine import keys


def _evalsha_calls(r) -> int:
    return script_calls(r)


def test_a_hot_key_hands_over_in_two_scripts_a_job_with_rising_fences(app, clock, q, r):
    fences = []

    @app.handler("step")
    def step(ctx, payload):
        fences.append((payload["i"], ctx.fence))

    app.enqueue_many([app.spec("step", {"i": i}, idempotency_key=f"s{i}", lock_key="hot:1")
                      for i in range(40)])
    r.config_resetstat()
    _, counts = burst(app, clock)
    assert [i for i, _ in fences] == list(range(40))
    got = [f for _, f in fences]
    # one acquire per job (a first hand-over that loads its script runs after the reserve
    # sent behind it: its head's lock is given back and taken again, one token skipped)
    assert got == sorted(set(got)) and got[-1] - got[0] <= 40
    assert counts.get("succeeded") == 40
    # per job: the hand-over and the reserve behind it (not reserve, acquire, renew, release,
    # ack: five, 200 here); a few more: the first reserve and acquire, promotion, the end
    assert _evalsha_calls(r) <= 2 * 40 + 20
    assert r.get(keys.lock("hot:1")) is None  # the last job's lock released with its ack
    assert r.zscore(keys.locks_held(), "hot:1") is None
    assert q.stats().get("lock_busy", 0) == 0 and q.redis.hlen(q.keys.turns) == 0


def test_a_lock_lost_while_the_handler_ran_is_not_acked_over(app, clock, q, r):
    runs = []

    @app.handler("lossy")
    def lossy(ctx, payload):
        runs.append(payload["i"])
        if runs.count(1) == 1 and payload["i"] == 1:
            r.delete(keys.lock("k"))  # expired / force-released while it ran

    ids = [app.enqueue("lossy", {"i": i}, idempotency_key=f"l{i}", lock_key="k")
           for i in range(3)]
    burst(app, clock)
    # job 1 found its lock gone at its ack: not acked, snoozed (no attempt spent), still the
    # key's head: job 2 waits behind it
    assert runs == [0, 1]
    job1 = q.get(ids[1])
    assert job1.state == "scheduled" and job1.attempt == 0
    assert q.get(ids[2]).state == "waiting"
    assert q.stats().get("lock_lost") == 1
    clock.advance(5_000)
    burst(app, clock)
    assert runs == [0, 1, 1, 2]
    assert [q.get(i).state for i in ids] == ["done", "done", "done"]


def test_a_paused_queue_gets_no_head_handed_over_and_no_lock_left_taken(app, clock, q, r):
    ran = []
    pauses = Pauses(r, clock)

    @app.handler("p")
    def p(ctx, payload):
        ran.append(payload["i"])
        if payload["i"] == 0:
            pauses.pause("default", None, by="ops", reason="incident")

    ids = [app.enqueue("p", {"i": i}, idempotency_key=f"p{i}", lock_key="pk")
           for i in range(3)]
    burst(app, clock)
    assert ran == [0]
    assert q.get(ids[1]).state == "ready"  # the key's head, not reserved
    assert r.get(keys.lock("pk")) is None  # nothing taken for it:
    assert r.get(keys.lock_fence("pk")) == "1"  # (not taken and given back either)
    pauses.resume("default", None)
    burst(app, clock)
    assert ran == [0, 1, 2]


def test_a_next_head_holding_a_cancel_request_leaves_no_lock_behind(app, clock, q, r):
    ran = []

    @app.handler("c")
    def c(ctx, payload):
        ran.append(payload["i"])
        if payload["i"] == 0:  # a request left on a job put back by a version that kept it
            r.hset(q.keys.job(ids[1]), "cancel", json.dumps(
                {"by": "ops", "to": "dlq", "reason": "not needed", "at": clock()}))

    ids = [app.enqueue("c", {"i": i}, idempotency_key=f"c{i}", lock_key="ck")
           for i in range(3)]
    burst(app, clock)
    assert ran == [0, 2]  # the reserve behind the hand-over ended it as cancelled
    assert q.get(ids[1]).state == "dead" and q.get(ids[2]).state == "done"
    assert r.get(keys.lock("ck")) is None


def test_a_next_head_of_another_type_takes_its_own_lock(app, clock, q, r):
    ran = []

    @app.handler("a", lock_ttl_s=30)
    def a(ctx, payload):
        ran.append(("a", payload["i"], ctx.fence, r.pttl(keys.lock("mix"))))

    @app.handler("b", lock_ttl_s=5)
    def b(ctx, payload):
        ran.append(("b", payload["i"], ctx.fence, r.pttl(keys.lock("mix"))))

    for i in range(4):
        app.enqueue("a" if i % 2 == 0 else "b", {"i": i}, idempotency_key=f"m{i}",
                    lock_key="mix")
    burst(app, clock)
    assert [(t, i) for t, i, _, _ in ran] == [("a", 0), ("b", 1), ("a", 2), ("b", 3)]
    fences = [f for _, _, f, _ in ran]
    assert fences == sorted(set(fences))
    # each holds the lock with its own handler's ttl
    assert all((ttl > 5_000) == (t == "a") for t, _, _, ttl in ran)
    assert r.get(keys.lock("mix")) is None


def test_a_lease_lost_while_the_handler_ran_changes_nothing_and_frees_the_lock(app, clock, q, r):
    ran = []

    @app.handler("swept", visibility_timeout_s=30)
    def swept(ctx, payload):
        ran.append(payload["i"])
        if ran == [0]:  # its lease runs out under it and the sweeper gives the job back
            clock.advance(31_000)
            q.sweep()

    ids = [app.enqueue("swept", {"i": i}, idempotency_key=f"w{i}", lock_key="sk")
           for i in range(3)]
    _, counts = burst(app, clock)
    # the late hand-over was refused (LOST: nothing of it changed) but let go of the lock, so
    # the job's next delivery took it at once: no snooze; then the line went on in order
    assert ran == [0, 0, 1, 2]
    assert counts.get("lease_lost") == 1 and q.stats().get("lock_busy", 0) == 0
    assert [q.get(i).state for i in ids] == ["done", "done", "done"]
    assert r.get(keys.lock("sk")) is None


def test_with_an_idempotency_store_the_key_is_handed_over_too(redis_url, sqlite_url, clock, r):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    q = app.queue()
    ran = []

    @app.handler("stored")
    def stored(ctx, payload):
        ran.append((payload["i"], ctx.fence))
        return {"i": payload["i"]}

    app.enqueue_many([app.spec("stored", {"i": i}, idempotency_key=f"st{i}", lock_key="db:1")
                      for i in range(20)])
    r.config_resetstat()
    burst(app, clock)
    assert [i for i, _ in ran] == list(range(20))
    fences = [f for _, f in ran]
    assert fences == sorted(set(fences))
    # per job: the lock's renewal before the completion's commit, the hand-over, the reserve
    assert _evalsha_calls(r) <= 3 * 20 + 20
    store = app.idempotency
    assert store is not None
    records = store.lookup_many([f"st{i}" for i in range(20)])
    assert all(records[f"st{i}"].status == "completed" for i in range(20))
    assert r.get(keys.lock("db:1")) is None and q.stats().get("lock_busy", 0) == 0


def test_a_head_reserved_by_another_runner_between_the_hand_over_and_its_reserve_adopts_the_lock(
        app, clock, q, r):
    """The hand-over (``handover.lua``) and the reserve behind it are two scripts of one write:
    another client's reserve may run between them and win the head whose lock the hand-over
    took. That runner's acquire, for that very delivery, adopts the lock (it was snoozed
    ``lock_busy`` before: one in ~5 runs of a 60-job hot key left its next head in
    ``scheduled``); an acquire for any other delivery still finds it busy, and the hand-over's
    own release of the lock it did not use no longer frees it."""
    from antre.engine.locks import LockBusy, Locks

    app.handler("h")(lambda ctx, payload: None)
    ids = [app.enqueue("h", {"i": i}, idempotency_key=f"h{i}", lock_key="race:1")
           for i in range(3)]
    locks = Locks(r, clock=clock)
    (first,) = q.reserve("w1", count=1)
    lock = locks.acquire("race:1", 30_000, "w1", holder_job=f"default/{first.id}",
                         holder_epoch=first.epoch)
    # the hand-over with nothing reserved behind it (count 0): the head's lock is taken for it
    h = q.handover(first, None, lock_key="race:1", token=lock.token, worker_id="w1", count=0,
                   next_token="w1:feedface", ttl_ms=30_000)
    assert h.status == "OK" and h.next_id == ids[1] and h.jobs == []
    taken_value = r.get(keys.lock("race:1"))
    taken_value = taken_value.decode() if isinstance(taken_value, bytes) else taken_value
    assert taken_value == f"w1:feedface.{h.next_epoch}"
    # another runner's reserve wins that delivery
    (head,) = q.reserve("w2", count=1)
    assert head.id == ids[1] and head.epoch == h.next_epoch
    # an acquire for another delivery of the job (a stale epoch) is refused ...
    try:
        locks.acquire("race:1", 30_000, "w3", holder_job=f"default/{head.id}",
                      holder_epoch=head.epoch - 1)
        raise AssertionError("a lock taken for another delivery was adopted")
    except LockBusy:
        pass
    # ... the winner's acquire adopts it, with a fencing token above the hand-over's
    mine = locks.acquire("race:1", 30_000, "w2", holder_job=f"default/{head.id}",
                         holder_epoch=head.epoch)
    assert mine.fence > h.fence
    # the hand-over's runner lets go of the lock it took: the winner's lock stays
    from antre.engine.locks import Lock
    assert locks.release(Lock("race:1", taken_value, h.fence, 30_000)) is False
    held = r.get(keys.lock("race:1"))
    assert (held.decode() if isinstance(held, bytes) else held) == mine.token
