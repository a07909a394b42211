"""Live control of fair-share groups: override a group's slots with a reason (a raise
starts its waiting jobs at once, 0 holds it), optionally reverting after a duration on the
injected clock; pause and resume one group; the Groups read model shows the busiest groups,
why a group is held, the paused ones, and a group's jobs in order."""

from __future__ import annotations

import pytest
from helpers import reserve_all

from antre.control.pause import Pauses
from antre.groups.control import GroupControl, GroupError
from antre.engine.queue import JobSpec, Queue
from antre.groups.read import Groups


def fill(q: Queue, group: str, n: int, conc: int = 1) -> list[str]:
    return q.enqueue_many([JobSpec("t", {"i": i}, f"{group}:{i}", group=group,
                                   group_concurrency=conc) for i in range(n)])


def states(q: Queue, ids: list[str]) -> list[str]:
    return [q.get(i).state for i in ids]


def test_a_raised_limit_starts_waiting_jobs_at_once_and_clearing_restores_it(q, r, clock):
    ids = fill(q, "tenant:7", 4)
    ctl = GroupControl(r, clock)
    over = ctl.set_slots("jobs", "tenant:7", 3, "ops", "catch up after the outage")
    assert over.slots == 3 and over.until_ms == 0
    assert states(q, ids) == ["ready", "ready", "ready", "waiting"]
    assert ctl.clear_slots("jobs", "tenant:7") == 1
    jobs = reserve_all(q)
    q.ack_many([(j, None) for j in jobs])
    # back to its own single slot: three ended, one job takes the one slot
    assert states(q, ids)[3] == "ready"


def test_zero_slots_hold_a_group_and_the_override_reverts_after_its_time(q, r, clock):
    ids = fill(q, "tenant:1", 3)
    ctl = GroupControl(r, clock)
    (a,) = q.reserve("w")
    ctl.set_slots("jobs", "tenant:1", 0, "ops", "their API is failing", revert_after_s=60)
    q.ack(a)
    assert states(q, ids)[1:] == ["waiting", "waiting"]  # held: the freed slot is not given
    row = Groups(r, clock).find("jobs", "tenant:1")
    assert row is not None and row.held_why(clock()).startswith("held by ops")
    clock.advance(61_000)
    assert ctl.revert_due("jobs") == 1
    assert states(q, ids)[1:] == ["ready", "waiting"]
    assert Groups(r, clock).find("jobs", "tenant:1").override is None


def test_the_view_ranks_groups_and_lists_paused_ones(q, r, clock):
    fill(q, "big", 10)
    fill(q, "small", 2)
    ctl = GroupControl(r, clock, pauses=Pauses(r, clock))
    ctl.pause("jobs", "small", "ops", "checking their data")
    view = Groups(r, clock).view("jobs")
    assert [g.name for g in view.by_waiting] == ["big", "small"]
    assert view.by_waiting[0].waiting == 9 and view.by_waiting[0].slots_held == 1
    assert view.paused == ["small"] and view.groups_waiting == 2 and view.jobs_waiting == 10
    assert view.by_waiting[0].held_why(clock()) == "all 1 slots taken"
    held, line = Groups(r, clock).jobs("jobs", "big", limit=3)
    assert len(held) == 1 and [j.payload["i"] for j in line] == [1, 2, 3]
    assert ctl.resume("jobs", "small") == 0
    with pytest.raises(GroupError, match="not paused"):
        ctl.resume("jobs", "small")


@pytest.mark.parametrize("kwargs, message", [
    ({"group": "bad name", "slots": 1}, "bad group"),
    ({"group": "g", "slots": -1}, "bad slots"),
    ({"group": "g", "slots": "2"}, "bad slots"),
    ({"group": "g", "slots": 2, "reason": ""}, "reason is required"),
    ({"group": "g", "slots": 2, "revert_after_s": 0}, "revert_after_s"),
])
def test_bad_overrides_are_refused_saying_what_to_pass(r, clock, kwargs, message):
    args = {"reason": "why", **kwargs}
    with pytest.raises(GroupError, match=message):
        GroupControl(r, clock).set_slots("jobs", args.pop("group"), args.pop("slots"), "ops",
                                         **args)
    assert r.keys("*") == []


def test_a_control_made_without_pauses_says_what_to_pass(r, clock):
    with pytest.raises(GroupError, match="pauses="):
        GroupControl(r, clock).pause("jobs", "small", "ops", "why")


def rated(q: Queue, group: str, n: int, conc: int | None = None,
          rate: str | None = None) -> list[str]:
    return q.enqueue_many([JobSpec("t", {"i": i}, f"{group}:{i}", group=group,
                                   group_concurrency=conc, group_rate=rate) for i in range(n)])


def test_a_rate_override_replaces_the_jobs_rate_and_its_start_ahead_is_given_again(q, r, clock):
    ids = rated(q, "tenant:7", 4, conc=10, rate="1/s")
    assert states(q, ids) == ["ready", "scheduled", "waiting", "waiting"]
    ctl = GroupControl(r, clock)
    over = ctl.set_override("jobs", "tenant:7", "ops", "their backlog is urgent", rate="10/s")
    assert over.slots is None and over.rate == "10/s"
    # the start it gave a second ahead is given again under 10/s (now), and the line follows
    assert states(q, ids) == ["ready"] * 4
    row = Groups(r, clock).find("jobs", "tenant:7")
    assert row.rate == "10/s" and row.override.rate == "10/s" and row.rate_waiting == 0
    assert len(reserve_all(q)) == 4


def test_a_group_without_a_rate_is_given_one_and_clearing_lifts_it(q, r, clock):
    ids = rated(q, "noisy", 5, conc=2)
    ctl = GroupControl(r, clock)
    ctl.set_override("jobs", "noisy", "ops", "slow them down", rate="1/s")
    q.ack_many([(j, None) for j in reserve_all(q)])
    # two started just now (counted when they end): the next start is a second ahead, and the
    # rest wait in line behind it
    assert states(q, ids)[2:] == ["scheduled", "waiting", "waiting"]
    assert q.get(ids[2]).visible_at == clock() + 1000
    row = Groups(r, clock).find("jobs", "noisy")
    assert row.held_why(clock()).startswith("at its rate 1/s (set by ops)")
    assert ctl.clear_slots("jobs", "noisy") == 2
    assert states(q, ids)[2:] == ["ready", "ready", "waiting"]  # no rate now; its 2 slots


def test_a_rate_override_reverts_after_its_time(q, r, clock):
    ids = rated(q, "tenant:3", 4, conc=5, rate="100/s")
    ctl = GroupControl(r, clock)
    ctl.set_override("jobs", "tenant:3", "ops", "hold them back", rate="1/h", slots=1,
                     revert_after_s=60)
    q.ack(q.reserve("w", count=10)[0])  # one started under the override (3 back in line)
    more = rated(q, "tenant:3", 2, conc=5, rate="100/s")
    # 1 slot and 1 start an hour: the next job is scheduled an hour ahead, the others wait
    assert states(q, ids[:3]) == ["scheduled", "waiting", "waiting"]
    assert states(q, more) == ["waiting", "waiting"]
    assert q.get(ids[0]).visible_at == clock() + 3600_000
    clock.advance(61_000)
    assert ctl.revert_due("jobs") == 1
    assert Groups(r, clock).find("jobs", "tenant:3").override is None
    # its own 100/s and 5 slots again
    assert states(q, ids[:3] + more) == ["ready"] * 5 and states(q, ids[3:]) == ["done"]


@pytest.mark.parametrize("kwargs, message", [
    ({}, "pass slots"),
    ({"rate": "fast"}, "bad rate 'fast'"),
    ({"rate": "0/s"}, "bad rate"),
    ({"slots": -1, "rate": "1/s"}, "bad slots"),
])
def test_bad_rate_overrides_are_refused_saying_what_to_pass(r, clock, kwargs, message):
    with pytest.raises(GroupError, match=message):
        GroupControl(r, clock).set_override("jobs", "g", "ops", "why", **kwargs)
    assert r.hlen("antre:{jobs}:glimits") == 0


def test_lowered_slots_hold_at_the_next_reserve(q, r, clock):
    # five ready jobs holding slots when the operator lowers the group to 2: reserve delivers
    # 2 and puts the ones over the limit back at the front of the group's line, untouched, in
    # the order it met them (a group's ready jobs run in no fixed order among themselves)
    ids = fill(q, "tenant:5", 6, conc=5)
    assert states(q, ids) == ["ready"] * 5 + ["waiting"]
    ctl = GroupControl(r, clock)
    ctl.set_slots("jobs", "tenant:5", 2, "ops", "their API is slow")
    got = reserve_all(q)
    assert [j.id for j in got] == ids[3:5]
    assert states(q, ids[:3]) == ["waiting"] * 3
    assert q.get(ids[0]).deliveries == 0 and r.scard(q.keys.group_held("tenant:5")) == 2
    _, line = Groups(r, clock).jobs("jobs", "tenant:5")
    assert [j.id for j in line] == ids[:3] + ids[5:]
    q.ack(got[0])
    assert [j.id for j in q.reserve("w", count=10)] == [ids[0]]
    ctl.set_slots("jobs", "tenant:5", 0, "ops", "hold them")
    q.ack(got[1])
    assert q.reserve("w", count=10) == []  # 0 holds it: nothing more is started
    assert states(q, ids[1:3]) == ["waiting"] * 2
