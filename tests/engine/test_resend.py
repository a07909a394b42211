"""``scripts.Resend``, the rounds of a pipelined send that ``Batch.execute`` and the asyncio
producer's ``aio.send`` share: the calls a server without their script refused (NOSCRIPT) are
sent once more after their script is loaded once; a second refusal is an error, not a loop."""

from __future__ import annotations

import pytest
from redis.exceptions import NoScriptError

from antre.engine.scripts import Resend


class Script:  # only its identity matters to the rounds
    script, sha = "return 1", "0" * 40


def test_refused_calls_go_again_with_their_script_loaded_once():
    s, t = Script(), Script()
    rounds = Resend([s, None, s, t])
    assert rounds.pending == [0, 1, 2, 3]
    to_load = rounds.take([NoScriptError("x"), "plain", NoScriptError("x"), 7])
    assert to_load == [s] and rounds.pending == [0, 2]
    assert rounds.take([1, 2]) == [] and rounds.pending == []
    assert rounds.replies_or_raise() == [1, "plain", 2, 7]


def test_a_second_refusal_is_raised_not_sent_a_third_time():
    s = Script()
    rounds = Resend([s])
    rounds.take([NoScriptError("first")])
    assert rounds.take([NoScriptError("again")]) == [] and rounds.pending == []
    with pytest.raises(NoScriptError, match="again"):
        rounds.replies_or_raise()
