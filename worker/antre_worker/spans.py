"""The worker's spans around a step of a job's processing: ``traced(name, step)``
is the step itself while no span is recorded (one question per job), else the step inside
``tracing.job_span`` with what it decided: ``antre.outcome`` (``continue`` when the job goes
on, else the outcome's type), a snooze's reason, the business lock's fencing token once held.
Bounded attributes only: no payload, no idempotency key, no error text."""

from __future__ import annotations

from collections.abc import Callable

from antre.observe import tracing

from .held import Running
from .outcomes import Outcome, kind_of

Step = Callable[[Running], Outcome | None]


def traced(name: str, step: Step) -> Step:
    def run(r: Running) -> Outcome | None:
        if not tracing.recording():
            return step(r)
        attrs = {"antre.lock_key": r.job.lock_key} if r.job.lock_key else {}
        with tracing.job_span(name, r.job, attrs) as span:
            outcome = step(r)
            span.set_attribute("antre.outcome", "continue" if outcome is None
                               else type(outcome).__name__)
            reason = "" if outcome is None else kind_of(outcome).snooze_reason(outcome)
            if reason:
                span.set_attribute("antre.snooze_reason", reason)
            if r.lock is not None:
                span.set_attribute("antre.lock.fence", r.lock.fence)
            return outcome
    run.__name__ = run.__qualname__ = getattr(step, "__name__", name)
    return run
