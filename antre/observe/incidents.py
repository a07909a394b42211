"""``incident_view``: what is wrong now, for the dashboard's incident view, its header count,
``GET /api/incidents`` and anything else that asks.

An incident is a firing alert (``alerts.AlertEngine``: DLQ growth, lease expirations, lock
conflicts, retry storms, fence refusals, lost locks, outbox lag, oldest ready, no live
worker, paused too long), worker processes restarted (by cause: a handler past its hard
timeout, ...), an open circuit breaker, a paused queue or job type, a lock hot
spot (a key whose jobs found it held many times in the last 5 minutes), or leases stuck past
their deadline (their worker died or hung and no sweeper hands them back). Each has a severity,
its evidence (for the DLQ: the top error groups with counts and first/last seen) and the one
action that usually helps. Acknowledged and silenced incidents (``alerts.AlertQuiet``) are
listed apart and not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast
from urllib.parse import quote

import redis

from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.engine.locks import Locks
from antre.limits.admission import Limits
from antre.observe.alerts import ALL_QUEUES, Alert, AlertEngine, AlertQuiet, Quiet
from antre.observe.readmodels import ErrorGroup, PauseInfo, ReadModels, pause_infos
from antre.observe.registry import WorkerRegistry

SEVERITIES = ("critical", "major", "minor")
SEVERITY = {"no_live_worker": "critical", "dlq_growth": "critical",
            "lease_expiration_spike": "critical", "outbox_backlog_age": "critical",
            "oldest_ready_age": "major", "retry_storm": "major", "fence_refusals": "major",
            "lost_locks": "major", "breaker_open": "major", "stuck_leases": "critical",
            "lock_conflict_spike": "minor", "duplicate_delivery_spike": "minor",
            "paused_too_long": "minor", "paused": "minor", "lock_hot_spot": "minor",
            "worker_restarts": "major"}
TITLES = {"no_live_worker": "No live worker", "dlq_growth": "Dead letters growing",
          "lease_expiration_spike": "Leases expiring", "outbox_backlog_age": "Outbox lagging",
          "oldest_ready_age": "Ready jobs waiting", "retry_storm": "Retry storm",
          "fence_refusals": "Fence refusals", "lost_locks": "Locks lost while running",
          "breaker_open": "Circuit breaker open", "lock_conflict_spike": "Lock conflicts",
          "duplicate_delivery_spike": "Duplicate deliveries",
          "paused_too_long": "Paused too long", "paused": "Paused",
          "lock_hot_spot": "Lock hot spot", "stuck_leases": "Leases past their deadline",
          "worker_restarts": "Worker processes restarting"}
STUCK_GRACE_MS = 30_000  # a lease this far past its deadline has not been swept: no sweeper
HOT_LOCK_5M = 20  # conflicts on one key in 5 minutes that make it a hot spot
RESTARTS_WINDOW_MS = 15 * 60_000  # worker restarts of this long ago are an open incident
TOP_GROUPS = 3


@dataclass(frozen=True)
class Remedy:
    """The action that usually helps: a link (``method`` get) or a form to POST (with its
    hidden ``fields``); ``role`` is the least role that may take it."""

    label: str
    path: str
    method: str = "get"
    fields: tuple[tuple[str, str], ...] = ()
    role: str = "viewer"


@dataclass(frozen=True)
class Incident:
    id: str  # alerts: '<rule>|<queue>'; others: '<kind>|<what>'
    kind: str
    severity: str
    queue: str  # '*': not one queue's
    title: str
    message: str
    since: int
    value: float
    threshold: float
    remedy: Remedy
    groups: tuple[ErrorGroup, ...] = ()
    quiet: Quiet | None = None

    @property
    def rank(self) -> tuple[int, float, int]:
        """Worst first: severity, then how far past its threshold, then the oldest."""
        over = self.value / self.threshold if self.threshold else self.value
        return SEVERITIES.index(self.severity), -over, self.since


@dataclass(frozen=True)
class IncidentView:
    open: tuple[Incident, ...]  # ranked, worst first
    quiet: tuple[Incident, ...]  # acknowledged or silenced
    as_of: int

    @property
    def count(self) -> int:
        return len(self.open)

    @property
    def worst(self) -> str:
        """The severity of the worst open incident ('' none)."""
        return self.open[0].severity if self.open else ""


def _alert_remedy(alert: Alert, groups: tuple[ErrorGroup, ...]) -> Remedy:
    q = quote(alert.queue)
    if alert.rule == "dlq_growth" and groups:
        return Remedy("Replay this error group",
                      f"/dlq/?queue={q}&group={quote(groups[0].group)}", role="operator")
    if alert.rule == "lease_expiration_spike":
        return Remedy("Extend or cancel the silent leases", f"/inflight/?queue={q}&sort=silent")
    if alert.rule in ("lock_conflict_spike", "fence_refusals", "lost_locks"):
        return Remedy("Release the hot lock", "/locks/")
    if alert.rule == "retry_storm":
        return Remedy("See the retries", f"/scheduled/?queue={q}")
    if alert.rule in ("no_live_worker", "oldest_ready_age"):
        return Remedy("See the workers", "/workers/")
    if alert.rule == "paused_too_long":
        return Remedy("Resume it", f"/?queue={q}")
    return Remedy("Look", alert.path or "/")


def _from_alert(alert: Alert, reads: ReadModels) -> Incident:
    groups: tuple[ErrorGroup, ...] = ()
    if alert.rule == "dlq_growth" and alert.queue != ALL_QUEUES:
        groups = tuple(reads.error_groups(alert.queue)[:TOP_GROUPS])
    return Incident(alert.id, alert.rule, SEVERITY.get(alert.rule, "major"), alert.queue,
                    TITLES.get(alert.rule, alert.rule), alert.message, alert.since,
                    alert.value, alert.threshold, _alert_remedy(alert, groups), groups)


def _from_pause(p: PauseInfo) -> Incident:
    fields = (("type", p.job_type),) if p.job_type else ()
    what = f"job type {p.job_type} in queue {p.queue}" if p.job_type else f"queue {p.queue}"
    return Incident(f"paused|{p.target}", "paused", "minor", p.queue, "Paused",
                    f"{what} paused by {p.by}: {p.reason}", p.at_ms, 0, 0,
                    Remedy("Resume", f"/queues/{quote(p.queue)}/resume", "post", fields,
                           "operator"))


def _pauses(client: "redis.Redis", queues: list[str]) -> list[PauseInfo]:
    pipe = client.pipeline(transaction=False)
    for q in queues:
        pipe.hgetall(keys.QueueKeys(q).paused)
    raw = cast(list[dict[str, str]], pipe.execute())
    return [p for q, h in zip(queues, raw) for p in pause_infos(q, h)]


def _breakers(client: "redis.Redis", clock: Clock) -> list[Incident]:
    out = []
    for b in Limits(client, clock).breakers():
        if b.state == "closed":
            continue
        out.append(Incident(
            f"breaker_open|{b.name}", "breaker_open", "major", ALL_QUEUES,
            TITLES["breaker_open"], f"circuit breaker {b.name} is {b.state.replace('_', '-')}: "
            f"jobs behind it wait (cools down for {b.cooldown_s:g} s after "
            f"{b.failure_threshold} failures)", b.opened_at or b.changed_at, 1, 1,
            Remedy("Close breaker", f"/flow/breakers/{quote(b.name, safe='')}/reset", "post",
                   (), "operator")))
    return out


def _stuck(client: "redis.Redis", queues: list[str], now: int) -> list[Incident]:
    """Leases past their deadline by more than ``STUCK_GRACE_MS``: their worker died or hung
    and no sweeper handed them back (one ZCOUNT and one ZRANGE per queue)."""
    every = [(q, k) for q in queues for k in partitions.all_keys(client, q)]
    pipe = client.pipeline(transaction=False)
    for _, k in every:
        pipe.zcount(k.inflight, "-inf", now - STUCK_GRACE_MS)
        pipe.zrangebyscore(k.inflight, "-inf", "+inf", start=0, num=1, withscores=True)
    raw = pipe.execute()
    stuck: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, (q, _) in enumerate(every):  # a queue's partitions added up
        n, oldest = int(raw[2 * i]), raw[2 * i + 1]
        stuck[q] = stuck.get(q, 0) + n
        if oldest:
            first[q] = min(first.get(q, int(oldest[0][1])), int(oldest[0][1]))
    out = []
    for q in queues:
        n = stuck.get(q, 0)
        if not n or q not in first:
            continue
        since = first[q]
        out.append(Incident(
            f"stuck_leases|{q}", "stuck_leases", "critical", q, TITLES["stuck_leases"],
            f"{n} in-flight jobs of queue {q} are past their lease deadline and not handed "
            "back: their workers died or hung and no sweeper runs", since, n, 0,
            Remedy("Extend or cancel them", f"/inflight/?queue={quote(q)}&sort=deadline",
                   role="operator")))
    return out


def _hot_locks(client: "redis.Redis", clock: Clock, now: int) -> list[Incident]:
    return [Incident(f"lock_hot_spot|{c.key}", "lock_hot_spot", "minor", ALL_QUEUES,
                     TITLES["lock_hot_spot"], f"lock {c.key}: {c.last_5m} conflicts in the "
                     f"last 5 min, {c.last_1h} in the last hour", now, c.last_5m, HOT_LOCK_5M,
                     Remedy("See the lock", "/locks/"))
            for c in Locks(client, clock=clock).contention(5) if c.last_5m >= HOT_LOCK_5M]


# what restarted a worker process, and what to do about it (``registry.RESTART_CAUSES``)
_RESTART_WHY = {
    "hard_timeout": (("handler {type} exceeds its timeout of {timeout_s:g} s in a call that "
                      "does not return to Python, so its process had to be restarted"),
                     "raise timeout_s of {type} or fix the handler (give its calls a timeout)"),
    "cancel_ignored": (("handler {type} ignored an operator's cancel past its grace, so its "
                        "process had to be restarted"),
                       "make {type} check ctx.cancelled, or raise its cancel_grace_s"),
    "killed": ("worker processes were killed by a signal (out of memory?)",
               "look at the host's kernel log and the worker's memory"),
    "redis_unreachable": ("worker processes lost Redis and exited", "check Redis"),
    "crashed": ("worker processes exited on an error", "look at the worker log"),
}


def _restarts(client: "redis.Redis", now: int) -> list[Incident]:
    """Worker processes restarted in the last ``RESTARTS_WINDOW_MS``: one incident per cause
    and job type, saying what to change."""
    seen: dict[tuple[str, str], list[dict[str, object]]] = {}
    for rec in WorkerRegistry(client).restarts(now - RESTARTS_WINDOW_MS):
        seen.setdefault((str(rec.get("cause", "")), str(rec.get("type", ""))), []).append(rec)
    out = []
    for (cause, job_type), recs in sorted(seen.items()):
        why, fix = _RESTART_WHY.get(cause, _RESTART_WHY["crashed"])
        timeout = recs[-1].get("timeout_s")
        fields = {"type": job_type or "?",
                  "timeout_s": float(timeout) if isinstance(timeout, (int, float)) else 0.0}
        since = min(int(cast(int, r.get("t", now))) for r in recs)
        fix_text = fix.format(**fields)
        out.append(Incident(
            f"worker_restarts|{cause}|{job_type}", "worker_restarts", "major", ALL_QUEUES,
            TITLES["worker_restarts"],
            f"{len(recs)} worker process restart{'s' if len(recs) != 1 else ''} in the last "
            f"{RESTARTS_WINDOW_MS // 60_000} min ({cause}): {why.format(**fields)}; {fix_text}",
            since, len(recs), 1, Remedy(fix_text[0].upper() + fix_text[1:], "/workers/")))
    return out


def incident_view(client: "redis.Redis", clock: Clock = system_ms) -> IncidentView:
    """Every open problem, ranked, with its evidence and action; the quiet ones apart."""
    now = clock()
    reads = ReadModels(client, clock)
    found = [_from_alert(a, reads) for a in AlertEngine(client, clock).active()]
    names = reads.queue_names()
    found += [_from_pause(p) for p in _pauses(client, names)] + _stuck(client, names, now)
    found += _breakers(client, clock) + _hot_locks(client, clock, now) + _restarts(client, now)
    quiet = AlertQuiet(client, clock).all()
    open_, hushed = [], []
    for inc in found:
        q = quiet.get(inc.id)
        if q is not None and q.holds(inc.since, now):
            hushed.append(_with_quiet(inc, q))
        else:
            open_.append(inc)
    return IncidentView(tuple(sorted(open_, key=lambda i: i.rank)),
                        tuple(sorted(hushed, key=lambda i: i.rank)), now)


def _with_quiet(inc: Incident, q: Quiet) -> Incident:
    return Incident(inc.id, inc.kind, inc.severity, inc.queue, inc.title, inc.message,
                    inc.since, inc.value, inc.threshold, inc.remedy, inc.groups, q)


__all__ = ["Incident", "IncidentView", "Remedy", "incident_view", "SEVERITIES"]
