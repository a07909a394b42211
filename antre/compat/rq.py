"""RQ's ``Queue(...).enqueue(f, *args)`` on Antre, for tasks made with ``antre.compat.rq.job``
(or Celery-style ones, ``antre.compat.celery``):

```python
from antre.compat.rq import Queue, job      # was: from rq import Queue; from rq.decorators import job

@job("default")
def count_words(url: str) -> int: ...

q = Queue("default", connection=app)        # connection: the Antre app (or a Celery-style one)
result = q.enqueue(count_words, "https://example.org")
q.enqueue_in(timedelta(minutes=5), count_words, "https://example.org")
```

A worker must know the function, so it is a task registered at import (``@job``), not any
importable function as in RQ: ``enqueue`` of a plain function raises ``InvalidJob`` saying so.
The returned ``AsyncResult`` has ``.id``, ``.get_status()`` and ``.result`` as RQ's ``Job``
reads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from antre.app import Antre
from antre.compat.celery import AsyncResult, Celery, CeleryTask, UnsupportedOption, share
from antre.errors import InvalidJob

__all__ = ["Queue", "job"]

ENQUEUE_OPTIONS = ("job_id", "job_timeout")


def job(queue: str = "default", *, connection: Celery | Antre | None = None,
        **options: Any) -> Callable[[Callable[..., Any]], CeleryTask[Any, Any]]:
    """``@job("queue")``: a task on ``queue``, with ``.delay`` as RQ's decorator gives;
    registered with ``connection`` (an app) or, as a shared task, with every Celery-style app."""
    def make(fn: Callable[..., Any]) -> CeleryTask[Any, Any]:
        task: CeleryTask[Any, Any] = CeleryTask(fn, queue=queue, **options)
        if connection is not None:
            task.register(_antre(connection))
        else:
            share(task)
        return task
    return make


def _antre(connection: Celery | Antre) -> Antre:
    return connection.antre if isinstance(connection, Celery) else connection


class Queue:
    """A queue of ``connection`` (an ``Antre`` app, or a Celery-style one)."""

    def __init__(self, name: str = "default", connection: Celery | Antre | None = None) -> None:
        if connection is None:
            raise InvalidJob("Queue(name, connection=app): pass the Antre app as the connection")
        self.name, self.app = name, _antre(connection)

    def enqueue(self, f: CeleryTask[Any, Any], *args: Any, **kwargs: Any) -> AsyncResult:
        return self._send(f, args, kwargs, {})

    def enqueue_in(self, delay: timedelta, f: CeleryTask[Any, Any], *args: Any,
                   **kwargs: Any) -> AsyncResult:
        return self._send(f, args, kwargs, {"countdown": delay.total_seconds()})

    def enqueue_at(self, when: datetime, f: CeleryTask[Any, Any], *args: Any,
                   **kwargs: Any) -> AsyncResult:
        return self._send(f, args, kwargs, {"eta": when})

    def _send(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
              when: dict[str, Any]) -> AsyncResult:
        if not isinstance(f, CeleryTask):
            raise InvalidJob(f"{getattr(f, '__qualname__', f)!r} is not a task: decorate it with "
                             "@antre.compat.rq.job(queue) so workers know it, then enqueue it")
        options = {k: kwargs.pop(k) for k in ENQUEUE_OPTIONS if k in kwargs}
        unknown = sorted(k for k in kwargs if k.startswith(("result_", "failure_", "on_"))
                         or k in ("depends_on", "at_front", "retry", "meta", "description"))
        if unknown:
            raise UnsupportedOption(f"enqueue({', '.join(unknown)}=...): not supported on Antre "
                                    "(depends_on: use a chain; retry: the task's max_retries)")
        f.register(self.app)
        extra: dict[str, Any] = dict(when)
        if "job_id" in options:
            extra["task_id"] = options["job_id"]
        if "job_timeout" in options:
            extra["time_limit"] = options["job_timeout"]
        return f.apply_async(args=args, kwargs=kwargs, queue=self.name, **extra)
