"""Live control of fair-share groups: pause and resume one group, override its slots
(how many of its jobs may be ready or running at once) and/or its rate with a reason, until
cleared or for a while. Both live in Redis in the queue's slot and are read by the scripts on every enqueue,
ack and reserve, so they hold on every worker host at once. Like every control here, none of
this knows who asked or audits: the dashboard, the API and the CLI do.

A group's pause is a pause like a job type's (``antre.control.pause.Pauses``, a room above
this one): the caller hands it in as ``pauses`` (``GroupPauses``)."""

from __future__ import annotations

import json
from typing import Any, Protocol, cast

import redis

from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.engine.envelope import MAX_GROUP_CONCURRENCY, format_rate
from antre.engine.scripts import Scripts
from antre.groups.read import GroupOverride
from antre.limits.overrides import checked_override


class GroupError(ValueError):
    """A group action that was refused; the message says what to pass."""


class GroupPauses(Protocol):
    """What a group's pause and resume need (``antre.control.pause.Pauses`` is one); a refusal
    raises a ``ValueError`` saying why."""

    def pause_group(self, queue: str, group: str, by: str, reason: str) -> Any: ...

    def resume_group(self, queue: str, group: str) -> int: ...


class GroupControl:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 scripts: Scripts | None = None, pauses: GroupPauses | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)
        self.pauses = pauses

    def _pauses(self) -> GroupPauses:
        if self.pauses is None:
            raise GroupError("this GroupControl was made without pauses: pass "
                             "pauses=antre.control.pause.Pauses(...)")
        return self.pauses

    def pause(self, queue: str, group: str, by: str, reason: str) -> None:
        try:
            self._pauses().pause_group(queue, group, by, reason)
        except GroupError:
            raise
        except ValueError as exc:
            raise GroupError(str(exc)) from exc

    def resume(self, queue: str, group: str) -> int:
        """Returns how many of its parked jobs went back to ready."""
        try:
            return self._pauses().resume_group(queue, group)
        except GroupError:
            raise
        except ValueError as exc:
            raise GroupError(str(exc)) from exc

    def set_slots(self, queue: str, group: str, slots: int, by: str, reason: str,
                  revert_after_s: float | None = None) -> GroupOverride:
        """Override ``group``'s slots (0 holds it: none of its waiting jobs starts); see
        ``set_override``."""
        return self.set_override(queue, group, by, reason, slots=slots,
                                 revert_after_s=revert_after_s)

    def set_override(self, queue: str, group: str, by: str, reason: str, *,
                     slots: int | None = None, rate: str | None = None,
                     revert_after_s: float | None = None) -> GroupOverride:
        """Override ``group``'s slots (0 holds it) and/or its rate ('10/s': replaces its jobs'
        group_rate, or gives a group a rate its jobs do not name); with ``revert_after_s`` the
        override ends by itself then. The override is one record: setting it again replaces
        both. A raise starts waiting jobs at once; the start the group's rate gave ahead is
        given again under the new rate."""
        _check(queue, group)
        rate_value, reason = checked_override(
            slots, rate, reason, MAX_GROUP_CONCURRENCY, revert_after_s, error=GroupError,
            holds="holds the group", hold="hold the group", page="Groups")
        until = 0
        if revert_after_s is not None:
            until = self.clock() + int(float(revert_after_s) * 1000)
        now = self.clock()
        shown = format_rate(rate_value) if rate_value else ""
        record = GroupOverride(slots, by, reason, now, until, shown)
        value = f"{'' if slots is None else slots}|{until}|{rate_value}"
        self._call(queue, group, value, json.dumps(
            {"slots": slots, "rate": shown, "by": by, "reason": reason, "at": now,
             "until_ms": until}))
        return record

    def clear_slots(self, queue: str, group: str) -> int:
        """End the override (slots and rate); returns the slots in force now (the group's
        own)."""
        _check(queue, group)
        return self._call(queue, group, "", "")

    def revert_due(self, queue: str) -> int:
        """End the overrides whose time is up (a raise they held back starts waiting jobs);
        returns how many. The scripts already ignore them; this frees what they held."""
        now, ended = self.clock(), 0
        overrides: dict[str, str] = {}
        for k in partitions.all_keys(self.redis, queue):
            overrides.update(cast(dict[str, str], self.redis.hgetall(k.group_overrides)))
        for group, raw in overrides.items():
            try:
                until = int(json.loads(raw).get("until_ms", 0))
            except (ValueError, AttributeError, TypeError):
                until = 1  # unreadable: ended
            if until and until <= now:
                self._call(queue, str(group), "", "")
                ended += 1
        return ended

    def _call(self, queue: str, group: str, value: str, record: str) -> int:
        k = partitions.keys_of_key(self.redis, queue, group)  # the group's partition
        return int(self.scripts.group_limit(keys=[k.group_limits, k.group_overrides],
                                            args=[k.job_prefix, group, value, record,
                                                  self.clock()]))


def _check(queue: str, group: str) -> None:
    if not keys.valid_name(queue):
        raise GroupError(f"bad queue name {queue!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    if not keys.valid_name(group):
        raise GroupError(f"bad group {group!r}: use 1-100 of A-Z a-z 0-9 _ . : - (e.g. tenant:7)")
