"""Loads the Lua scripts shipped in ``antre/lua`` (one file per atomic transition).

``_lib.lua`` holds helpers shared by several scripts; it is prepended to each script so every
transition stays one self-contained EVALSHA.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import redis

NAMES = (
    "enqueue", "reserve", "ack", "retry", "bury", "extend_lease", "promote_due",
    "sweep_expired", "replay", "discard", "run_now", "lock_acquire", "lock_release",
    "lock_renew", "checkpoint",
    # flow control (antre/flow.py)
    "sem_acquire", "sem_release", "rate_take", "breaker_allow", "breaker_success",
    "breaker_failure", "breaker_release",
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
    checkpoint: redis.commands.core.Script
    sem_acquire: redis.commands.core.Script
    sem_release: redis.commands.core.Script
    rate_take: redis.commands.core.Script
    breaker_allow: redis.commands.core.Script
    breaker_success: redis.commands.core.Script
    breaker_failure: redis.commands.core.Script
    breaker_release: redis.commands.core.Script
