"""The exceptions of Antre's public surface, and how a handler's error is classified."""

from __future__ import annotations


class AntreError(Exception):
    """Base class of Antre's own errors."""


class InvalidJob(AntreError, ValueError):
    """``enqueue`` was given something that cannot be stored; the message says what to change."""


class LeaseLost(AntreError):
    """The job's lease changed (expired and re-delivered, or acked elsewhere): nothing was changed."""


class Retryable(AntreError):
    """A transient failure: the job is retried after backoff, spending an attempt."""

    def __init__(self, message: str = "", *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Permanent(AntreError):
    """A failure that retrying cannot fix: the job goes straight to the dead-letter queue."""


class RateLimited(AntreError):
    """A downstream said 'not now': rescheduled after ``retry_after_s``, no attempt spent."""

    def __init__(self, retry_after_s: float = 1.0, message: str = "") -> None:
        super().__init__(message or f"rate limited; retry after {retry_after_s:g}s")
        self.retry_after_s = float(retry_after_s)


class VersionConflict(AntreError):
    """A versioned row changed since it was read (``antre.stores.versioned.versioned_update``,
    ``ctx.versioned_update``): raised from a handler, its SQL rolls back and the job is
    re-queued behind its lock_key (or shortly, without one) with no attempt spent, counted as
    ``version_conflict``."""

    def __init__(self, table: str, key: object, expected: int, message: str = "") -> None:
        super().__init__(message or f"{table} {key!r} is no longer at version {expected} "
                                    "(changed since it was read, or gone)")
        self.table, self.key, self.expected = table, key, expected


class JobTimeout(Retryable):
    """The handler ran past its ``timeout_s``."""


class ResultUnavailable(AntreError):
    """``app.result(key).wait(timeout)`` could not reach Redis up to its timeout (it retried
    meanwhile): whether the job ended is not known. Wait again once Redis is back."""
