"""A job's attempt as a reader counts them: from 1, 'not run yet' before the first."""

from __future__ import annotations

from antre.engine import states
from antre.engine.states import attempt_text


def test_attempts_count_from_one_and_none_is_not_run_yet():
    assert attempt_text(states.READY, 0, 5) == "not run yet"
    assert attempt_text(states.HELD, 0) == "not run yet"
    assert attempt_text(states.INFLIGHT, 0, 5) == "attempt 1/5"
    assert attempt_text(states.DONE, 2) == "attempt 3"
    assert attempt_text(states.SCHEDULED, 1) == "1 attempt spent"
    assert attempt_text(states.DEAD, 5, 5) == "5/5 attempts spent"
