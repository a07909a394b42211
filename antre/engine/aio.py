"""The producer's calls on ``redis.asyncio``: the same scripts, keys and arguments as the
synchronous enqueue (``Queue.enqueue_call`` / ``Queue.enqueue_many_calls`` build them), sent
in one pipelined round trip per call of ``aenqueue`` / ``aenqueue_many``.

A server that lost its scripts (a restart, ``SCRIPT FLUSH``) answers NOSCRIPT: the script is
loaded and only those calls are sent again, as ``scripts.Batch`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError

from antre.engine.scripts import Call


async def send(client: "redis.asyncio.Redis", calls: Sequence[Call]) -> list[Any]:
    """Every call's reply, in order; the first error reply raised."""
    replies: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    for attempt in (1, 2):
        pipe = client.pipeline(transaction=False)
        for i in pending:
            script, words, args = calls[i]
            if script is None:
                pipe.execute_command(*words)
            else:
                pipe.evalsha(script.sha, len(words), *words, *args)
        out = await pipe.execute(raise_on_error=False)
        missing = [i for i, reply in zip(pending, out)
                   if attempt == 1 and isinstance(reply, NoScriptError)]
        for i, reply in zip(pending, out):
            if i not in missing:
                replies[i] = reply
        if not missing:
            break
        for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
            assert script is not None
            script.sha = await client.script_load(script.script)
        pending = missing
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies
