"""Loads the Lua scripts shipped in ``antre/lua`` (one file per atomic transition).

``_lib.lua`` holds helpers shared by several scripts; it is prepended to each script so every
transition stays one self-contained EVALSHA.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

NAMES = (
    "enqueue", "reserve", "ack", "ack_many", "retry", "bury", "extend_lease", "promote_due",
    "sweep_expired", "replay", "discard", "run_now", "lock_acquire", "lock_release",
    "lock_renew", "lock_fence_raise", "lock_conflict", "lock_contention", "checkpoint",
    # flow control (antre/flow.py)
    "sem_acquire", "sem_release", "rate_take", "breaker_allow", "breaker_success",
    "breaker_failure", "breaker_release",
    # login throttling (antre/logins.py)
    "failure_add",
    # incident controls (antre/pause.py, antre/purge.py)
    "pause_set", "unpark", "purge", "cancel_request", "cancel_finish",
    # retention (antre/retention.py)
    "retention",
)


@lru_cache(maxsize=None)
def source(name: str) -> str:
    files = resources.files("antre.lua")
    lib = files.joinpath("_lib.lua").read_text()
    return lib + "\n" + files.joinpath(f"{name}.lua").read_text()


class Scripts:
    """The registered scripts of one Redis client (redis-py re-loads them after NOSCRIPT)."""

    def __init__(self, client: "redis.Redis") -> None:
        for name in NAMES:
            setattr(self, name, client.register_script(source(name)))

    enqueue: redis.commands.core.Script
    reserve: redis.commands.core.Script
    ack: redis.commands.core.Script
    ack_many: redis.commands.core.Script
    retry: redis.commands.core.Script
    bury: redis.commands.core.Script
    extend_lease: redis.commands.core.Script
    promote_due: redis.commands.core.Script
    sweep_expired: redis.commands.core.Script
    replay: redis.commands.core.Script
    discard: redis.commands.core.Script
    run_now: redis.commands.core.Script
    lock_acquire: redis.commands.core.Script
    lock_release: redis.commands.core.Script
    lock_renew: redis.commands.core.Script
    lock_fence_raise: redis.commands.core.Script
    lock_conflict: redis.commands.core.Script
    lock_contention: redis.commands.core.Script
    checkpoint: redis.commands.core.Script
    sem_acquire: redis.commands.core.Script
    sem_release: redis.commands.core.Script
    rate_take: redis.commands.core.Script
    breaker_allow: redis.commands.core.Script
    breaker_success: redis.commands.core.Script
    breaker_failure: redis.commands.core.Script
    breaker_release: redis.commands.core.Script
    failure_add: redis.commands.core.Script
    pause_set: redis.commands.core.Script
    unpark: redis.commands.core.Script
    purge: redis.commands.core.Script
    cancel_request: redis.commands.core.Script
    cancel_finish: redis.commands.core.Script
    retention: redis.commands.core.Script


class Batch:
    """Commands and scripts sent to Redis in one round trip (a non-transactional pipeline).

    redis-py's own pipelines ask ``SCRIPT EXISTS`` before every execution that holds a script,
    one more round trip each time; a batch sends ``EVALSHA`` straight away instead. If a script
    is missing (the server restarted or its script cache was flushed) its calls come back
    ``NOSCRIPT`` without having run: the batch loads the script and sends only those calls
    again. On a Redis Cluster (where redis-py refuses ``EVALSHA`` in pipelines) every call is
    sent on its own. ``execute()`` returns the replies in order and raises the first error.
    """

    def __init__(self, client: "redis.Redis") -> None:
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self._calls: list[tuple[Script | None, str, tuple[Any, ...], dict[str, Any]]] = []

    def script(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> "Batch":
        self._calls.append((script, "", (list(keys), list(args)), {}))
        return self

    def command(self, name: str, *args: Any, **kwargs: Any) -> "Batch":
        """A redis-py command by its method name: ``batch.command("zadd", key, {m: s})``."""
        self._calls.append((None, name, args, kwargs))
        return self

    def __len__(self) -> int:
        return len(self._calls)

    def execute(self) -> list[Any]:
        calls, self._calls = self._calls, []
        if self.cluster:
            return [script(keys=a[0], args=a[1]) if script is not None
                    else getattr(self.client, name)(*a, **kw) for script, name, a, kw in calls]
        replies: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        for attempt in (1, 2):
            pipe = self.client.pipeline(transaction=False)
            for i in pending:
                script, name, a, kw = calls[i]
                if script is not None:
                    pipe.evalsha(script.sha, len(a[0]), *a[0], *a[1])
                else:
                    getattr(pipe, name)(*a, **kw)
            out = pipe.execute(raise_on_error=False)
            missing = []
            for i, reply in zip(pending, out):
                if attempt == 1 and isinstance(reply, NoScriptError):
                    missing.append(i)
                else:
                    replies[i] = reply
            if not missing:
                break
            loaded: set[int] = set()
            for i in missing:
                script = calls[i][0]
                if script is not None and id(script) not in loaded:
                    loaded.add(id(script))
                    script.sha = self.client.script_load(script.script)
            pending = missing
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies


# one call of ``direct``: (script, keys, args), or (None, a raw command's words, ())
Call = tuple["Script | None", Sequence[Any], Sequence[Any]]


def direct_ok(client: "redis.Redis") -> bool:
    """Whether ``direct`` may be used: not on a cluster or a single-connection client."""
    return not isinstance(client, RedisCluster) and client.connection is None


def direct(client: "redis.Redis", calls: Sequence[Call]) -> list[Any]:
    """Scripts and raw commands written to one pooled connection at once (one round trip);
    returns the replies in order and raises the first error once all are read. The hot paths'
    way (a single enqueue; a wait for work with the reserve behind it): a third of a redis-py
    pipeline's client time (no pipeline object, no per-command bookkeeping). The connection's
    retry policy applies as it does to any command. ``NOSCRIPT``: the script is loaded and only
    the script calls are sent again (a blocking pop before them is not repeated). Callers
    check ``direct_ok`` first."""
    pool = client.connection_pool
    conn: Any = pool.get_connection()
    try:
        return cast(list[Any], conn.retry.call_with_retry(
            lambda: _direct(client, conn, calls), lambda error: conn.disconnect()))
    finally:
        pool.release(conn)


def script_and_command(client: "redis.Redis", script: Script, keys: Sequence[Any],
                       args: Sequence[Any], command: Sequence[Any]) -> Any:
    """One script call and one plain command (``("SADD", key, member)``) in one round trip;
    returns the script's reply (the single enqueue). Clients ``direct`` cannot use go through
    ``Batch``."""
    if not direct_ok(client):
        return Batch(client).script(script, keys, args).command(
            str(command[0]).lower(), *command[1:]).execute()[0]
    return direct(client, [(script, keys, args), (None, command, ())])[0]


def _direct(client: "redis.Redis", conn: Any, calls: Sequence[Call]) -> list[Any]:
    replies = _write_read(conn, calls)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:  # the server lost its scripts (restart, SCRIPT FLUSH): load, send those again
        for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
            assert script is not None
            script.sha = client.script_load(script.script)
        for i, reply in zip(missing, _write_read(conn, [calls[i] for i in missing])):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _write_read(conn: Any, calls: Sequence[Call]) -> list[Any]:
    conn.send_packed_command(conn.pack_commands([
        tuple(words) if script is None else ("EVALSHA", script.sha, len(words), *words, *args)
        for script, words, args in calls]))
    return [_reply(conn) for _ in calls]  # read every reply: the connection stays in step


def _reply(conn: Any) -> Any:
    try:
        return conn.read_response()
    except ResponseError as exc:  # NoScriptError is one; a connection error propagates
        return exc
