"""Group rates: ``group_rate="10/s"`` lets at most that many of a group's jobs start
in any window of that length. The next job the window does not allow yet is given its start and
waits in 'scheduled' for it (holding its slot), promoted by the ordinary promotion pass; the
group's later jobs wait in its line until that one ends. Nothing is delivered early, snoozed or
charged an attempt, and other groups' jobs run meanwhile."""

from __future__ import annotations

import pytest

from antre import InvalidJob
from antre.app import Antre
from antre.engine.envelope import format_rate, parse_rate
from antre.engine.queue import JobSpec, Queue
from antre.groups.read import Groups
from antre.observe.readmodels import ReadModels


def rated(q: Queue, group: str, n: int, rate: str = "10/s", **kw) -> list[str]:
    return q.enqueue_many([JobSpec("t", {"i": i}, f"{group}:{i}", group=group, group_rate=rate,
                                   **kw) for i in range(n)])


def drain(q: Queue, count: int = 100) -> list[str]:
    """Reserve and ack all that is ready now; the ids, in order."""
    out: list[str] = []
    while jobs := q.reserve("w", count=count):
        out += [j.id for j in jobs]
        q.ack_many([(j, None) for j in jobs])
    return out


def test_exactly_the_rates_jobs_start_per_window(q, clock):
    ids = rated(q, "tenant:7", 35)
    started: list[list[str]] = []
    for _ in range(5):  # five windows of one second, in steps of 100 ms
        window: list[str] = []
        for _ in range(10):
            q.promote()
            window += drain(q)
            clock.advance(100)
        started.append(window)
    assert [len(w) for w in started] == [10, 10, 10, 5, 0]
    # window by window in their order (one window's starts share a time: among them, none)
    assert [set(w) for w in started[:4]] == [set(ids[:10]), set(ids[10:20]), set(ids[20:30]),
                                             set(ids[30:])]
    # a sliding window: no 1 s span (any start in 100 ms steps) holds more than 10 starts
    times = sorted(q.get(i).reserved_at for i in ids)
    assert max(sum(1 for t in times if s <= t < s + 1000) for s in times) == 10


def test_a_job_the_window_does_not_allow_waits_in_scheduled_for_its_start(q, clock):
    t0 = clock()
    ids = rated(q, "g", 4, rate="2/s")
    assert [q.get(i).state for i in ids] == ["ready", "ready", "scheduled", "waiting"]
    later = q.get(ids[2])
    assert later.visible_at == t0 + 1000 and later.waits_for_rate
    assert later.group_rate == "2/s"
    assert not q.get(ids[0]).waits_for_rate
    assert drain(q) == ids[:2]  # only the two started at t0
    clock.advance(999)
    q.promote()
    assert drain(q) == []
    clock.advance(1)
    q.promote()
    assert drain(q) == ids[2:]  # the scheduled one, then (at its end) the next in line


def test_the_next_starts_count_from_when_jobs_really_started(q, clock):
    # made ready at t0 but reserved only at t0 + 600 (no worker free): the window of the
    # next starts counts from then, not from t0
    t0 = clock()
    ids = rated(q, "g", 5, rate="2/s")
    clock.advance(600)
    assert drain(q) == ids[:2]
    clock.advance(400)
    q.promote()
    assert drain(q) == [ids[2]]  # its start was given at t0; the next wait for t0 + 1600
    assert q.get(ids[3]).state == "scheduled" and q.get(ids[3]).visible_at == t0 + 1600


def test_a_rate_limited_group_never_holds_back_other_groups(q, clock):
    slow = rated(q, "slow", 50, rate="1/h")
    fast = q.enqueue_many([JobSpec("t", {"i": i}, f"fast:{i}", group="fast") for i in range(20)])
    plain = [q.enqueue("t", {"i": i}, idempotency_key=f"plain:{i}") for i in range(20)]
    ran = drain(q, count=7)
    assert set(ran) == {slow[0], *fast, *plain}  # everyone else ran at once, unslowed
    assert len(q.reserve("w", count=100)) == 0  # nothing of 'slow' is ready: none delivered
    clock.advance(3_600_000)
    q.promote()
    assert drain(q) == [slow[1]]


def test_no_delivery_snooze_or_attempt_is_spent_while_waiting_for_the_rate(q, clock):
    ids = rated(q, "g", 6, rate="3/m")
    for _ in range(3):
        q.promote()
        drain(q)
        clock.advance(60_000)
    for i in ids:
        job = q.get(i)
        assert (job.state, job.deliveries, job.attempt, job.snoozes) == ("done", 1, 0, 0)
    assert not {k for k, v in q.stats().items() if "snooz" in k and v}


def test_the_rate_holds_across_the_slots_handing_over(q, clock):
    # 2 slots, 3/s: the slots hand over on ack, the rate still counts every start
    ids = rated(q, "g", 9, rate="3/s", group_concurrency=2)
    first = drain(q)
    assert first == ids[:3]  # two at once, the third takes a freed slot within the window
    assert q.get(ids[3]).state == "scheduled" and q.get(ids[3]).waits_for_rate
    assert [q.get(i).state for i in ids[4:]] == ["waiting"] * 5
    clock.advance(1000)
    q.promote()
    assert drain(q) == ids[3:6]


def test_a_replayed_job_waits_for_the_rate_too(q, clock):
    ids = rated(q, "g", 1, rate="1/s")
    q.bury(q.reserve("w")[0], reason="bad")
    assert q.replay(ids[0])
    assert q.get(ids[0]).state == "scheduled" and q.get(ids[0]).waits_for_rate
    clock.advance(1000)
    q.promote()
    assert drain(q) == ids


@pytest.mark.parametrize("rate", ["10", "ten/s", "10/y", "0/s", "-1/s", "10 per s", 10, "",
                                  "10001/s", "1/0s"])
def test_a_rate_that_does_not_parse_is_refused_saying_what_to_pass(q, r, rate):
    with pytest.raises(InvalidJob, match=r"bad group_rate .*pass .*'10/s', '600/m'"):
        q.enqueue("t", {}, idempotency_key="k", group="g", group_rate=rate)
    assert r.keys("*") == []


def test_a_rate_needs_a_group(q, r):
    with pytest.raises(InvalidJob, match="group_rate needs a group"):
        q.enqueue("t", {}, idempotency_key="k", group_rate="10/s")
    assert r.keys("*") == []


@pytest.mark.parametrize("text, parsed, shown", [
    ("10/s", (10, 1000), "10/s"), ("600/m", (600, 60_000), "600/m"),
    ("1/h", (1, 3_600_000), "1/h"), (" 5 / 10s ", (5, 10_000), "5/10s"),
    ("100/d", (100, 86_400_000), "100/d")])
def test_rates_parse_and_show_as_given(text, parsed, shown):
    assert parse_rate(text) == parsed
    assert format_rate(f"{parsed[0]}/{parsed[1]}") == shown


def test_the_handler_default_and_app_spec(r, clock):
    app = Antre(redis_client=r, clock=clock)

    @app.handler("sync", group=lambda p: f"tenant:{p['t']}", group_rate="2/s")
    def sync(ctx, payload):
        return None

    assert app.spec("sync", {"t": 7}, idempotency_key="a").group_rate == "2/s"
    assert app.spec("sync", {"t": 7}, idempotency_key="a", group_rate="1/h").group_rate == "1/h"
    ids = [app.enqueue("sync", {"t": 7}, idempotency_key=f"k{i}") for i in range(3)]
    q = app.queue(None)
    assert [q.get(i).state for i in ids] == ["ready", "ready", "scheduled"]


def test_a_start_is_never_given_more_than_a_window_ahead(q, clock):
    ids = rated(q, "g", 200, rate="1/h")  # 128 slots: one start ahead, the rest in line
    states = [q.get(i).state for i in ids]
    assert states[:2] == ["ready", "scheduled"] and set(states[2:]) == {"waiting"}
    assert q.get(ids[1]).visible_at == clock() + 3_600_000


def test_the_line_is_not_stuck_when_the_scheduled_job_is_removed(q, r, clock):
    from antre.control.purge import Purger
    ids = rated(q, "g", 3, rate="1/s")
    q.ack(q.reserve("w")[0])  # the group holds no slot but the scheduled job's
    assert Purger(r, clock=clock).delete("jobs", ids[1]) == "scheduled"
    # it took the slot and a start (purge runs on the server's clock, not the test's)
    assert q.get(ids[2]).state in ("ready", "scheduled") and r.sismember(
        q.keys.group_held("g"), ids[2])
    clock.advance(3_600_000)
    q.promote()
    assert drain(q) == [ids[2]]


def test_shown_on_the_groups_read_and_the_job_page_model(q, r, clock):
    ids = rated(q, "tenant:7", 13)
    row = Groups(r, clock).rows("jobs", ["tenant:7"])[0]
    assert row.rate == "10/s" and row.rate_waiting == 1 and row.next_start_ms == clock() + 1000
    assert row.held_why(clock()) == ("at its rate 10/s: its next job is scheduled for its "
                                     "start, 2 more wait in line")
    reads = ReadModels(r, clock)
    turn = reads.turn("jobs", q.get(ids[10]))
    assert turn is not None and turn.describe() == "group tenant:7's rate 10/s"
    turn = reads.turn("jobs", q.get(ids[12]))
    assert turn is not None and turn.describe() == "2nd in line for group tenant:7's rate 10/s"
    assert reads.turn("jobs", q.get(ids[0])) is None


def test_the_rates_key_is_in_the_queues_slot_and_expires(q, r, clock):
    rated(q, "g", 1, rate="1/m")
    key = q.keys.group_rate("g")
    assert key.startswith(q.keys.tag + ":")
    assert 0 < r.pttl(key) <= 60_000
