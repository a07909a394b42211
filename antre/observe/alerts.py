"""Alert rules checked on a schedule, with their state in Redis and a webhook.

``AlertEngine.check()`` gathers the queue figures once, evaluates every rule per queue and
compares with the stored state (``keys.alerts()``: HASH ``<rule>|<queue>`` -> JSON). An alert
fires once per episode: the first check that finds the condition true starts an episode and
POSTs ``status: firing`` once; later checks while it holds only update the value; the first
check that finds it false POSTs ``status: resolved`` once and ends the episode. A webhook that
fails is logged and tried again at the next check; ``check`` never raises for it.

Rates come from the per-queue ``stats`` counters the Lua scripts keep (``buried``, ``expired``,
``lock_busy``): each check stores a point per queue (``keys.alert_points()``), and a rule
compares the counter now with the newest point at least its window old (or the oldest point
kept, early on).

The webhook POST (``post_json``): redirects are not followed (a 3xx is a failure: a redirect
would turn the POST into a GET to wherever it points), the whole call, from connecting to the
last byte, is bounded by ``deadline_s``, only ``http`` and ``https`` URLs are used, and with a
secret (``ANTRE_ALERT_WEBHOOK_SECRET``) the body is signed: ``X-Antre-Timestamp: <unix s>``
and ``X-Antre-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">``. The README shows
how a receiver verifies it.

An admin may override a threshold per queue (``AlertThresholds``, in Redis); an operator may
acknowledge an alert (for its episode) or silence it for a while (``AlertQuiet``): a silenced
alert's firing is not POSTed until the silence ends.

Run ``check`` from one node per tick (the worker pool's duty holds the ``alerts`` maintenance
key, as for the sweeper); the dashboard reads ``active()`` for its banner.

Every threshold is configuration (``AlertConfig``: ``ANTRE_ALERT_*`` environment variables, or
``Antre(alerts=AlertConfig(...))``); a threshold set to ``off`` drops its rule. Besides the
original rules: a retry storm (retries per minute), a duplicate-delivery spike (deliveries
answered from the idempotency store), the outbox backlog's age, fence refusals and lost locks
(counted by the worker in the queue's stats), and a queue or job type paused for too long.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import redis

import antre.settings as settings
from antre.engine import keys
from antre.clock import Clock, system_ms
from antre.observe.readmodels import QueueInfo, ReadModels
from antre.observe.redact import scrub
from antre.observe.registry import WorkerRegistry

log = logging.getLogger("antre.observe.alerts")

ALL_QUEUES = "*"
MAX_POINTS = 500
Post = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Reading:
    """One rule evaluated for one queue."""

    rule: str
    queue: str
    firing: bool
    value: float
    threshold: float
    message: str
    path: str  # where on the dashboard to look


@dataclass
class Snapshot:
    """The figures one check reads, shared by every rule."""

    now: int
    queues: dict[str, QueueInfo]
    live_workers: int
    points: dict[str, list[list[Any]]]  # queue -> [[ms, {counter: value}], ...] oldest first
    outbox_age_s: float | None = None  # the oldest unsent outbox row; None: none, or no SQL

    def increase(self, queue: str, counter: str, window_ms: int) -> int:
        """How much ``counter`` of ``queue`` grew over the last ``window_ms`` (a lower bound
        while fewer than ``window_ms`` of points are kept)."""
        info = self.queues.get(queue)
        past = [p for p in self.points.get(queue, []) if p[0] < self.now]
        if info is None or not past:
            return 0
        older = [p for p in past if p[0] <= self.now - window_ms]
        base = older[-1] if older else past[0]
        return max(0, info.stats.get(counter, 0) - int(base[1].get(counter, 0)))


class Rule(Protocol):
    @property
    def name(self) -> str: ...

    def evaluate(self, snap: Snapshot) -> list[Reading]: ...

    @property
    def window_ms(self) -> int: ...


@dataclass(frozen=True)
class CounterSpike:
    """More than ``max_in_window`` increments of a stats counter within ``window_s``."""

    name: str
    counter: str
    max_in_window: int
    window_s: float = 300.0
    what: str = "events"
    page: str = "/"

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)

    def evaluate(self, snap: Snapshot) -> list[Reading]:
        out = []
        for queue in snap.queues:
            n = snap.increase(queue, self.counter, self.window_ms)
            out.append(Reading(
                self.name, queue, n > self.max_in_window, n, self.max_in_window,
                f"{n} {self.what} in queue {queue} in the last {_span(self.window_s)} "
                f"(threshold {self.max_in_window})", f"{self.page}?queue={quote(queue)}"))
        return out


def dlq_growth(max_in_window: int = 10, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("dlq_growth", "buried", max_in_window, window_s,
                        "jobs dead-lettered", "/dlq")


def lease_expiration_spike(max_in_window: int = 20, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("lease_expiration_spike", "expired", max_in_window, window_s,
                        "leases expired (workers died or hung)", "/inflight")


def lock_conflict_spike(max_in_window: int = 100, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("lock_conflict_spike", "lock_busy", max_in_window, window_s,
                        "jobs found their lock held", "/locks")


@dataclass(frozen=True)
class OldestReady:
    """The oldest ready job has waited longer than ``max_age_s``."""

    max_age_s: float = 300.0
    name: str = "oldest_ready_age"
    window_ms: int = 0

    def evaluate(self, snap: Snapshot) -> list[Reading]:
        out = []
        for queue, info in snap.queues.items():
            age = info.oldest_ready_age_ms / 1000
            out.append(Reading(
                self.name, queue, age > self.max_age_s, round(age, 3), self.max_age_s,
                f"the oldest ready job in queue {queue} has waited {_span(age)} "
                f"(threshold {_span(self.max_age_s)})", f"/?queue={quote(queue)}"))
        return out


@dataclass(frozen=True)
class NoLiveWorker:
    """Jobs are ready but no worker has sent a heartbeat recently."""

    name: str = "no_live_worker"
    window_ms: int = 0

    def evaluate(self, snap: Snapshot) -> list[Reading]:
        ready = sum(info.ready for info in snap.queues.values())
        firing = snap.live_workers == 0 and ready > 0
        return [Reading(self.name, ALL_QUEUES, firing, ready, 0,
                        f"no live worker while {ready} jobs are ready", "/workers")]


def retry_storm(max_per_min: int = 60) -> CounterSpike:
    return CounterSpike("retry_storm", "retried", max_per_min, 60.0,
                        "retries (attempts spent)", "/scheduled")


def duplicate_delivery_spike(max_in_window: int = 50, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("duplicate_delivery_spike", "deduplicated", max_in_window, window_s,
                        "deliveries answered from the idempotency store (duplicates)", "/")


def fence_refusal_spike(max_in_window: int = 5, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("fence_refusals", "fence_rejected", max_in_window, window_s,
                        "runs refused by the SQL fence (a newer lock holder committed)",
                        "/locks")


def abandoned_records(max_in_window: int = 0, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("abandoned_records", "abandoned", max_in_window, window_s,
                        "damaged or vanished records the scripts moved past (antre status "
                        "lists them)", "/")


def lost_lock_spike(max_in_window: int = 5, window_s: float = 300.0) -> CounterSpike:
    return CounterSpike("lost_locks", "lock_lost", max_in_window, window_s,
                        "business locks lost while their job ran", "/locks")


@dataclass(frozen=True)
class OutboxBacklogAge:
    """The oldest outbox row not yet relayed to Redis is older than ``max_age_s`` (the relay
    is stuck or too slow)."""

    max_age_s: float = 60.0
    name: str = "outbox_backlog_age"
    window_ms: int = 0

    def evaluate(self, snap: Snapshot) -> list[Reading]:
        age = snap.outbox_age_s or 0.0
        return [Reading(self.name, ALL_QUEUES, age > self.max_age_s, round(age, 3),
                        self.max_age_s, f"the oldest outbox row waits for the relay since "
                        f"{_span(age)} (threshold {_span(self.max_age_s)})", "/")]


@dataclass(frozen=True)
class PausedTooLong:
    """A queue or a job type has been paused for more than ``max_min`` minutes."""

    max_min: float = 30.0
    name: str = "paused_too_long"
    window_ms: int = 0

    def evaluate(self, snap: Snapshot) -> list[Reading]:
        out = []
        for queue, info in snap.queues.items():
            oldest = min((p.at_ms for p in info.paused), default=snap.now)
            minutes = max(0, snap.now - oldest) / 60_000
            what = ", ".join(p.job_type or "the whole queue" for p in info.paused) or "nothing"
            out.append(Reading(
                self.name, queue, minutes > self.max_min, round(minutes, 2), self.max_min,
                f"queue {queue}: {what} paused for {_span(minutes * 60)} "
                f"(threshold {_span(self.max_min * 60)}); resume it or say why",
                f"/?queue={quote(queue)}"))
        return out


Threshold = float | None  # None: the rule is off


@dataclass(frozen=True)
class AlertConfig:
    """Every alert threshold; ``from_env`` reads the setting of each field
    (``settings.ALERTS``), e.g. ``ANTRE_ALERT_RETRIES_PER_MIN=120``; ``off`` turns a rule off."""

    # the defaults are the settings' (antre/settings/declared.py)
    window_s: float = settings.ALERT_WINDOW_S.default  # of every 'N in the window' rule
    dlq_growth_max: Threshold = settings.ALERT_DLQ_GROWTH_MAX.default
    oldest_ready_s: Threshold = settings.ALERT_OLDEST_READY_S.default
    lease_expirations_max: Threshold = settings.ALERT_LEASE_EXPIRATIONS_MAX.default
    lock_conflicts_max: Threshold = settings.ALERT_LOCK_CONFLICTS_MAX.default
    no_live_worker: Threshold = settings.ALERT_NO_LIVE_WORKER.default  # any value but off: on
    retries_per_min: Threshold = settings.ALERT_RETRIES_PER_MIN.default
    duplicates_max: Threshold = settings.ALERT_DUPLICATES_MAX.default
    outbox_age_s: Threshold = settings.ALERT_OUTBOX_AGE_S.default
    fence_refusals_max: Threshold = settings.ALERT_FENCE_REFUSALS_MAX.default
    lost_locks_max: Threshold = settings.ALERT_LOST_LOCKS_MAX.default
    paused_max_min: Threshold = settings.ALERT_PAUSED_MAX_MIN.default
    abandoned_max: Threshold = settings.ALERT_ABANDONED_MAX.default  # damaged or vanished

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "AlertConfig":
        """The ``ANTRE_ALERT_*`` settings (``settings.ALERTS``: the environment, else the
        ``ANTRE_CONFIG`` file, else the defaults; ``env``: the process environment unless
        given), then ``overrides`` (keyword arguments win). Raises ``SettingError`` (a
        ``ValueError``) naming a bad value."""
        values: dict[str, Any] = {f.name: settings.ALERTS[f.name].get(env) for f in fields(cls)}
        config = replace(cls(), **{**values, **overrides})
        if config.window_s is None or float(config.window_s) <= 0:
            raise ValueError("window_s must be a positive number of seconds")
        return config

    def rules(self) -> list[Rule]:
        w = float(self.window_s)
        candidates: list[tuple[Threshold, Callable[[float], Rule]]] = [
            (self.dlq_growth_max, lambda t: dlq_growth(int(t), w)),
            (self.oldest_ready_s, lambda t: OldestReady(t)),
            (self.lease_expirations_max, lambda t: lease_expiration_spike(int(t), w)),
            (self.lock_conflicts_max, lambda t: lock_conflict_spike(int(t), w)),
            (self.no_live_worker, lambda t: NoLiveWorker()),
            (self.retries_per_min, lambda t: retry_storm(int(t))),
            (self.duplicates_max, lambda t: duplicate_delivery_spike(int(t), w)),
            (self.outbox_age_s, lambda t: OutboxBacklogAge(t)),
            (self.fence_refusals_max, lambda t: fence_refusal_spike(int(t), w)),
            (self.lost_locks_max, lambda t: lost_lock_spike(int(t), w)),
            (self.paused_max_min, lambda t: PausedTooLong(t)),
            (self.abandoned_max, lambda t: abandoned_records(int(t), w)),
        ]
        return [make(float(t)) for t, make in candidates if t is not None]


def _threshold(name: str, raw: str) -> Threshold:
    """An admin's per-queue threshold (``AlertThresholds``): a number from 0 up, or off."""
    if raw.strip().lower() in ("off", "none", "false"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: use a number, or 'off' to turn the rule off") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r}: use a number from 0 up, or 'off'")
    return value


def default_rules(config: AlertConfig | None = None) -> list[Rule]:
    """The rules with the thresholds of ``config`` (default: ``AlertConfig.from_env()``)."""
    return (config or AlertConfig.from_env()).rules()


@dataclass(frozen=True)
class Alert:
    """An alert's stored state (the dashboard banner shows the firing ones)."""

    rule: str
    queue: str
    status: str  # firing | resolved
    value: float
    threshold: float
    since: int  # episode start, ms
    updated_at: int
    resolved_at: int
    message: str
    path: str
    notified: str  # the status last delivered to the webhook ('' none yet)

    @property
    def id(self) -> str:
        return f"{self.rule}|{self.queue}"

    def payload(self, dashboard_url: str = "") -> dict[str, Any]:
        """The webhook's JSON body."""
        body = {"source": "antre", "rule": self.rule, "queue": self.queue,
                "status": self.status, "value": self.value, "threshold": self.threshold,
                "since": _iso(self.since), "since_ms": self.since, "message": self.message,
                "dashboard": dashboard_url.rstrip("/") + self.path}
        if self.status == "resolved":
            body["resolved_at"] = _iso(self.resolved_at)
        return body


@dataclass(frozen=True)
class AlertEvent:
    """A transition found by one check (what is POSTed)."""

    alert: Alert
    status: str

    @property
    def rule(self) -> str:
        return self.alert.rule

    @property
    def queue(self) -> str:
        return self.alert.queue


SIGNATURE_HEADER = "X-Antre-Signature"
TIMESTAMP_HEADER = "X-Antre-Timestamp"
WEBHOOK_DEADLINE_S = 10.0


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 with ``secret`` of ``"<timestamp>." + body``."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError for the 3xx


_OPENER = urllib.request.build_opener(_NoRedirect)


def _send(req: urllib.request.Request, timeout_s: float) -> None:
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
        exc.close()
    if not 200 <= status < 300:
        raise OSError(f"webhook answered HTTP {status}"
                      + (" (redirects are not followed)" if 300 <= status < 400 else ""))


def _within(deadline_s: float, fn: Callable[[], None]) -> None:
    """Run ``fn`` in a helper thread; raise ``TimeoutError`` if it is not done within
    ``deadline_s`` (the thread is abandoned; its socket timeout ends it)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True, name="antre-alert-webhook")
    worker.start()
    worker.join(deadline_s)
    if not outcome:
        raise TimeoutError(f"webhook did not answer within {deadline_s:g}s")
    if outcome[0] is not None:
        raise outcome[0]


def post_json(url: str, payload: dict[str, Any], deadline_s: float = WEBHOOK_DEADLINE_S,
              secret: str | None = None, now_s: Callable[[], float] = time.time) -> None:
    """POST ``payload`` as JSON, signed when ``secret`` is given; raises on a network error, a
    non-2xx answer (a redirect included) or when the whole call takes over ``deadline_s``."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"the webhook URL must be http or https, not {url[:40]!r}")
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "antre-alerts"}
    if secret:
        ts = int(now_s())
        headers[TIMESTAMP_HEADER] = str(ts)
        headers[SIGNATURE_HEADER] = sign(secret, ts, body)
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    _within(deadline_s, lambda: _send(req, deadline_s))


#: ``AlertConfig`` fields an admin may override per queue, and the rule each one sets.
PER_QUEUE = {"dlq_growth_max": "dlq_growth", "oldest_ready_s": "oldest_ready_age",
             "lease_expirations_max": "lease_expiration_spike",
             "lock_conflicts_max": "lock_conflict_spike", "retries_per_min": "retry_storm",
             "duplicates_max": "duplicate_delivery_spike",
             "fence_refusals_max": "fence_refusals", "lost_locks_max": "lost_locks",
             "paused_max_min": "paused_too_long", "abandoned_max": "abandoned_records"}


def with_threshold(rule: Rule, value: float) -> Rule:
    """``rule`` with its threshold set to ``value``."""
    if isinstance(rule, CounterSpike):
        return replace(rule, max_in_window=int(value))
    if isinstance(rule, OldestReady):
        return replace(rule, max_age_s=value)
    if isinstance(rule, PausedTooLong):
        return replace(rule, max_min=value)
    raise ValueError(f"rule {rule.name} has no per-queue threshold")


class AlertThresholds:
    """Per-queue overrides of alert thresholds (``keys.alert_thresholds()``), set by an admin
    in the dashboard; a field without one keeps the ``AlertConfig`` default."""

    def __init__(self, client: "redis.Redis") -> None:
        self.redis = client

    def all(self) -> dict[tuple[str, str], Threshold]:
        """``(queue, field) -> threshold`` (None: the rule is off for that queue)."""
        out: dict[tuple[str, str], Threshold] = {}
        for name, raw in self.redis.hgetall(keys.alert_thresholds()).items():
            queue, _, field = str(name).rpartition("|")
            if field in PER_QUEUE:
                try:
                    out[(queue, field)] = _threshold(field, str(raw))
                except ValueError:
                    continue
        return out

    def set(self, queue: str, field: str, raw: str) -> Threshold:
        """Override ``field`` for ``queue`` with ``raw`` (a number, or ``off``); an empty
        ``raw`` goes back to the default. Raises ``ValueError`` naming what is wrong."""
        if field not in PER_QUEUE:
            raise ValueError(f"{field!r} is not a per-queue alert threshold")
        name = f"{queue}|{field}"
        if raw.strip() == "":
            self.redis.hdel(keys.alert_thresholds(), name)
            return None
        value = _threshold(field, raw)
        self.redis.hset(keys.alert_thresholds(), name, "off" if value is None else f"{value:g}")
        return value

    def rules_for(self, rules: list[Rule], queue: str) -> dict[str, Rule | None]:
        """The rules whose threshold ``queue`` overrides: rule name -> the rule with the
        queue's threshold (None: off for this queue)."""
        by_name = {rule.name: rule for rule in rules}
        out: dict[str, Rule | None] = {}
        for (q, field), value in self.all().items():
            rule = by_name.get(PER_QUEUE[field])
            if q == queue and rule is not None:
                out[rule.name] = None if value is None else with_threshold(rule, value)
        return out


@dataclass(frozen=True)
class Quiet:
    """An operator's acknowledgement (lasts the alert's episode) or silence (until
    ``until_ms``) of an incident: who, why, when."""

    incident: str
    kind: str  # ack | silence
    by: str
    reason: str
    at_ms: int
    until_ms: int = 0  # silence: its end; ack: 0
    episode: int = 0  # ack: the episode start (``since``) it acknowledges

    def holds(self, since: int, now_ms: int) -> bool:
        if self.kind == "silence":
            return now_ms < self.until_ms
        return self.episode == since


class AlertQuiet:
    """Acknowledgements and silences (``keys.alert_quiet()``), one per incident id."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms) -> None:
        self.redis, self.clock = client, clock

    def all(self) -> dict[str, Quiet]:
        out = {}
        for name, raw in self.redis.hgetall(keys.alert_quiet()).items():
            try:
                data = json.loads(raw)
                out[str(name)] = Quiet(str(name), str(data["kind"]), str(data["by"]),
                                       str(data.get("reason", "")), int(data["at"]),
                                       int(data.get("until", 0)), int(data.get("episode", 0)))
            except (ValueError, TypeError, KeyError):
                continue
        return out

    def _put(self, quiet: Quiet) -> Quiet:
        self.redis.hset(keys.alert_quiet(), quiet.incident, json.dumps(
            {"kind": quiet.kind, "by": quiet.by, "reason": quiet.reason, "at": quiet.at_ms,
             "until": quiet.until_ms, "episode": quiet.episode}, separators=(",", ":")))
        return quiet

    def ack(self, incident: str, episode: int, by: str, reason: str) -> Quiet:
        return self._put(Quiet(incident, "ack", by, reason, self.clock(), 0, episode))

    def silence(self, incident: str, seconds: float, by: str, reason: str) -> Quiet:
        now = self.clock()
        return self._put(Quiet(incident, "silence", by, reason, now, now + int(seconds * 1000)))

    def clear(self, incident: str) -> bool:
        return bool(self.redis.hdel(keys.alert_quiet(), incident))

    def silenced(self) -> set[str]:
        """The incident ids whose silence holds now (their notifications wait)."""
        now = self.clock()
        return {i for i, q in self.all().items() if q.kind == "silence" and q.holds(0, now)}


class AlertEngine:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 rules: Iterable[Rule] | None = None, webhook_url: str | None = None,
                 post: Post | None = None, *, dashboard_url: str = "",
                 webhook_secret: str | None = None,
                 outbox_age_s: Callable[[], float | None] | None = None) -> None:
        self.redis, self.clock = client, clock
        self.rules = list(default_rules() if rules is None else rules)
        self.outbox_age_s = outbox_age_s
        self.webhook_url = webhook_url or None
        self.post = post or functools.partial(post_json, secret=webhook_secret or None)
        self.dashboard_url = dashboard_url

    # -- reading -----------------------------------------------------------------------------
    def alerts(self) -> list[Alert]:
        out = []
        for raw in self.redis.hgetall(keys.alerts()).values():
            try:
                out.append(Alert(**json.loads(raw)))
            except (ValueError, TypeError):
                continue
        return sorted(out, key=lambda a: (a.since, a.rule, a.queue))

    def active(self) -> list[Alert]:
        """Firing alerts, oldest episode first (the dashboard's banner)."""
        return [a for a in self.alerts() if a.status == "firing"]

    # -- checking ----------------------------------------------------------------------------
    def check(self) -> list[AlertEvent]:
        """Evaluate every rule, store the transitions, POST what is not delivered yet."""
        snap = self._snapshot()
        stored = {a.id: a for a in self.alerts()}
        events, changed = [], {}
        for reading in self._readings(snap):
            alert, event = self._transition(stored.get(f"{reading.rule}|{reading.queue}"),
                                            reading, snap.now)
            if alert is not None:
                changed[alert.id] = stored[alert.id] = alert
            if event is not None:
                events.append(event)
        if changed:
            self.redis.hset(keys.alerts(), mapping={
                i: json.dumps(asdict(a), separators=(",", ":")) for i, a in changed.items()})
        for event in events:
            (log.warning if event.status == "firing" else log.info)(
                "alert %s: %s", event.status, event.alert.message,
                extra={"event": f"alert_{event.status}", "queue": event.queue,
                       "rule": event.rule})
        self._deliver(list(stored.values()))
        return events

    def _readings(self, snap: Snapshot) -> list[Reading]:
        """Every rule's readings; a queue with an admin's threshold override is judged by it."""
        out = [r for rule in self.rules for r in rule.evaluate(snap)]
        thresholds = AlertThresholds(self.redis)
        for queue in snap.queues:
            for name, rule in thresholds.rules_for(self.rules, queue).items():
                mine = [r for r in out if r.rule == name and r.queue == queue]
                if rule is None:
                    fresh = [replace(r, firing=False) for r in mine]
                else:
                    fresh = rule.evaluate(replace(snap, queues={queue: snap.queues[queue]}))
                out = [r for r in out if not (r.rule == name and r.queue == queue)] + fresh
        return out

    @staticmethod
    def _transition(old: Alert | None, reading: Reading, now: int
                    ) -> tuple[Alert | None, AlertEvent | None]:
        if reading.firing:
            if old is not None and old.status == "firing":
                return _update(old, reading, now), None
            if old is not None and old.notified == "firing":  # resolved, not yet delivered
                return _update(old, reading, now, status="firing", resolved_at=0), None
            alert = Alert(reading.rule, reading.queue, "firing", reading.value,
                          reading.threshold, now, now, 0, reading.message, reading.path, "")
            return alert, AlertEvent(alert, "firing")
        if old is not None and old.status == "firing":
            alert = _update(old, reading, now, status="resolved", resolved_at=now)
            return alert, AlertEvent(alert, "resolved")
        return None, None

    def _deliver(self, alerts: list[Alert]) -> None:
        silenced = AlertQuiet(self.redis, self.clock).silenced()
        for alert in alerts:
            if alert.notified == alert.status:
                continue
            if alert.status == "firing" and alert.id in silenced:
                continue  # sent when the silence ends, if it still fires
            if alert.status == "resolved" and alert.notified == "":
                log.info("alert %s resolved before it was delivered; nothing sent", alert.id,
                         extra={"event": "alert_dropped"})
            elif self.webhook_url:
                try:
                    self.post(self.webhook_url, alert.payload(self.dashboard_url))
                except Exception as exc:  # any failure: retried at the next check
                    log.warning("alert webhook failed (%s); retrying at the next check",
                                scrub(exc, self.webhook_url),
                                extra={"event": "alert_webhook_failed", "rule": alert.rule})
                    continue
            self._delivered(alert)

    def _delivered(self, alert: Alert) -> None:
        if alert.status == "resolved":
            self.redis.hdel(keys.alerts(), alert.id)
            return
        done = _update(alert, None, alert.updated_at, notified=alert.status)
        self.redis.hset(keys.alerts(), alert.id, json.dumps(asdict(done), separators=(",", ":")))

    def _snapshot(self) -> Snapshot:
        reads = ReadModels(self.redis, self.clock)
        infos = {name: reads.queue_info(name) for name in reads.queue_names()}
        now = self.clock()
        live = WorkerRegistry(self.redis, self.clock).live_count()
        raw = self.redis.hgetall(keys.alert_points())
        keep_ms = max([rule.window_ms for rule in self.rules] + [0])
        points: dict[str, list[list[Any]]] = {}
        for name, info in infos.items():
            try:
                past = [p for p in json.loads(raw.get(name) or "[]") if p[0] < now]
            except (ValueError, TypeError, IndexError):
                past = []
            points[name] = past
            older = [p for p in past if p[0] <= now - keep_ms]
            kept = older[-1:] + [p for p in past if p[0] > now - keep_ms]
            kept.append([now, {c: info.stats.get(c, 0) for c in _counters(self.rules)}])
            raw[name] = json.dumps(kept[-MAX_POINTS:], separators=(",", ":"))
        if infos:
            self.redis.hset(keys.alert_points(), mapping={n: raw[n] for n in infos})
        return Snapshot(now, infos, live, points, self._outbox_age())

    def _outbox_age(self) -> float | None:
        """Measured by the caller (SQL); kept in Redis for ``/metrics`` as a signal."""
        if self.outbox_age_s is None:
            return None
        age = self.outbox_age_s()
        self.redis.hset(keys.alert_signals(), "outbox_oldest_age_s", "" if age is None else age)
        return age


def _counters(rules: list[Rule]) -> list[str]:
    return sorted({rule.counter for rule in rules if isinstance(rule, CounterSpike)})


def _update(alert: Alert, reading: Reading | None, now: int, **changes: Any) -> Alert:
    fields = asdict(alert)
    if reading is not None:
        fields.update(value=reading.value, threshold=reading.threshold,
                      message=reading.message, path=reading.path)
    fields.update(updated_at=now, **changes)
    return Alert(**fields)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds") \
        .replace("+00:00", "Z")


def _span(seconds: float) -> str:
    if seconds >= 120:
        return f"{round(seconds / 60, 1):g} min"
    return f"{round(seconds):d} s"
