"""Antre: a reliable at-least-once job queue for Python on Redis."""

from antre.app import Antre, HandlerSpec, redis_from_url
from antre.context import JobContext
from antre.errors import (InvalidJob, JobTimeout, LeaseLost, Permanent, RateLimited,
                          ResultUnavailable, Retryable, VersionConflict)
from antre.engine.progress import Progress
from antre.observe.finder import ResultStatus
from antre.scheduling.flow import FlowPolicy
from antre.engine.locks import LockBusy
from antre.engine.envelope import JobSpec
from antre.engine.queue import Queue
from antre.engine.retry import RetryPolicy
from antre.tasks import Task

__all__ = ["Antre", "HandlerSpec", "JobContext", "InvalidJob", "JobTimeout", "LeaseLost",
           "Permanent", "RateLimited", "Retryable", "LockBusy", "FlowPolicy", "JobSpec", "Queue", "RetryPolicy", "Task",
           "Progress", "ResultStatus", "ResultUnavailable", "VersionConflict", "redis_from_url"]
__version__ = "0.1.0"
