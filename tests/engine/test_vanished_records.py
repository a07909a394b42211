"""A record that vanishes (deleted by hand, lost in a failover) leaves nothing waiting for ever
after a sweep: every record kind ``keys.RECORDS`` declares, and the job records others wait on
(a lock key's head, a group's slot holder, a gate's, a flow's parent). A vanished head passes
its turn, a vanished slot holder frees its slot, a vanished flow member settles as failed as
its flow's policy says; each is counted ('abandoned') and listed in the quarantine."""

from __future__ import annotations

import json

import pytest
from test_damaged_records import SCENARIOS, settle_all, states

from antre.engine import keys

KINDS = {"lock": "turns", "group": "group_held", "gate": "gate_held", "flow": "flow"}


@pytest.mark.parametrize("kind", [r.name for r in keys.RECORDS])
def test_deleting_a_record_leaves_nothing_waiting_for_ever(app, clock, kind):
    case = SCENARIOS[kind](app)
    q = case.q
    jobs = q.reserve("w1", count=50)
    assert case.victim in [j.id for j in jobs]
    q.redis.delete(case.key)
    assert q.ack_many([(j, None) for j in jobs]) == []
    settle_all(q, clock)
    ends = states(q, [*case.mates, case.victim, case.waiter])
    assert all(s == "done" for s in ends), dict(zip([*case.mates, case.victim, case.waiter],
                                                   ends))


@pytest.mark.parametrize("on", sorted(KINDS))
def test_a_vanished_job_that_others_wait_on_is_passed_over(app, clock, on):
    """The victim (a head, a slot holder, a gate's slot holder, a flow's parent) loses its
    record while in flight; its lease ends, the sweeps go on: the waiter runs (or, behind a
    parent under the flow policy 'fail', is given up with its flow)."""
    case = SCENARIOS[KINDS[on]](app)
    q = case.q
    jobs = q.reserve("w1", count=50)
    assert case.victim in [j.id for j in jobs]
    q.redis.delete(q.keys.job(case.victim))
    q.ack_many([(j, None) for j in jobs if j.id != case.victim])
    settle_all(q, clock, rounds=10)
    waiter = states(q, [case.waiter])
    assert waiter == (["gone"] if on == "flow" else ["done"])
    stats = q.stats()
    report = [json.loads(e) for e in q.redis.lrange(q.keys.quarantine, 0, -1)]
    assert stats.get("abandoned", 0) >= 1, stats
    assert any(e.get("abandoned") and e["id"] == case.victim for e in report), report
    if on == "flow":
        flow = app.flows.flow(q.redis.hget(q.keys.job(case.waiter), "flow") or "") \
            if q.redis.exists(q.keys.job(case.waiter)) else None
        assert flow is None


def test_a_vanished_head_is_an_incident_listed_by_status_and_find(
        app, clock, r, monkeypatch, redis_url, capsys):
    from antre.observe.alerts import AlertConfig, AlertEngine
    from antre_cli.main import main

    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    case = SCENARIOS["turns"](app)
    q = case.q
    rule = [x for x in AlertConfig().rules() if x.name == "abandoned_records"]
    engine = AlertEngine(r, clock, rule)
    assert engine.check() == []
    jobs = q.reserve("w1", count=50)
    r.delete(q.keys.job(case.victim))
    q.ack_many([(j, None) for j in jobs if j.id != case.victim])
    clock.advance(60_000)
    q.sweep()  # the head's lease ended; its record is gone: the turn passes
    assert q.where(case.waiter) == ["ready"]
    clock.advance(1_000)
    [event] = engine.check()
    assert (event.rule, event.queue, event.status) == ("abandoned_records", q.name, "firing")
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "abandoned records:" in out and case.victim in out
    assert main(["find", case.victim]) == 0
    assert "its turn passed" in capsys.readouterr().out
