"""The app's lifecycle hooks (``antre.hooks``) told of a job's start and of its settled outcome.

Two call sites: ``Execution`` right before the handler runs (``started``), and
``Settler._record`` once an outcome landed in Redis (``settled``): a hook sees only what is
already true, and whatever it does or raises changes nothing of the job. Which outcome is which
event is said once, by the outcome's event name (``outcomes.event_of``):

==================================  ==============
event names                         hook method
==================================  ==============
succeeded                           ``after_job``
retried                             ``on_retry``
buried, max_age, snooze_capped      ``on_dead``
(any other)                         none
==================================  ==============
"""

from __future__ import annotations

import json
from typing import Any

from antre.engine.queue import ResultJSON
from antre.engine.retry import group_signature
from antre.hooks import Hooks, JobEvent

from .held import Running
from .outcomes import Ack, Bury, Expired, Outcome, Retry, SnoozeCap

DEAD_EVENTS = frozenset({"buried", "max_age", "snooze_capped"})


def started(hooks: Hooks, r: Running) -> None:
    """``before_job``: the handler of ``r`` is about to run."""
    hooks.emit(hooks.before_job, JobEvent(r.job, r.job.attempt + 1))


def settled(hooks: Hooks, r: Running, outcome: Outcome, event: str,
            ran_ms: int | None) -> None:
    """The hook methods of ``event`` told of ``outcome`` (nothing for an event with none);
    ``ran_ms``: how long its handler ran."""
    if event == "succeeded" and hooks.after_job:
        result = _result(outcome.result) if isinstance(outcome, Ack) else None
        hooks.emit(hooks.after_job, JobEvent(r.job, r.job.attempt + 1, ran_ms, result=result))
    elif event == "retried" and hooks.on_retry:
        hooks.emit(hooks.on_retry, failure_event(r, outcome, ran_ms))
    elif event in DEAD_EVENTS and hooks.on_dead:
        hooks.emit(hooks.on_dead, failure_event(r, outcome, ran_ms))


def _result(result: Any) -> Any:
    """The handler's result as it returned it (an ack may hold it encoded already)."""
    return json.loads(result) if isinstance(result, ResultJSON) else result


def failure_event(r: Running, outcome: Outcome, ran_ms: int | None) -> JobEvent:
    """A retry's or a dead job's event: its error, kind, traceback, exception and error group
    signature (as the settling script records it: ``Queue.bury``, ``failing.failure_args``)."""
    error, kind, tb, delay_ms, signature = _failure(outcome)
    return JobEvent(r.job, r.job.attempt + 1, ran_ms, error=error, error_kind=kind,
                    traceback=tb, exception=r.error, delay_ms=delay_ms,
                    signature=signature or group_signature(kind, error))


def _failure(outcome: Outcome) -> tuple[str, str, str, int, str]:
    """(error, kind, traceback, delay_ms, signature or '') of a failure outcome."""
    if isinstance(outcome, Retry):
        return outcome.error, outcome.kind, outcome.traceback, outcome.delay_ms, ""
    if isinstance(outcome, Bury):
        return outcome.error or outcome.reason, outcome.kind, outcome.traceback, 0, ""
    if isinstance(outcome, Expired):
        return outcome.reason, "expired", "", 0, outcome.signature
    if isinstance(outcome, SnoozeCap):
        return outcome.reason, "snooze_cap", "", 0, outcome.signature
    return "", "", "", 0, ""
