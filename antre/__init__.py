"""Antre: a reliable at-least-once job queue for Python on Redis."""

from .app import Antre, HandlerSpec
from .context import JobContext
from .errors import InvalidJob, JobTimeout, LeaseLost, Permanent, RateLimited, Retryable
from .flow import FlowPolicy
from .locks import LockBusy
from .envelope import JobSpec
from .queue import Queue
from .retry import RetryPolicy

__all__ = ["Antre", "HandlerSpec", "JobContext", "InvalidJob", "JobTimeout", "LeaseLost",
           "Permanent", "RateLimited", "Retryable", "LockBusy", "FlowPolicy", "JobSpec", "Queue", "RetryPolicy"]
__version__ = "0.1.0"
