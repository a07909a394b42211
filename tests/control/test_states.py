"""The shared ``populated`` queue (``conftest.py``): each state holds what it should, and a
one-job delete takes only what is waiting (ready, scheduled), never a running, dead or done job."""

from __future__ import annotations

import pytest

from antre.control.purge import PurgeError, Purger
from antre.observe.readmodels import ReadModels


def test_every_state_holds_its_jobs(q, clock, populated):
    info = ReadModels(q.redis, clock).queue_info("jobs")
    assert (info.ready, info.scheduled, info.inflight, info.dead, info.done) == (2, 2, 2, 2, 2)
    for state, ids in populated.items():
        assert {q.redis.hget(f"{q.keys.job(i)}", "state") for i in ids} == {state}, state


@pytest.mark.parametrize("state", ["inflight", "dead", "done"])
def test_delete_refuses_what_is_not_waiting(q, clock, populated, state):
    purger = Purger(q.redis, clock)
    with pytest.raises(PurgeError, match=f"it is {state}"):
        purger.delete("jobs", populated[state][0])


@pytest.mark.parametrize("state", ["ready", "scheduled"])
def test_delete_takes_a_waiting_job(q, clock, populated, state):
    assert Purger(q.redis, clock).delete("jobs", populated[state][0]) == state
    assert getattr(ReadModels(q.redis, clock).queue_info("jobs"), state) == 1
