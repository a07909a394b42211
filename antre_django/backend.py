"""``AntreBackend``: Django's Tasks framework on Antre.

```python
TASKS = {
    "default": {
        "BACKEND": "antre_django.backend.AntreBackend",
        "QUEUES": ["default", "emails"],          # Django queue names = Antre queues
        "OPTIONS": {
            "REDIS_URL": "redis://127.0.0.1:6379/0",     # else ANTRE_REDIS_URL
            "DATABASE_URL": "postgresql+psycopg://...",  # else ANTRE_DATABASE_URL
            "JOB_OPTIONS": {"max_attempts": 5, "timeout_s": 60},     # every task
            "TASK_OPTIONS": {"shop.tasks.charge": {"max_attempts": 1}},
        },
    }
}
```

A task's ``enqueue`` stores one Antre job: its type the task's path, its payload the
arguments, its queue the task's ``queue_name``, a ``run_after`` as a delay. Its idempotency
key is the task's ``key`` (``@task(key=lambda order_id: f"charge:{order_id}")``), else the one
given with ``.using(idempotency_key=...)``, else one derived from the task's path and its
arguments (``jobs.derived_key``). ``get_result(id)`` reads the job back as a ``TaskResult``.
Run the tasks with ``antre worker antre_django.worker:app``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timezone as dt_timezone
from typing import Any, TypeVar, cast

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string
from typing_extensions import ParamSpec

from antre import HandlerSpec
from antre.engine import keys
from antre.engine.envelope import Job
from antre.engine import states

from .compat import (BaseTaskBackend, InvalidTask, SUCCESSFUL, Task, TaskError, TaskResult,
                     TaskResultDoesNotExist, TaskResultStatus, make_result, task_enqueued)
from .jobs import (RESERVED_OPTIONS, DjangoAntre, derived_key, in_installed_app, job_type_of,
                   payload_of)

P = ParamSpec("P")
T = TypeVar("T")

OPTION_NAMES = {"REDIS_URL", "DATABASE_URL", "JOB_OPTIONS", "TASK_OPTIONS"}
JOB_OPTION_NAMES = {f.name for f in dataclasses.fields(HandlerSpec)} - RESERVED_OPTIONS

# Antre job state -> Django status: a job waiting for a retry (scheduled) is ready again
STATUS = {states.READY: TaskResultStatus.READY, states.SCHEDULED: TaskResultStatus.READY,
          states.INFLIGHT: TaskResultStatus.RUNNING, states.DONE: SUCCESSFUL,
          states.DEAD: TaskResultStatus.FAILED}

_APPS: dict[tuple[str | None, str | None, tuple[str, ...]], DjangoAntre] = {}
_APPS_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True, kw_only=True)
class AntreTask(Task[P, T]):
    """The backend's task class: Django's ``Task`` with the idempotency key.

    ``key``: a function of the task's arguments that names the effect
    (``@task(key=lambda order_id: f"charge:{order_id}")``); ``idempotency_key``: one key for the
    next enqueue (``charge.using(idempotency_key="charge:42:retry-1").enqueue(42)``)."""

    key: Callable[..., str] | None = None
    idempotency_key: str | None = None

    def using(self, *, priority: int | None = None, queue_name: str | None = None,
              run_after: datetime | None = None, backend: str | None = None,
              idempotency_key: str | None = None) -> AntreTask[P, T]:
        made = Task.using(self, priority=priority, queue_name=queue_name, run_after=run_after,
                          backend=backend)
        if idempotency_key is not None:
            made = dataclasses.replace(made, idempotency_key=idempotency_key)
        return made


def _app_for(options: dict[str, Any], queues: Iterable[str]) -> DjangoAntre:
    """One producer app per configuration, shared by the backend's instances (Django makes
    one per thread): one Redis connection pool, not one per thread."""
    key = (options.get("REDIS_URL"), options.get("DATABASE_URL"), tuple(sorted(queues)))
    with _APPS_LOCK:
        app = _APPS.get(key)
        if app is None:
            app = _APPS[key] = DjangoAntre(options, queues)
        app.options = options
        return app


def _when(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=dt_timezone.utc) if ms else None


def exception_path(traceback: str, error: str) -> str:
    """The exception's class path from the traceback's last line (``module.Class: message``;
    builtins without a module), else from the error text (``Class: message``)."""
    lines = [line for line in (traceback or error or "").splitlines() if line.strip()]
    name = lines[-1].split(":", 1)[0].strip() if lines else ""
    if not name or " " in name:
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"


def task_errors(job: Job) -> list[TaskError]:
    """One ``TaskError`` per failed attempt (Antre keeps the last 20); a job dead-lettered
    without an exception (expired, cancelled, held back too often) gets one naming the
    reason, as ``antre.errors.Permanent``."""
    errors = [TaskError(exception_class_path=exception_path(str(e.get("traceback", "")),
                                                            str(e.get("error", ""))),
                        traceback=str(e.get("traceback") or e.get("error") or ""))
              for e in job.errors]
    if job.state == states.DEAD and not errors:
        errors.append(TaskError(exception_class_path="antre.errors.Permanent",
                                traceback=job.reason))
    return errors


class AntreBackend(BaseTaskBackend):
    """Django's Tasks on Antre: at-least-once delivery, retries with backoff, the dead-letter
    queue, and effects once per idempotency key when a database is configured."""

    task_class = AntreTask
    supports_defer = True        # run_after: a delayed job
    supports_get_result = True   # from any process, while the job is kept
    supports_priority = False    # Antre runs a queue in order: priority is refused
    supports_async_task = False  # coroutine tasks are refused (see the README)

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - OPTION_NAMES
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown names {sorted(unknown)}: "
                f"use {sorted(OPTION_NAMES)}")
        per_task = self.options.get("TASK_OPTIONS", {})
        for where, given in [("JOB_OPTIONS", self.options.get("JOB_OPTIONS", {})),
                             *[(f"TASK_OPTIONS[{p!r}]", o) for p, o in per_task.items()]]:
            bad = set(given) - JOB_OPTION_NAMES
            if bad:
                raise ImproperlyConfigured(
                    f"TASKS[{alias!r}]['OPTIONS'][{where}] has unknown job options "
                    f"{sorted(bad)}: use {sorted(JOB_OPTION_NAMES)}")
        for queue in self.queues:
            if not keys.valid_name(queue):
                raise ImproperlyConfigured(
                    f"TASKS[{alias!r}]['QUEUES']: {queue!r} is not an Antre queue name "
                    "(1-100 of A-Z a-z 0-9 _ . : -)")

    @property
    def antre(self) -> DjangoAntre:
        """The producer's ``Antre`` app (connections made on first use)."""
        return _app_for(self.options, self.queues)

    def worker_app(self, **kwargs: Any) -> DjangoAntre:
        """A new ``Antre`` app for a worker of this backend (``antre_django.worker``)."""
        return DjangoAntre(self.options, self.queues, **kwargs)

    # -- producing ---------------------------------------------------------------------------
    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        if not keys.valid_name(job_type_of(task)):
            raise InvalidTask(f"task path {job_type_of(task)!r} is its Antre job type: at most "
                              "100 characters of A-Z a-z 0-9 _ . : -")
        if not keys.valid_name(task.queue_name):
            raise InvalidTask(f"queue {task.queue_name!r} is not an Antre queue name "
                              "(1-100 of A-Z a-z 0-9 _ . : -)")

    def idempotency_key(self, task: Task[Any, Any], payload: dict[str, Any]) -> str:
        """The key given with ``using()``, else the task's ``key`` of its arguments, else the
        derived one (``jobs.derived_key``)."""
        if isinstance(task, AntreTask):
            if task.idempotency_key is not None:
                return task.idempotency_key
            if task.key is not None:
                return task.key(*payload["args"], **payload["kwargs"])
        return derived_key(task, payload)

    def _delay_s(self, task: Task[Any, Any]) -> float:
        if task.run_after is None:
            return 0.0
        return max(0.0, task.run_after.timestamp() - self.antre.clock() / 1000)

    def _enqueued(self, task: Task[P, T], job_id: str,
                  payload: dict[str, Any]) -> TaskResult[T]:
        result = make_result(task=task, id=job_id, status=TaskResultStatus.READY,
                             enqueued_at=timezone.now(), started_at=None, finished_at=None,
                             last_attempted_at=None, args=payload["args"],
                             kwargs=payload["kwargs"], backend=self.alias, errors=[],
                             worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return cast("TaskResult[T]", result)

    def enqueue(self, task: Task[P, T], args: P.args,  # type: ignore[valid-type]
                kwargs: P.kwargs) -> TaskResult[T]:  # type: ignore[valid-type]
        self.validate_task(task)
        payload = payload_of(task, args, kwargs)
        job_id = self.antre.enqueue(job_type_of(task), payload,
                                    idempotency_key=self.idempotency_key(task, payload),
                                    queue=task.queue_name, delay_s=self._delay_s(task))
        return self._enqueued(task, job_id, payload)

    async def aenqueue(self, task: Task[P, T], args: P.args,  # type: ignore[valid-type]
                       kwargs: P.kwargs) -> TaskResult[T]:  # type: ignore[valid-type]
        """``enqueue`` on ``redis.asyncio`` (``Antre.aenqueue``): one round trip, no thread."""
        self.validate_task(task)
        payload = payload_of(task, args, kwargs)
        job_id = await self.antre.aenqueue(job_type_of(task), payload,
                                           idempotency_key=self.idempotency_key(task, payload),
                                           queue=task.queue_name, delay_s=self._delay_s(task))
        return self._enqueued(task, job_id, payload)

    # -- reading back ------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The job ``result_id`` as a ``TaskResult``: READY (queued, scheduled, or waiting
        for a retry), RUNNING, SUCCESSFUL (with its return value) or FAILED (dead-lettered,
        with every attempt's error); ``TaskResultDoesNotExist`` once Antre no longer keeps it
        (a done job: ``ANTRE_DONE_RETENTION_S``, an hour by default)."""
        app = self.antre
        found = app.finder.locate(result_id)
        if found is None or found.state == "gone":
            raise TaskResultDoesNotExist(result_id)
        # Queue.get: the id's own partition, and a dead job's traceback made whole (its error
        # group keeps the head of it)
        got = app.queue(found.queue, keys.id_partition(result_id)).get(result_id)
        if got is None:
            raise TaskResultDoesNotExist(result_id)
        job = got
        task: Any = None
        if "." in job.type and in_installed_app(job.type):  # the worker's check: a job type
            try:  # is written by whoever can write to Redis; import no module outside the apps
                task = import_string(job.type)
            except ImportError:
                task = None
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{result_id} is an Antre job of type {job.type!r}, "
                                         "not a Django task")
        if task.queue_name != job.queue:
            task = task.using(queue_name=job.queue)
        status = STATUS.get(job.state, TaskResultStatus.READY)
        args, kwargs = ([], {})
        if isinstance(job.payload, dict):
            args = list(job.payload.get("args", []))
            kwargs = dict(job.payload.get("kwargs", {}))
        workers = [str(e.get("worker", "")) for e in job.errors]
        if job.state in (states.INFLIGHT, states.DONE) and job.worker_id:
            workers.append(job.worker_id)
        finished = job.state in (states.DONE, states.DEAD)
        result = make_result(task=task, id=job.id, status=status,
                             enqueued_at=_when(job.created_at),
                             started_at=_when(job.reserved_at),
                             finished_at=_when(job.finished_at) if finished else None,
                             last_attempted_at=_when(job.reserved_at), args=args,
                             kwargs=kwargs, backend=self.alias, errors=task_errors(job),
                             worker_ids=workers)
        if job.state == states.DONE:
            object.__setattr__(result, "_return_value", job.result)
        return result
