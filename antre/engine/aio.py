"""The producer's calls on ``redis.asyncio``: the same scripts, keys and arguments as the
synchronous enqueue (``Queue.enqueue_call`` / ``Queue.enqueue_many_calls`` build them), sent
in one pipelined round trip per call of ``aenqueue`` / ``aenqueue_many``.

A server that lost its scripts (a restart, ``SCRIPT FLUSH``, ``FUNCTION FLUSH``) refuses
them (NOSCRIPT, "Function not found"): the library or the script is loaded and only those
calls are sent again, in the rounds ``scripts.Batch`` takes too
(``scripts.Resend``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio

from antre.engine.scripts import Call, Resend, aload, script_command


async def send(client: "redis.asyncio.Redis", calls: Sequence[Call]) -> list[Any]:
    """Every call's reply, in order; the first error reply raised."""
    rounds = Resend([call[0] for call in calls])
    while rounds.pending:
        pipe = client.pipeline(transaction=False)
        for i in rounds.pending:
            script, words, args = calls[i]
            if script is None:
                pipe.execute_command(*words)
            else:
                pipe.execute_command(*script_command(script, words, args))
        for script in rounds.take(await pipe.execute(raise_on_error=False)):
            await aload(client, script, rounds.why[id(script)])
    return rounds.replies_or_raise()
