"""Retention, so Redis (run with ``noeviction``) never fills up: per queue, dead jobs kept up to
a maximum count and age (oldest dropped first, counted as ``dead_dropped``), done jobs' records
dropped after their retention, error groups with no dead job left removed; finished flows go
with the done jobs' retention, failed and waiting ones with the dead jobs' age (their held
jobs discarded with them, counted as ``flow_held_dropped``). The worker's
``retention`` duty runs it (``worker/antre_worker/duties.py``) with the SQL side: sent outbox rows and old
audit entries pruned.

Every pass is chunked: one script call drops at most ``chunk`` jobs (``antre/engine/lua/retention.lua``)
and error groups are checked ``chunk`` at a time (HSCAN), so no Redis command runs long.

Defaults (environment, or ``Antre.retention(queue, ...)`` per queue):
``ANTRE_DEAD_MAX_JOBS`` 100000, ``ANTRE_DEAD_MAX_AGE_S`` 30 days, ``ANTRE_DONE_RETENTION_S`` 1 hour.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import redis

import antre.settings as settings
from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.errors import InvalidJob
from antre.observe.readmodels import RetentionInfo
from antre.engine.scripts import Scripts

DAY_S = 86_400
CHUNK = 500
MAX_CHUNKS = 200  # per queue per pass: at most 100,000 jobs dropped, the rest next pass


@dataclass(frozen=True)
class RetentionPolicy:
    dead_max_jobs: int = settings.DEAD_MAX_JOBS.default
    dead_max_age_s: int = settings.DEAD_MAX_AGE_S.default
    done_max_age_s: int = settings.DONE_RETENTION_S.default

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidJob(f"retention {f.name} must be a whole number of at least 1, "
                                 f"not {value!r}")

    def describe(self) -> str:
        """'keeps 30 days / 100,000 jobs'."""
        return f"keeps {_age(self.dead_max_age_s)} / {self.dead_max_jobs:,} jobs"


def _age(seconds: int) -> str:
    for unit, size in (("day", DAY_S), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'}"
    return f"{seconds} s"


def policy_from_env(environ: Any = None) -> RetentionPolicy:
    """The ``ANTRE_DEAD_MAX_JOBS``, ``ANTRE_DEAD_MAX_AGE_S`` and ``ANTRE_DONE_RETENTION_S``
    settings (``environ``: the process environment unless given); ``SettingError`` on a bad
    one."""
    return RetentionPolicy(dead_max_jobs=settings.DEAD_MAX_JOBS.get(environ),
                           dead_max_age_s=settings.DEAD_MAX_AGE_S.get(environ),
                           done_max_age_s=settings.DONE_RETENTION_S.get(environ))


@dataclass(frozen=True)
class SqlRetention:
    """How long sent outbox rows and audit entries are kept (the retention duty prunes)."""

    outbox_sent_s: int = settings.OUTBOX_SENT_RETENTION_S.default
    audit_s: int = settings.AUDIT_RETENTION_S.default

    @classmethod
    def from_env(cls, environ: Any = None) -> "SqlRetention":
        """The ``ANTRE_OUTBOX_SENT_RETENTION_S`` and ``ANTRE_AUDIT_RETENTION_S`` settings."""
        return cls(settings.OUTBOX_SENT_RETENTION_S.get(environ),
                   settings.AUDIT_RETENTION_S.get(environ))


@dataclass(frozen=True)
class RetentionResult:
    dead_dropped: int = 0
    done_dropped: int = 0
    groups_removed: int = 0
    flow_steps: int = 0  # flows dropped and jobs of trimmed flows looked at

    def __add__(self, other: "RetentionResult") -> "RetentionResult":
        return RetentionResult(self.dead_dropped + other.dead_dropped,
                               self.done_dropped + other.done_dropped,
                               self.groups_removed + other.groups_removed,
                               self.flow_steps + other.flow_steps)


class Retention:
    """Runs a queue's retention and publishes the policy in force for the dashboard."""

    def __init__(self, client: "redis.Redis", *, clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)

    def publish(self, queue: str, policy: RetentionPolicy) -> None:
        self.redis.hset(keys.retention_policies(), queue, json.dumps(asdict(policy)))

    def policy(self, queue: str) -> RetentionPolicy:
        """The policy the retention duty last applied to ``queue`` (else the defaults)."""
        raw = self.redis.hget(keys.retention_policies(), queue)
        try:
            return RetentionPolicy(**json.loads(str(raw))) if raw else RetentionPolicy()
        except (ValueError, TypeError, InvalidJob):
            return RetentionPolicy()

    def info(self, queue: str) -> RetentionInfo:
        policy = self.policy(queue)
        dropped = sum(int(str(self.redis.hget(k.stats, "dead_dropped") or 0))
                      for k in partitions.all_keys(self.redis, queue))
        return RetentionInfo(queue, policy.dead_max_jobs, policy.dead_max_age_s,
                             policy.done_max_age_s, dropped, policy.describe())

    def run(self, queue: str, policy: RetentionPolicy, chunk: int = CHUNK) -> RetentionResult:
        """Drop what is past the policy, ``chunk`` jobs per script call, in each partition
        (a partitioned queue's ``dead_max_jobs`` is split: ceil(max / N) per partition)."""
        self.publish(queue, policy)
        every = partitions.all_keys(self.redis, queue)
        if len(every) > 1:
            policy = replace(policy, dead_max_jobs=-(-policy.dead_max_jobs // len(every)))
        total = RetentionResult()
        for k in every:
            for _ in range(MAX_CHUNKS):
                step = self._call(k, policy, chunk, [])
                total += step
                if step.dead_dropped + step.done_dropped + step.flow_steps < chunk:
                    break
            total += self._empty_groups(k, policy, chunk)
        return total

    def _empty_groups(self, k: keys.QueueKeys, policy: RetentionPolicy,
                      chunk: int) -> RetentionResult:
        """Error groups whose jobs were all replayed, discarded or dropped: checked a chunk at a
        time (HSCAN), removed by the script when their index is empty."""
        total = RetentionResult()
        cursor = 0
        while True:
            cursor, found = self.redis.hscan(k.error_groups, cursor, count=chunk)
            groups = [str(g) for g in found]
            if groups:
                total += self._call(k, policy, 0, groups)
            if cursor == 0:
                return total

    def _call(self, k: keys.QueueKeys, policy: RetentionPolicy, chunk: int,
              groups: list[str]) -> RetentionResult:
        reply = self.scripts.retention(
            keys=[k.dead, k.done, k.stats, k.error_groups],
            args=[k.job_prefix, self.clock(), policy.dead_max_jobs, policy.dead_max_age_s * 1000,
                  policy.done_max_age_s * 1000, chunk, k.dead_type_prefix, k.dead_group_prefix,
                  *groups])
        return RetentionResult(int(reply[0]), int(reply[1]), int(reply[2]), int(reply[3]))
