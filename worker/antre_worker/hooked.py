"""The app's lifecycle hooks (``antre.hooks``) told of a job's start and of its settled outcome.

Two call sites: ``Execution`` right before the handler runs (``started``), and
``Settler._record`` once an outcome landed in Redis (``settled``): a hook sees only what is
already true, and whatever it does or raises changes nothing of the job. Which hook method an
outcome calls, and with what, is its declaration's ``told`` (outcomes.py): a success
``after_job``, a retry ``on_retry``; a burial, an expiry and a snooze cap ``on_dead``; the
others none.
"""

from __future__ import annotations

import json
from typing import Any

from antre.engine.queue import ResultJSON
from antre.engine.retry import group_signature
from antre.hooks import Hooks, JobEvent

from .held import Running
from .outcomes import Outcome, OutcomeKind


def started(hooks: Hooks, r: Running) -> None:
    """``before_job``: the handler of ``r`` is about to run."""
    hooks.emit(hooks.before_job, JobEvent(r.job, r.job.attempt + 1))


def settled(hooks: Hooks, r: Running, outcome: Outcome, kind: OutcomeKind[Any],
            ran_ms: int | None) -> None:
    """The hook methods the outcome's declaration names told of it (``ran_ms``: how long its
    handler ran); nothing when it names none, or no hook has that method."""
    told = kind.told(outcome)
    if told is None:
        return
    if told.method == "after_job":
        if hooks.after_job:
            hooks.emit(hooks.after_job, JobEvent(r.job, r.job.attempt + 1, ran_ms,
                                                 result=_result(told.result)))
        return
    methods = hooks.on_retry if told.method == "on_retry" else hooks.on_dead
    if methods:
        event = JobEvent(r.job, r.job.attempt + 1, ran_ms, error=told.error,
                         error_kind=told.kind, traceback=told.traceback, exception=r.error,
                         delay_ms=told.delay_ms,
                         signature=told.signature or group_signature(told.kind, told.error))
        hooks.emit(methods, event)


def _result(result: Any) -> Any:
    """The handler's result as it returned it (an ack may hold it encoded already)."""
    return json.loads(result) if isinstance(result, ResultJSON) else result
