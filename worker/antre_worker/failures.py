"""A handler's failure as an outcome: the retry policy decides (``antre.engine.retry.classify``), and
the idempotency record of a delivery that owns its key is told first (released for a retry,
failed for good when buried). Shared by the execution step and the hard timeout; so is the
outcome of an operator's cancel request (``cancelled``)."""

from __future__ import annotations

import logging

from antre.observe.logs import job_fields
from antre.engine.retry import Decision, RetryPolicy, classify, describe

from .held import Running
from .outcomes import Cancelled, DropStale, Outcome, from_decision

log = logging.getLogger("antre.worker")

HARD_TIMEOUT_DEFAULT = Decision("retry", 0, True, "timeout", "")  # no handler to ask


def failure_outcome(r: Running, policy: RetryPolicy | None, exc: BaseException) -> Outcome:
    """Classify ``exc`` for the job's next attempt, record it, and say what to do."""
    job = r.job
    decision = (classify(exc, attempt=job.attempt + 1, max_attempts=job.max_attempts,
                         policy=policy) if policy is not None else HARD_TIMEOUT_DEFAULT)
    record_failure(r, describe(exc), permanent=decision.action == "dead")
    return from_decision(decision, exc)


def record_failure(r: Running, error: str, *, permanent: bool) -> None:
    if r.store is None:
        return
    try:
        r.store.fail(r.job.idempotency_key, r.job.epoch, error, permanent, job_id=r.job.id)
    except Exception as exc:
        log.error("could not record the failure in the idempotency store: %s", exc,
                  extra=job_fields(r.job, "error"))


def cancelled(r: Running) -> Outcome:
    """The outcome of a cancelled job: its idempotency claim (if it holds one) is released,
    or failed for good when it goes to the DLQ; nothing of its run commits. A handler that
    returns after the heartbeat abandoned it only tells the idempotency record now."""
    req = r.cancel
    assert req is not None
    record_failure(r, req.dlq_reason, permanent=req.to == "dlq")
    if r.closed or r.lease_lost:
        return DropStale("cancelled after its lease was given up")
    return Cancelled(req.to, req.dlq_reason)
