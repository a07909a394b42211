"""Whether Redis may evict Antre's keys: ``memory_policy(client)`` reads ``maxmemory-policy``
(``CONFIG GET``; on a managed Redis where CONFIG is disabled, ``INFO memory``; else "unknown")
and ``maxmemory``. Any policy but ``noeviction`` lets Redis delete jobs silently when it is full:
the worker logs a WARNING, the overview page shows a banner and ``antre status`` says so."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import redis

SAFE_POLICY = "noeviction"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class MemoryPolicy:
    """``policy`` as Redis names it (or "unknown"); ``maxmemory_bytes`` 0 means no limit
    (None: unknown); ``used_bytes`` from ``INFO memory`` (None: unknown); ``source``: "config",
    "info" or "none"; ``evicts``: whether Redis may delete keys when full."""
    policy: str
    maxmemory_bytes: int | None
    used_bytes: int | None
    source: str
    evicts: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "evicts", self.policy not in (SAFE_POLICY, UNKNOWN))

    @property
    def warning(self) -> str | None:
        """What to tell the operator, or None when the policy is ``noeviction``."""
        if self.evicts:
            return (f"Redis maxmemory-policy is {self.policy}: when Redis is full it deletes "
                    f"keys, and jobs are lost without a trace. Set maxmemory-policy "
                    f"{SAFE_POLICY} (and a maxmemory that fits the retention; see the README, "
                    f"\"Sizing Redis\")")
        if self.policy == UNKNOWN:
            return (f"Redis maxmemory-policy could not be read (CONFIG and INFO refused): make "
                    f"sure it is {SAFE_POLICY}, or a full Redis deletes jobs silently")
        return None


def memory_policy(client: "redis.Redis") -> MemoryPolicy:
    """The eviction policy and memory figures of ``client``'s server. Raises only when Redis
    is unreachable (``redis.ConnectionError`` / ``TimeoutError``)."""
    info = _info_memory(client)
    used = _int(info.get("used_memory")) if info else None
    try:
        conf = cast(dict[str, Any], client.config_get("maxmemory*"))
    except redis.ResponseError:  # CONFIG renamed or refused (managed Redis)
        conf = {}
    if conf.get("maxmemory-policy"):
        return MemoryPolicy(str(conf["maxmemory-policy"]), _int(conf.get("maxmemory")), used,
                            "config")
    if info and info.get("maxmemory_policy"):
        return MemoryPolicy(str(info["maxmemory_policy"]), _int(info.get("maxmemory")), used,
                            "info")
    return MemoryPolicy(UNKNOWN, None, used, "none")


def _info_memory(client: "redis.Redis") -> dict[str, Any]:
    try:
        return client.info("memory")
    except redis.ResponseError:
        return {}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


__all__ = ["MemoryPolicy", "memory_policy", "SAFE_POLICY", "UNKNOWN"]
