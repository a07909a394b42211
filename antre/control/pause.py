"""Pause and resume a queue, or one job type within it (incident controls).

The state is one HASH per queue (``QueueKeys.paused``: ``'*'`` for the whole queue, or a job
type, -> JSON ``{by, at, reason}``), read by ``reserve.lua`` on every reserve, so a pause holds
across every worker host at once and survives restarts of workers and dashboards. Enqueue,
scheduling, promotion of due jobs and the sweeper go on; jobs in flight finish.

Why job types are parked and not filtered: the ready list is one FIFO for all types, so a
paused type's jobs at its oldest end would block every other type if reserve left them there,
and looking past them on every reserve would be a scan. Instead reserve moves each paused-type
job it pops, untouched (no lease, no delivery, no attempt spent), to a parked LIST of its type
and pops another in its place: each job is moved once per pause, so the cost is O(1) per job,
bounded per reserve call. Resuming the type moves the parked list back to the oldest end of
ready in bounded chunks (``unpark.lua``), oldest first. The sweeper duty calls
``unpark_stale`` so a resume interrupted half-way still gives every job back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import cast

import redis

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.groups.read import GROUP_TARGET  # 'group=<name>': '=' is in no job type
from antre.observe.readmodels import PauseInfo, ReadModels, pause_infos
from antre.engine.scripts import Scripts

UNPARK_CHUNK = 1000
MAX_REASON = 2000
WHOLE_QUEUE = "*"


class PauseError(ValueError):
    """A pause or resume that was refused; the message says what to do."""


class Pauses:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)

    def pause(self, queue: str, job_type: str | None, by: str, reason: str) -> PauseInfo:
        """Pause ``queue`` (``job_type`` None) or one job type of it; raises ``PauseError``
        when it is already paused or the reason is empty."""
        reason = _check(queue, job_type, reason)
        now = self.clock()
        state = json.dumps({"by": by, "at": now, "reason": reason})
        every = partitions.all_keys(self.redis, queue)  # each partition's reserve reads its own
        changed = self._set(every[0], job_type or WHOLE_QUEUE, "pause", state)
        if not changed:
            raise PauseError(f"{_what(queue, job_type)} is already paused; resume it first")
        for k in every[1:]:
            self._set(k, job_type or WHOLE_QUEUE, "pause", state)
        return PauseInfo(queue, job_type, by, now, reason)

    def _set(self, k: keys.QueueKeys, target: str, what: str, state: str) -> bool:
        return bool(int(self.scripts.pause_set(keys=[k.paused, k.stats],
                                               args=[target, what, state])))

    def sync(self, queue: str) -> int:
        """Give every partition of ``queue`` partition 0's pauses (a partition grown after a
        pause, a pause or resume stopped half-way); the sweeper duty calls it. Returns how
        many pauses or resumes it wrote."""
        every = partitions.all_keys(self.redis, queue)
        if len(every) == 1:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            pipe.hgetall(k.paused)
        first, *others = cast(list[dict[str, str]], pipe.execute())
        wrote = 0
        for k, have in zip(every[1:], others):
            for target, state in first.items():
                if target not in have:
                    wrote += self._set(k, target, "pause", state)
            for target in have.keys() - first.keys():
                wrote += self._set(k, target, "resume", "")
        return wrote

    def resume(self, queue: str, job_type: str | None) -> int:
        """Resume; returns how many parked jobs went back to ready. Raises ``PauseError``
        when it was not paused."""
        _check(queue, job_type, "-")
        every = partitions.all_keys(self.redis, queue)
        changed = self._set(every[0], job_type or WHOLE_QUEUE, "resume", "")
        if not changed:
            raise PauseError(f"{_what(queue, job_type)} is not paused")
        for k in every[1:]:
            self._set(k, job_type or WHOLE_QUEUE, "resume", "")
        return self.unpark_stale(queue)

    # -- one group: its jobs are parked by reserve as a paused type's are ---------------------
    def pause_group(self, queue: str, group: str, by: str, reason: str) -> PauseInfo:
        """Pause one fair-share group of ``queue`` (one tenant): reserve parks its ready jobs
        untouched; its running jobs finish. Raises ``PauseError`` when it is paused already."""
        return self.pause(queue, group_target(group), by, reason)

    def resume_group(self, queue: str, group: str) -> int:
        """Resume one group; returns how many of its parked jobs went back to ready."""
        return self.resume(queue, group_target(group))

    def get(self, queue: str, job_type: str | None) -> PauseInfo | None:
        raw = self.redis.hget(keys.QueueKeys(queue).paused, job_type or WHOLE_QUEUE)
        if raw is None:
            return None
        return pause_infos(queue, {job_type or WHOLE_QUEUE: str(raw)})[0]

    def of_queue(self, queue: str) -> list[PauseInfo]:
        raw = cast(dict[str, str], self.redis.hgetall(keys.QueueKeys(queue).paused))
        return pause_infos(queue, raw)

    def all(self) -> list[PauseInfo]:
        """Every pause of every known queue (one HGETALL per queue)."""
        return [p for name in ReadModels(self.redis, self.clock).queue_names()
                for p in self.of_queue(name)]

    def unpark(self, queue: str, job_type: str, chunk: int = UNPARK_CHUNK) -> int:
        """Move ``job_type``'s parked jobs back to ready unless it is paused (again), in
        every partition."""
        return sum(self._unpark(k, job_type, chunk)
                   for k in partitions.all_keys(self.redis, queue))

    def _unpark(self, k: keys.QueueKeys, job_type: str, chunk: int) -> int:
        moved = 0
        while True:
            ids, jobs = self.scripts.unpark(
                keys=[k.parked(job_type), k.ready, k.wake, k.paused, k.parked_types],
                args=[job_type, chunk])
            moved += max(0, int(jobs))
            if int(ids) < chunk:  # the list is empty now, or the type is paused again
                return moved

    def unpark_stale(self, queue: str) -> int:
        """Parked lists of types that are no longer paused go back to ready (after a resume,
        and from the sweeper duty in case a resume stopped half-way)."""
        return sum(self._unpark(k, t, UNPARK_CHUNK)
                   for k in partitions.all_keys(self.redis, queue)
                   for t in sorted(cast(set[str], self.redis.smembers(k.parked_types))))


def group_target(group: str) -> str:
    if not keys.valid_name(group):
        raise PauseError(f"bad group {group!r}: use 1-100 of A-Z a-z 0-9 _ . : - (e.g. tenant:7)")
    return GROUP_TARGET + group


def _what(queue: str, job_type: str | None) -> str:
    if job_type is not None and job_type.startswith(GROUP_TARGET):
        return f"group {job_type[len(GROUP_TARGET):]} in queue {queue}"
    return f"queue {queue}" if job_type is None else f"job type {job_type} in queue {queue}"


def _check(queue: str, job_type: str | None, reason: str) -> str:
    if not keys.valid_name(queue):
        raise PauseError(f"bad queue name {queue!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    if job_type is not None and job_type.startswith(GROUP_TARGET):
        group_target(job_type[len(GROUP_TARGET):])
    elif job_type is not None and (job_type == WHOLE_QUEUE or not keys.valid_name(job_type)):
        raise PauseError(f"bad job type {job_type!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    reason = (reason or "").strip()[:MAX_REASON]
    if not reason:
        raise PauseError("a reason is required: say why (it is shown in the paused banner)")
    return reason


def unknown_target(client: "redis.Redis", queue: str, job_type: str | None,
                   handler_queues: Mapping[str, str], app_queues: Iterable[str]) -> str | None:
    """What to tell an operator who named a queue (or a job type in it) that does not exist:
    neither seen in Redis nor served by a handler (``handler_queues``: job type -> queue).
    None when it is known."""
    reads = ReadModels(client)
    queues = set(reads.queue_names()) | set(app_queues)
    if queue not in queues:
        return f"no queue {queue!r}; known queues: {', '.join(sorted(queues)) or 'none yet'}"
    if job_type is None:
        return None
    types = set(reads.dead_types(queue)) | {t for t, q in handler_queues.items() if q == queue}
    if job_type not in types:
        return (f"no job type {job_type!r} in queue {queue}; known types: "
                f"{', '.join(sorted(types)) or 'none yet'}")
    return None
