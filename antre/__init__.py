"""Antre: a reliable at-least-once job queue for Python on Redis."""

from antre.app import Antre, HandlerSpec, redis_from_url
from antre.context import JobContext
from antre.errors import (InvalidJob, JobTimeout, LeaseLost, Permanent, RateLimited,
                          ResultUnavailable, Retryable, VersionConflict)
from antre.engine.progress import Progress
from antre.observe.finder import ResultStatus
from antre.limits.admission import LimitPolicy
from antre.engine.locks import LockBusy
from antre.engine.envelope import JobSpec
from antre.engine.queue import Queue
from antre.engine.retry import RetryPolicy
from antre.settings import SettingError
from antre.tasks import Task

__all__ = ["Antre", "HandlerSpec", "JobContext", "InvalidJob", "JobTimeout", "LeaseLost",
           "Permanent", "RateLimited", "Retryable", "LockBusy", "LimitPolicy", "JobSpec", "Queue", "RetryPolicy", "Task",
           "Progress", "ResultStatus", "ResultUnavailable", "SettingError", "VersionConflict",
           "redis_from_url"]
__version__ = "0.2.0.dev0"  # the one place the version is written (pyproject reads it)

_DEPRECATED = {"FlowPolicy": ("LimitPolicy", LimitPolicy)}


def __getattr__(name: str) -> object:
    """Old spellings of public names: they work, with a DeprecationWarning naming the new one."""
    if name in _DEPRECATED:
        import warnings
        new, value = _DEPRECATED[name]
        warnings.warn(f"antre.{name} is deprecated: use antre.{new}", DeprecationWarning,
                      stacklevel=2)
        return value
    raise AttributeError(f"module 'antre' has no attribute {name!r}")
