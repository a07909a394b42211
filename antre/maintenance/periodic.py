"""Periodic jobs: a cron expression or a plain interval per schedule, each tick enqueued once
cluster-wide however many schedulers run.

Why croniter here and not APScheduler's ``CronTrigger`` in ``worker/``: a schedule is checked
where it is declared (``app.periodic`` raises on a bad expression or timezone at import time,
in the producer too), and the dashboard and the CLI show each schedule's next run without
importing the worker, so the trigger arithmetic belongs in ``antre/``, which must not import
APScheduler. croniter is a small, kept package that does exactly that arithmetic (DST-aware
with a ``zoneinfo`` timezone). The duty that calls ``Scheduler.run_once`` runs on APScheduler
in ``worker/antre_worker/duties.py``.

Exactly once per tick: the tick's job carries the schedule's state key and the tick time;
``enqueue.lua`` refuses a tick at or before the schedule's ``last_tick`` and records the new
one in the same script. Two schedulers that both see a tick race on that script: one stores
the job, the other gets ``tick:<id>``. The tick's idempotency key is
``periodic:NAME:<tick time UTC>``, so the idempotency store guards the effect as well.

Catch-up after a scheduler outage (ticks missed: later than ``grace_s``), per schedule:
``skip`` runs none of them, ``once`` runs the latest one, ``all`` runs each of the latest
``max_catch_up`` (oldest first). A tick at most ``grace_s`` late is on time under every policy.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import redis
from croniter import croniter

from antre.engine import keys
from antre.clock import Clock, system_ms
from antre.engine.envelope import encode_payload
from antre.errors import InvalidJob
from antre.engine.queue import Encoded, JobSpec, Queue
from antre.observe.readmodels import ScheduleInfo
from antre.engine.scripts import Scripts

CATCH_UP = ("skip", "once", "all")
STALE_AFTER_MS = 5 * 60_000  # no scheduler ran a schedule this long: removed from the code?
JOB_OPTIONS = frozenset(f.name for f in fields(JobSpec)) - {
    "job_type", "payload", "idempotency_key", "job_id", "delay_s", "trace_id"}


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule. Exactly one of ``cron`` / ``every_s``. Build with
    ``make_schedule`` (which validates)."""

    name: str
    job_type: str
    cron: str | None = None
    every_s: int | None = None
    payload: Any = None
    timezone: str = "UTC"
    queue: str | None = None
    catch_up: str = "once"
    max_catch_up: int = 10
    grace_s: float = 60.0
    options: dict[str, Any] = field(default_factory=dict)  # JobSpec fields: max_attempts, ...

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {self.every_s} s"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True, default=str)


def _check_timezone(name: str, tz: str) -> None:
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidJob(f"schedule {name!r}: unknown timezone {tz!r}; use an IANA name such "
                         "as 'UTC' or 'Europe/Paris'") from None


def _check_trigger(name: str, cron: str | None, every_s: Any) -> None:
    if (cron is None) == (every_s is None):
        raise InvalidJob(f"schedule {name!r}: give either a cron expression or every_s=, "
                         "not both and not neither")
    if cron is not None:
        try:
            croniter(cron)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidJob(f"schedule {name!r}: invalid cron expression {cron!r} ({exc}); "
                             "use 5 fields: minute hour day-of-month month day-of-week, e.g. "
                             "'*/5 * * * *'") from None
    elif isinstance(every_s, bool) or not isinstance(every_s, int) or not 1 <= every_s <= 366 * 86_400:
        raise InvalidJob(f"schedule {name!r}: every_s must be a whole number of seconds from 1 "
                         f"to {366 * 86_400}, not {every_s!r}")


def _check_policy(name: str, catch_up: str, max_catch_up: Any, grace_s: Any) -> None:
    if catch_up not in CATCH_UP:
        raise InvalidJob(f"schedule {name!r}: catch_up must be one of {', '.join(CATCH_UP)}, "
                         f"not {catch_up!r}")
    if isinstance(max_catch_up, bool) or not isinstance(max_catch_up, int) or \
            not 1 <= max_catch_up <= 1000:
        raise InvalidJob(f"schedule {name!r}: max_catch_up must be from 1 to 1000, "
                         f"not {max_catch_up!r}")
    if isinstance(grace_s, bool) or not isinstance(grace_s, (int, float)) or \
            not math.isfinite(grace_s) or not 0 < grace_s <= 86_400:
        raise InvalidJob(f"schedule {name!r}: grace_s must be seconds from 0 to 86400, "
                         f"not {grace_s!r}")


def make_schedule(name: str, job_type: str, *, cron: str | None = None,
                  every_s: int | None = None, payload: Any = None, timezone: str = "UTC",
                  queue: str | None = None, catch_up: str = "once", max_catch_up: int = 10,
                  grace_s: float = 60.0, options: dict[str, Any] | None = None) -> Schedule:
    """A validated schedule: raises ``InvalidJob`` saying what is wrong."""
    for what, value in (("name", name), ("job type", job_type), ("queue", queue or "default")):
        if not keys.valid_name(value):
            raise InvalidJob(f"schedule {name!r}: bad {what} {value!r}: use 1-100 of "
                             "A-Z a-z 0-9 _ . : -")
    _check_trigger(name, cron, every_s)
    _check_timezone(name, timezone)
    _check_policy(name, catch_up, max_catch_up, grace_s)
    unknown = set(options or {}) - JOB_OPTIONS
    if unknown:
        raise InvalidJob(f"schedule {name!r}: unknown job options {sorted(unknown)}; use "
                         f"{sorted(JOB_OPTIONS)}")
    encode_payload(payload)
    return Schedule(name, job_type, cron, every_s, payload, timezone, queue, catch_up,
                    max_catch_up, float(grace_s), dict(options or {}))


def schedule_from_json(text: str) -> Schedule:
    raw = json.loads(text)
    known = {f.name for f in fields(Schedule)}
    return Schedule(**{k: v for k, v in raw.items() if k in known})


# -- tick arithmetic (pure) -------------------------------------------------------------------
def _dt(schedule: Schedule, ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).astimezone(ZoneInfo(schedule.timezone))


def _ms(dt: datetime) -> int:
    return int(round(dt.timestamp() * 1000))


def _cron(schedule: Schedule, start: datetime) -> croniter:
    assert schedule.cron is not None  # make_schedule: a schedule without every_s has a cron
    return croniter(schedule.cron, start)


def latest_tick(schedule: Schedule, at_ms: int) -> int:
    """The latest tick at or before ``at_ms``."""
    if schedule.every_s is not None:
        every_ms = schedule.every_s * 1000
        return at_ms - at_ms % every_ms
    start = _dt(schedule, at_ms) + timedelta(milliseconds=1)
    return _ms(_cron(schedule, start).get_prev(datetime))


def next_tick(schedule: Schedule, after_ms: int) -> int:
    """The first tick after ``after_ms``."""
    if schedule.every_s is not None:
        return latest_tick(schedule, after_ms) + schedule.every_s * 1000
    return _ms(_cron(schedule, _dt(schedule, after_ms)).get_next(datetime))


def _ticks_back(schedule: Schedule, after_ms: int, now_ms: int, limit: int) -> list[int]:
    """Up to ``limit`` ticks in (after_ms, now_ms], latest first."""
    out: list[int] = []
    tick = latest_tick(schedule, now_ms)
    while tick > after_ms and len(out) < limit:
        out.append(tick)
        tick = latest_tick(schedule, tick - 1)
    return out


def due_ticks(schedule: Schedule, last_tick_ms: int, now_ms: int) -> list[int]:
    """The ticks to enqueue now, oldest first, given the last tick already enqueued: every tick
    at most ``grace_s`` late; of the missed ones (later than that) what the policy says."""
    late_ms = now_ms - int(schedule.grace_s * 1000) - 1  # a tick at or before this was missed
    on_time = _ticks_back(schedule, max(last_tick_ms, late_ms), now_ms, 1000)
    limit = {"skip": 0, "once": 0 if on_time else 1, "all": schedule.max_catch_up}
    missed = _ticks_back(schedule, last_tick_ms, late_ms, limit[schedule.catch_up])
    return sorted(on_time + missed)


def tick_key(name: str, tick_ms: int) -> str:
    """The tick's idempotency key: ``periodic:NAME:<tick time, UTC>``."""
    stamp = datetime.fromtimestamp(tick_ms / 1000, timezone.utc)
    return f"periodic:{name}:{stamp.strftime('%Y-%m-%dT%H:%M:%SZ')}"


_TICK_KEY = re.compile(r"periodic:(.+):\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def schedule_of(idempotency_key: str) -> str | None:
    """The schedule whose tick has this idempotency key (``tick_key``'s inverse); None for
    any other key (a manual run's too)."""
    match = _TICK_KEY.fullmatch(idempotency_key)
    return match.group(1) if match else None


# -- Redis: the scheduler (a worker duty) and the operators' view ----------------------------
@dataclass(frozen=True)
class TickResult:
    schedule: str
    tick_ms: int
    job_id: str
    outcome: str  # stored | tick (already enqueued) | paused | dup | recent | exists

    @property
    def idempotency_key(self) -> str:
        return tick_key(self.schedule, self.tick_ms)


class Scheduler:
    """Enqueues due ticks. Many may run at once (every worker pool runs one as a duty, behind
    the duty's lock): the enqueue script lets each tick through once."""

    def __init__(self, client: "redis.Redis", schedules: list[Schedule], *,
                 clock: Clock = system_ms, scripts: Scripts | None = None,
                 default_queue: str = "default",
                 on_tick: Callable[[Schedule, TickResult], None] | None = None) -> None:
        self.redis = client
        self.schedules = list(schedules)
        self.clock = clock
        self.scripts = scripts or Scripts(client)
        self.default_queue = default_queue
        self.on_tick = on_tick  # told of each tick this scheduler stored (the app's hooks)

    def queue(self, schedule: Schedule) -> Queue:
        return Queue(self.redis, schedule.queue or self.default_queue, clock=self.clock,
                     scripts=self.scripts)

    def publish(self) -> None:
        """Write each schedule's definition where the dashboard and CLI read it."""
        if self.schedules:
            self.redis.hset(keys.schedules_index(),
                            mapping={s.name: s.to_json() for s in self.schedules})

    def run_once(self) -> list[TickResult]:
        """One pass: each schedule's due ticks enqueued (once cluster-wide)."""
        self.publish()
        now = self.clock()
        out: list[TickResult] = []
        for schedule, last in zip(self.schedules, self._last_ticks(now)):
            if last is not None:
                out.extend(self._enqueue(schedule, due_ticks(schedule, last, now), now))
        return out

    def _last_ticks(self, now: int) -> list[int | None]:
        """Each schedule's last tick; a schedule seen for the first time starts at its latest
        tick (none of its past ticks run) and reads as None."""
        pipe = self.redis.pipeline(transaction=False)
        for s in self.schedules:
            key = self.queue(s).keys.schedule(s.name)
            pipe.hsetnx(key, "last_tick", latest_tick(s, now))
            pipe.hget(key, "last_tick")
            pipe.hset(key, "seen_at", now)  # a schedule no scheduler runs any more goes stale
        replies = pipe.execute()
        return [None if created else int(last) for created, last in zip(replies[::3],
                                                                         replies[1::3])]

    def _enqueue(self, schedule: Schedule, ticks: list[int], now: int) -> list[TickResult]:
        if not ticks:
            return []
        q = self.queue(schedule)
        built = [tick_fields(q, schedule, tick, now) for tick in ticks]
        out = [TickResult(schedule.name, tick, job_id, outcome)
               for tick, (job_id, outcome) in zip(ticks, q.store(built, now))]
        on_tick = self.on_tick
        if on_tick is not None:
            for result in out:
                if result.outcome == "stored":
                    on_tick(schedule, result)
        return out


def tick_fields(q: Queue, schedule: Schedule, tick_ms: int, now: int) -> Encoded:
    """The new job of one tick (``tick_ms`` 0: a manual run, recorded but not a tick), with the
    fields enqueue.lua checks the tick by."""
    idem = tick_key(schedule.name, tick_ms) if tick_ms else \
        f"periodic:{schedule.name}:manual:{now}"
    names, values = q.encode(JobSpec(schedule.job_type, schedule.payload, idem,
                                     **schedule.options), now)
    return (*names, "sched", "tick"), [*values, q.keys.schedule(schedule.name), str(tick_ms)]


class Schedules:
    """What operators see and do: list, pause, resume, run now (the dashboard, API and CLI).
    Reads definitions from Redis (published by the schedulers), so it needs no app code."""

    def __init__(self, client: "redis.Redis", *, clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)

    def definitions(self) -> dict[str, Schedule]:
        raw: dict[str, str] = self.redis.hgetall(keys.schedules_index())  # type: ignore[assignment]
        return {name: schedule_from_json(text) for name, text in sorted(raw.items())}

    def get(self, name: str) -> Schedule:
        text = self.redis.hget(keys.schedules_index(), name)
        if not text:
            raise KeyError(f"no schedule named {name!r} (schedules appear once a worker "
                           "running the app has started)")
        return schedule_from_json(str(text))

    def _queue(self, schedule: Schedule) -> Queue:
        return Queue(self.redis, schedule.queue or "default", clock=self.clock,
                     scripts=self.scripts)

    def list(self) -> list[ScheduleInfo]:
        defs = list(self.definitions().values())
        pipe = self.redis.pipeline(transaction=False)
        for s in defs:
            pipe.hgetall(self._queue(s).keys.schedule(s.name))
        states = pipe.execute()
        for s, state in zip(defs, states):
            pipe.hmget(self._queue(s).keys.job(state.get("last_job") or "-"),
                       "state", "finished_at", "reason", "last_error")
        jobs = pipe.execute()
        now = self.clock()
        return [_info(s, st, job, now) for s, st, job in zip(defs, states, jobs)]

    def set_paused(self, name: str, paused: bool, who: str) -> ScheduleInfo:
        """Pause (ticks are skipped, not caught up on resume) or resume a schedule."""
        schedule = self.get(name)
        key = self._queue(schedule).keys.schedule(name)
        self.redis.hset(key, mapping={"paused": "1" if paused else "0", "paused_by": who,
                                      "paused_at": self.clock()})
        return self.info(name)

    def run_now(self, name: str) -> str:
        """Enqueue one run of the schedule's job now (not a tick: ticks are unchanged)."""
        schedule = self.get(name)
        q = self._queue(schedule)
        now = self.clock()
        [(job_id, _)] = q.store([tick_fields(q, schedule, 0, now)], now)
        return job_id

    def info(self, name: str) -> ScheduleInfo:
        for info in self.list():
            if info.name == name:
                return info
        raise KeyError(f"no schedule named {name!r}")


def _outcome(job: list[Any]) -> str:
    return str(job[0] or "unknown (record expired)")


def _info(s: Schedule, state: dict[str, str], job: list[Any], now: int) -> ScheduleInfo:
    last_job = state.get("last_job") or ""
    return ScheduleInfo(
        name=s.name, job_type=s.job_type, queue=s.queue or "default", trigger=s.describe(),
        catch_up=s.catch_up if s.catch_up != "all" else f"all (up to {s.max_catch_up})",
        paused=state.get("paused") == "1", paused_by=state.get("paused_by") or "",
        last_tick_ms=int(state.get("last_tick") or 0), last_job_id=last_job,
        last_enqueued_ms=int(state.get("last_enqueued_at") or 0),
        last_outcome=_outcome(job) if last_job else "never run",
        last_finished_ms=int(job[1] or 0) if last_job else 0,
        last_error=(job[2] or job[3] or "") if last_job else "",
        next_run_ms=next_tick(s, now), seen_ms=int(state.get("seen_at") or 0),
        stale=now - int(state.get("seen_at") or 0) > STALE_AFTER_MS, as_of=now)
