"""What changed: one timeline of the changes an on-call engineer asks about first, each at its
time, read from where each already lives (bounded reads, no scan).

- ``deploy``: a worker process started on a code version no start before it had (its version
  first seen), and ``worker_start``: any other start; from ``WorkerRegistry.starts`` (each
  process reports its package version and its code version, ``ANTRE_CODE_VERSION`` or a
  digest of its handlers, at start).
- ``group_limit``: an operator's override of a group's slots or rate in force
  (``QueueKeys.group_overrides``, the time it was set).
- ``limit``: an override of a job type's or a downstream's limits in force
  (``QueueKeys.gate_override_records``).
- ``pause``: a queue, job type or group paused now (``QueueKeys.paused``, since when).
- ``operator``: every audited operator action (the audit log, when a database is given:
  schedule changes, replays, purges, resumes, overrides cleared...).

``ChangeLog.between(since, until)`` gives them oldest first; ``ChangeLog.before(incident)``
the ones in the ``WINDOW_MS`` before an incident's onset, ranked by what they touched: the
incident's own job type or group first, then its queue (a worker serving it), then what
touches every queue, then the rest; among equals the kinds that change behaviour
(``WEIGHTY``) before plain restarts, the nearest to the onset first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import redis
from sqlalchemy.exc import SQLAlchemyError

from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.groups.read import GROUP_TARGET
from antre.observe.readmodels import pause_infos
from antre.observe.registry import WorkerRegistry

if TYPE_CHECKING:
    from antre.stores.audit import AuditLog

WINDOW_MS = 15 * 60_000  # "the minutes before its onset"
AUDIT_ROWS = 500  # newest operator actions read for one timeline
ALL = "*"  # a change that touches every queue
WEIGHTY = ("deploy", "group_limit", "limit", "pause", "operator")  # before 'worker_start'


@dataclass(frozen=True)
class Change:
    """One change: when (ms), its kind, what it touched (``queue``: one queue or '*';
    ``queues``: every queue a worker serves; ``job_type``, ``group``: '' when none), who made
    it and what it was."""

    t: int
    kind: str
    text: str
    queue: str = ALL
    job_type: str = ""
    group: str = ""
    by: str = ""
    queues: tuple[str, ...] = field(default=())

    def touches_queue(self, queue: str) -> bool:
        return self.queue == queue or queue in self.queues


@dataclass(frozen=True)
class Ranked:
    """A change before an incident, with why it ranks where it does (``touched``: 'type',
    'group', 'queue', 'every queue' or '') and how long before the onset (ms)."""

    change: Change
    touched: str
    before_ms: int


def relevance(change: Change, queue: str, job_type: str = "", group: str = "") -> tuple[int, str]:
    """How close ``change`` is to what an incident of ``queue`` (``job_type``, ``group``)
    touches: 3 its type or group, 2 its queue, 1 every queue, 0 another one's."""
    if queue != ALL and change.touches_queue(queue):
        if job_type and change.job_type == job_type:
            return 3, "type"
        if group and change.group == group:
            return 3, "group"
        return 2, "queue"
    if change.queue == ALL and not change.queues or queue == ALL:
        return 1, "every queue"
    return 0, ""


def rank(changes: list[Change], onset_ms: int, queue: str, job_type: str = "",
         group: str = "") -> list[Ranked]:
    """``changes`` (those in the window before the onset) ranked as the module says."""
    scored = []
    for c in changes:
        score, touched = relevance(c, queue, job_type, group)
        scored.append(((-score, c.kind not in WEIGHTY, onset_ms - c.t),
                       Ranked(c, touched, max(0, onset_ms - c.t))))
    scored.sort(key=lambda pair: pair[0])
    return [r for _, r in scored]


def _json(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def version_text(start: dict[str, Any]) -> str:
    """A start's versions as read: 'antre 0.9.0, code 1a2b3c' (either part when alone)."""
    parts = []
    if start.get("package"):
        parts.append(f"antre {start['package']}")
    if start.get("version"):
        parts.append(str(start["version"]))
    return ", ".join(parts) or "unknown code"


class ChangeLog:
    """The timeline of change over Redis (and the audit log when given)."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 audit: "AuditLog | None" = None) -> None:
        self.redis = client
        self.clock = clock
        self.audit = audit

    def between(self, since_ms: int, until_ms: int | None = None) -> list[Change]:
        """Every change from ``since_ms`` to ``until_ms`` (now when None), oldest first."""
        until = self.clock() if until_ms is None else until_ms
        found = self._starts() + self._overrides() + self._pauses() + self._audited(since_ms)
        return sorted((c for c in found if since_ms <= c.t <= until), key=lambda c: c.t)

    def before(self, onset_ms: int, queue: str, job_type: str = "", group: str = "",
               window_ms: int = WINDOW_MS) -> list[Ranked]:
        """The changes in the ``window_ms`` before ``onset_ms`` (up to it), ranked."""
        return rank(self.between(onset_ms - window_ms, onset_ms), onset_ms, queue, job_type,
                    group)

    # -- the sources ---------------------------------------------------------------------------
    def _starts(self) -> list[Change]:
        out, seen = [], set()
        for start in WorkerRegistry(self.redis, self.clock).starts(0):  # (bounded: STARTS_KEPT)
            version = (str(start.get("package", "")), str(start.get("version", "")))
            queues = start.get("queues")
            served = tuple(str(q) for q in queues) if isinstance(queues, list) else ()
            wid = str(start.get("id", "?"))
            if version not in seen:
                text = f"deploy: {version_text(start)} first seen (worker {wid})"
                kind = "deploy"
            else:
                text = f"worker {wid} started on {version_text(start)}"
                kind = "worker_start"
            seen.add(version)
            out.append(Change(_int(start.get("t")), kind, text, ALL, queues=served))
        return out

    def _queue_keys(self) -> list[tuple[str, keys.QueueKeys]]:
        names = sorted(str(n) for n in cast(set[str], self.redis.smembers(keys.queues_index())))
        return [(q, k) for q in names for k in partitions.all_keys(self.redis, q)]

    def _overrides(self) -> list[Change]:
        every = self._queue_keys()
        pipe = self.redis.pipeline(transaction=False)
        for _, k in every:
            pipe.hgetall(k.group_overrides)
            pipe.hgetall(k.gate_override_records)
        raw = pipe.execute()
        out = []
        for i, (q, _) in enumerate(every):
            for group, rec in cast(dict[str, str], raw[2 * i]).items():
                d = _json(rec)
                out.append(Change(_int(d.get("at")), "group_limit",
                                  f"group {group} limited to {_limits(d)} in queue {q}"
                                  f"{_why(d)}", q, group=str(group), by=str(d.get("by", ""))))
            for gate, rec in cast(dict[str, str], raw[2 * i + 1]).items():
                d = _json(rec)
                gate = str(gate)
                job_type = gate[5:] if gate.startswith("type:") else ""
                what = f"job type {job_type}" if job_type else f"downstream {gate[3:]}"
                out.append(Change(_int(d.get("at")), "limit",
                                  f"{what} limited to {_limits(d)} in queue {q}{_why(d)}", q,
                                  job_type=job_type, by=str(d.get("by", ""))))
        return out

    def _pauses(self) -> list[Change]:
        names = sorted(str(n) for n in cast(set[str], self.redis.smembers(keys.queues_index())))
        pipe = self.redis.pipeline(transaction=False)
        for q in names:
            pipe.hgetall(keys.QueueKeys(q).paused)
        out = []
        for q, raw in zip(names, cast(list[dict[str, str]], pipe.execute())):
            for p in pause_infos(q, raw):
                target = p.job_type or ""
                group = target[len(GROUP_TARGET):] if target.startswith(GROUP_TARGET) else ""
                job_type = "" if group else target
                what = (f"group {group}" if group else f"job type {job_type}" if job_type
                        else "queue")
                out.append(Change(p.at_ms, "pause", f"{what} of queue {q} paused: {p.reason}",
                                  q, job_type=job_type, group=group, by=p.by))
        return out

    def _audited(self, since_ms: int) -> list[Change]:
        if self.audit is None:
            return []
        try:
            rows = self.audit.list(limit=AUDIT_ROWS, since_ms=since_ms)
        except SQLAlchemyError:  # the database is away: the timeline without it
            return []
        names = set(cast(set[str], self.redis.smembers(keys.queues_index())))
        out = []
        for row in rows:
            if row.action == "login" or row.outcome != "ok":
                continue
            target = row.target or ""
            queue = target.split("/", 1)[0] if target.split("/", 1)[0] in names else ALL
            detail = row.detail if isinstance(row.detail, dict) else {}
            out.append(Change(int(row.at.timestamp() * 1000), "operator",
                              f"{row.action} {target}".strip()
                              + (f": {row.reason}" if row.reason else ""), queue,
                              job_type=str(detail.get("type") or detail.get("job_type") or ""),
                              group=str(detail.get("group") or ""), by=row.user))
        return out


def _limits(d: dict[str, Any]) -> str:
    parts = []
    if d.get("slots") is not None:
        parts.append(f"{d['slots']} slots")
    if d.get("rate"):
        parts.append(f"rate {d['rate']}")
    return " and ".join(parts) or "its own limits"


def _why(d: dict[str, Any]) -> str:
    return f" ({d['reason']})" if d.get("reason") else ""


__all__ = ["ALL", "Change", "ChangeLog", "Ranked", "WINDOW_MS", "rank", "relevance"]
