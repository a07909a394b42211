"""Sentry for Antre's jobs (``pip install antre[sentry]``): failures as Sentry events, periodic
schedules as Sentry Crons monitors. Built on the lifecycle hooks (``antre.hooks``).

```python
import sentry_sdk
from antre import Antre
from antre.integrations.sentry import SentryHook

sentry_sdk.init(dsn="https://key@o0.ingest.sentry.io/0")  # as you init it anyway
app = Antre()
app.add_hook(SentryHook())
```

A job's failure (``on_dead``; each retry too, at level warning, unless ``retries=False``) is
one event: the handler's exception (with its stack) or, when there is none (a hard timeout,
too old, held back too often), the error's text; tagged ``antre.queue``, ``antre.job_type``,
``antre.attempt``, ``antre.idempotency_key``, ``antre.error_kind`` and ``antre.outcome``
(``retried`` / ``dead``); the context ``antre job`` holds the job's id, attempts, error group
and payload, redacted (``antre.observe.redact.redact_value``). Its fingerprint is the
signature of the dashboard's error group, so Sentry groups what the DLQ page groups.

Each periodic schedule is a monitor (slug: the schedule's name, lower case, other characters
``-``; its cron or interval, timezone and grace sent as the monitor's config): ``in_progress``
when its tick is enqueued, then ``ok`` when the tick's job succeeded or ``error`` when it was
retried or died. The check-in's id is made from the tick's idempotency key, so the scheduler
(which enqueues) and the worker (which runs) report the same check-in without sharing state.

Nothing here raises into Antre: a failing ``sentry_sdk`` call is a failing hook, logged.
"""

from __future__ import annotations

import math
import re
import uuid
from typing import Any, Literal

import sentry_sdk
from sentry_sdk.crons import capture_checkin
from sentry_sdk.crons.consts import MonitorStatus

from antre.hooks import Hook, JobEvent, Tick
from antre.maintenance.periodic import Schedule, schedule_of
from antre.observe.redact import redact_value

__all__ = ["SentryHook", "check_in_id", "monitor_config", "monitor_slug"]

Level = Literal["warning", "error"]
MAX_TAG = 200  # Sentry keeps a tag's value up to this many characters
_NAMESPACE = uuid.UUID("5b1c2d8e-5a4f-4a55-9c43-5e2a8f2d6b10")  # Antre's check-in ids
_SLUG_CHARS = re.compile(r"[^a-z0-9_-]+")


def monitor_slug(schedule_name: str) -> str:
    """The Sentry monitor of a schedule: its name in lower case, other characters ``-``
    (at most 50 characters, as Sentry keeps)."""
    return _SLUG_CHARS.sub("-", schedule_name.lower()).strip("-")[:50] or "antre"


def check_in_id(idempotency_key: str) -> str:
    """The check-in of one tick (32 hex digits), the same wherever it is computed."""
    return uuid.uuid5(_NAMESPACE, idempotency_key).hex


def monitor_config(schedule: Schedule) -> dict[str, Any]:
    """The schedule as Sentry's monitor config: its crontab (or its interval, in whole minutes
    rounded up: Sentry's smallest unit), timezone, and its grace as the check-in margin."""
    if schedule.cron is not None:
        trigger: dict[str, Any] = {"type": "crontab", "value": schedule.cron}
    else:
        trigger = {"type": "interval", "value": max(1, math.ceil((schedule.every_s or 60) / 60)),
                   "unit": "minute"}
    return {"schedule": trigger, "timezone": schedule.timezone,
            "checkin_margin": max(1, math.ceil(schedule.grace_s / 60))}


class SentryHook(Hook):
    """Reports failures to Sentry and periodic ticks as cron check-ins. ``retries``: also each
    retry (level warning), not only dead jobs; ``check_ins``: the cron check-ins;
    ``payload``: the redacted payload in the event's context."""

    def __init__(self, *, retries: bool = True, check_ins: bool = True,
                 payload: bool = True) -> None:
        self.retries = retries
        self.check_ins = check_ins
        self.payload = payload

    @property
    def name(self) -> str:
        return "SentryHook"

    def on_retry(self, event: JobEvent) -> None:
        if self.retries:
            self.capture(event, "retried", "warning")
        self._check_in(event, MonitorStatus.ERROR)

    def on_dead(self, event: JobEvent) -> None:
        self.capture(event, "dead", "error")
        self._check_in(event, MonitorStatus.ERROR)

    def after_job(self, event: JobEvent) -> None:
        self._check_in(event, MonitorStatus.OK)

    def on_tick(self, event: Tick) -> None:
        if self.check_ins:
            capture_checkin(monitor_slug=monitor_slug(event.schedule.name),
                            check_in_id=check_in_id(event.idempotency_key),
                            status=MonitorStatus.IN_PROGRESS,
                            monitor_config=monitor_config(event.schedule))  # type: ignore[arg-type]

    # -- events --------------------------------------------------------------------------
    def capture(self, event: JobEvent, outcome: str, level: Level) -> str | None:
        """One Sentry event for a job's failure; its id (None when the SDK dropped it)."""
        with sentry_sdk.new_scope() as scope:
            for tag, value in self.tags(event, outcome).items():
                scope.set_tag(tag, value[:MAX_TAG])
            scope.set_context("antre job", self.context(event))
            scope.fingerprint = [event.signature]
            scope.level = level
            if event.exception is not None:
                return sentry_sdk.capture_exception(event.exception)
            return sentry_sdk.capture_message(event.error or event.signature, level=level)

    @staticmethod
    def tags(event: JobEvent, outcome: str) -> dict[str, str]:
        return {"antre.queue": event.queue, "antre.job_type": event.job_type,
                "antre.attempt": str(event.attempt),
                "antre.idempotency_key": event.idempotency_key,
                "antre.error_kind": event.error_kind, "antre.outcome": outcome}

    def context(self, event: JobEvent) -> dict[str, Any]:
        job = event.job
        out: dict[str, Any] = {"job_id": job.id, "queue": job.queue, "type": job.type,
                               "attempt": event.attempt, "max_attempts": job.max_attempts,
                               "error_group": event.signature, "error": event.error}
        if not event.exception and event.traceback:
            out["traceback"] = event.traceback
        if self.payload:
            out["payload"] = redact_value(job.payload)
        return out

    def _check_in(self, event: JobEvent, status: str) -> None:
        """A periodic job's end, as its tick's check-in (nothing for any other job)."""
        name = schedule_of(event.idempotency_key) if self.check_ins else None
        if name is None:
            return
        duration = event.duration_ms / 1000 if event.duration_ms is not None else None
        capture_checkin(monitor_slug=monitor_slug(name),
                        check_in_id=check_in_id(event.idempotency_key), status=status,
                        duration=duration)
