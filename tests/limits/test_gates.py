"""Flow limits held at reserve: a type's or downstream's concurrency and rate
declared as gates of the queue. A job over its gate's slots waits in the gate's line (never
delivered, no attempt, no snooze) and is made ready by the script that frees a slot (ack,
retry, bury, sweep); one over its gate's rate waits in scheduled for its start. Operators'
overrides hold at the next reserve, revert on the injected clock, and are refused for
a type or downstream no worker declared."""

from __future__ import annotations

import pytest

from antre.engine.queue import JobSpec, Queue
from antre.observe.readmodels import ReadModels
from antre.limits.admission import LimitPolicy
from antre.limits.gates import Declaration, Gates, GateError, plan


def gated(r, clock, conc: int | None = 2, rate: str | None = None) -> Gates:
    gates = Gates(r, clock)
    d = Declaration(cand={"t": "type:t"}, conc={"type:t": conc} if conc else {},
                    rate={"type:t": rate} if rate else {})
    gates.declare("jobs", d)
    return gates


def fill(q: Queue, n: int, job_type: str = "t") -> list[str]:
    return q.enqueue_many([JobSpec(job_type, {"i": i}, f"k:{job_type}:{i}") for i in range(n)])


def test_jobs_over_the_slots_wait_untouched_and_the_ack_starts_the_next(q, r, clock):
    gated(r, clock, conc=2)
    ids = fill(q, 5)
    first = q.reserve("w", count=10)
    assert [j.id for j in first] == ids[:2]
    assert [q.get(i).state for i in ids[2:]] == ["waiting"] * 3
    waiting = q.get(ids[2])
    assert waiting.waits_on == "limit" and waiting.deliveries == 0 and waiting.attempt == 0
    assert q.reserve("w", count=10) == []  # nothing else is delivered meanwhile
    reads = ReadModels(r, clock)
    assert reads.turn("jobs", q.get(ids[3])).describe() == \
        "2nd in line for a slot of type:t (2 in flight)"
    q.ack(first[0])
    nxt = q.reserve("w", count=10)
    assert [j.id for j in nxt] == [ids[2]] and nxt[0].deliveries == 1
    assert r.scard(q.keys.gate_held("type:t")) == 2


def test_retry_bury_and_sweep_each_free_the_slot(q, r, clock):
    gated(r, clock, conc=1)
    ids = fill(q, 4)
    (a,) = q.reserve("w", count=10)
    q.retry(a, delay_ms=60_000, error="boom")  # out of flight: its slot passes
    (b,) = q.reserve("w", count=10)
    assert b.id == ids[1]
    q.bury(b, reason="permanent", error="bad")
    (c,) = q.reserve("w", count=10)
    assert c.id == ids[2]
    clock.advance(c.visibility_timeout_ms + 1)  # its worker was killed: the sweep frees it
    q.sweep()
    got = q.reserve("w", count=10)
    assert [j.id for j in got] == [c.id] and got[0].deliveries == 2
    assert r.smembers(q.keys.gate_held("type:t")) == {c.id}
    assert q.get(ids[3]).state == "waiting"


def test_a_rescue_of_a_lost_worker_frees_its_slot(q, r, clock):
    gated(r, clock, conc=1)
    ids = fill(q, 2)
    (a,) = q.reserve("w-lost", count=10)
    r.zadd(q.keys.beats, {"w-lost": clock()})
    clock.advance(5_000)  # its worker stopped beating, long before the lease's end
    assert [x.worker_id for x in q.rescue(q.silent(clock() - 3_000), clock() - 3_000)] == \
        ["w-lost"]
    got = q.reserve("w", count=10)
    assert [j.id for j in got] == [a.id] and got[0].deliveries == 2
    assert r.smembers(q.keys.gate_held("type:t")) == {a.id}
    assert q.get(ids[1]).state == "waiting"


def test_other_types_run_past_a_full_gate(q, r, clock):
    gated(r, clock, conc=1)
    fill(q, 3)
    others = fill(q, 3, "u")
    got = q.reserve("w", count=10)
    assert sorted(j.id for j in got if j.type == "u") == sorted(others)
    assert sum(j.type == "t" for j in got) == 1


def test_a_rate_gives_later_starts_in_scheduled_without_a_delivery(q, r, clock):
    gated(r, clock, conc=None, rate="2/1000")
    ids = fill(q, 5)
    got = q.reserve("w", count=10)
    assert [j.id for j in got] == ids[:2]
    later = [q.get(i) for i in ids[2:]]
    assert [j.state for j in later] == ["scheduled"] * 3
    assert all(j.deliveries == 0 for j in later)
    assert ReadModels(r, clock).turn("jobs", later[0]).describe() == "type:t's rate"
    q.ack_many([(j, None) for j in got])
    clock.advance(1000)
    q.promote()
    assert sorted(j.id for j in q.reserve("w", count=10)) == sorted(ids[2:4])
    assert q.get(ids[4]).state == "scheduled"  # its start is a window later still


def test_a_job_that_finds_the_slots_full_takes_no_rate_start(q, r, clock):
    # rate 2 a second and 1 slot: the jobs that wait for the slot hold no start, so when the
    # slot frees after a window with no start in it, the next job runs at once (not a window
    # later, as it would if the waiting jobs' starts filled the window)
    gated(r, clock, conc=1, rate="2/1000")
    ids = fill(q, 4)
    (a,) = q.reserve("w", count=10)
    assert [q.get(i).state for i in ids[1:]] == ["waiting"] * 3
    clock.advance(1000)
    q.promote()
    assert q.reserve("w", count=10) == []
    starts = q.keys.gate_starts("type:t")
    assert [m for m in r.zrange(starts, 0, -1)] == [a.id]  # none of the waiting ones
    clock.advance(200)
    q.ack(a)
    got = q.reserve("w", count=10)
    assert [j.id for j in got] == [ids[1]]  # no start in the last window but a's
    assert r.zscore(starts, ids[1]) == clock()
    q.ack(got[0])
    (c,) = q.reserve("w", count=10)  # the window holds one start: a second one now
    assert c.id == ids[2]
    q.ack(c)
    assert q.reserve("w", count=10) == []  # two in the window: the third is scheduled
    assert q.get(ids[3]).state == "scheduled" and q.get(ids[3]).visible_at == clock() + 1000


def test_a_start_is_taken_under_every_rate_of_a_job_at_its_latest(q, r, clock):
    # a type's rate and its downstream's: a job scheduled for one gate's later start takes no
    # start now under the other (it starts once, at the later of the two)
    gates = Gates(r, clock)
    gates.declare("jobs", Declaration(cand={"t": "type:t ds:d"},
                                      rate={"type:t": "5/1000", "ds:d": "1/1000"}))
    ids = fill(q, 3)
    (a,) = q.reserve("w", count=10)
    later = [q.get(i) for i in ids[1:]]
    assert [j.state for j in later] == ["scheduled"] * 2
    assert [j.visible_at for j in later] == [clock() + 1000, clock() + 2000]
    for gate in ("type:t", "ds:d"):
        assert r.zscore(q.keys.gate_starts(gate), ids[1]) == clock() + 1000


def test_a_live_override_holds_at_the_next_reserve_and_reverts(q, r, clock):
    gates = gated(r, clock, conc=1)
    ids = fill(q, 4)
    assert len(q.reserve("w", count=10)) == 1
    over = gates.set_override("jobs", "type", "t", "ops", "catch up", slots=3,
                              revert_after_s=60)
    assert over.slots == 3 and over.until_ms == clock() + 60_000
    assert [j.id for j in q.reserve("w", count=10)] == ids[1:3]
    state = next(s for s in gates.limits("jobs") if s.gate == "type:t")
    assert (state.slots, state.slots_now, state.in_flight, state.waiting) == (1, 3, 3, 1)
    clock.advance(60_001)
    assert gates.revert_due("jobs") == 1 and gates.override("jobs", "type:t") is None


def test_slots_zero_holds_the_type_and_clearing_starts_its_jobs(q, r, clock):
    gates = gated(r, clock, conc=2)
    fill(q, 3)
    gates.set_override("jobs", "type", "t", "ops", "downstream is down", slots=0)
    assert q.reserve("w", count=10) == []
    assert gates.clear("jobs", "type", "t") == 2  # two started at once
    assert len(q.reserve("w", count=10)) == 2


def test_an_override_of_an_unknown_type_or_a_bad_value_says_what_to_pass(r, clock):
    gates = gated(r, clock)
    with pytest.raises(GateError, match="unknown type 'nope' in queue jobs"):
        gates.set_override("jobs", "type", "nope", "ops", "why", slots=1)
    with pytest.raises(GateError, match="unknown downstream 'mail'"):
        gates.set_override("jobs", "downstream", "mail", "ops", "why", slots=1)
    with pytest.raises(GateError, match="an int from 0"):
        gates.set_override("jobs", "type", "t", "ops", "why", slots=-1)
    with pytest.raises(GateError, match="bad rate"):
        gates.set_override("jobs", "type", "t", "ops", "why", rate="fast")
    with pytest.raises(GateError, match="a reason is required"):
        gates.set_override("jobs", "type", "t", "ops", " ", slots=1)


def test_the_plan_holds_a_downstream_of_one_queue_and_not_one_shared_across_queues():
    class H:
        def __init__(self, queue: str, downstream: str | None = None,
                     flow: LimitPolicy | None = None) -> None:
            self.queue, self.downstream, self.flow = queue, downstream, flow
    handlers = {"a": H("q1", "mail"), "b": H("q1", "mail", LimitPolicy(concurrency=2)),
                "c": H("q2", "sms"), "d": H("q3", "sms"), "e": H("q1", None,
                                                                LimitPolicy(rate_per_s=5))}
    p = plan(handlers, {"mail": LimitPolicy(concurrency=3), "sms": LimitPolicy(concurrency=1)})
    assert p["q1"].cand == {"a": "type:a ds:mail", "b": "type:b ds:mail", "e": "type:e"}
    assert p["q1"].conc == {"ds:mail": 3, "type:b": 2} and p["q1"].rate == {"type:e": "5/1000"}
    assert p["q2"].cand == {"c": "type:c"} and p["q2"].conc == {}  # sms is in two queues
