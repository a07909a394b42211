"""Django tasks as Antre jobs: the job type of a task is its module path
(``shop.tasks.send_receipt``), its payload ``{"args": [...], "kwargs": {...}}``.

``DjangoAntre`` is the ``Antre`` app of both sides: its ``handlers`` resolve a job type that
names a Django task of an ``AntreBackend`` on first use, with one handler (``runner``) that
imports the task and runs its function. The producer gets the job options (max_attempts,
timeouts, ...) from it at enqueue, the worker the handler; nothing has to be registered by
hand.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import import_string

from antre import Antre, HandlerSpec, JobContext, Permanent

from .compat import (Task, TaskContext, TaskResult, TaskResultStatus, make_result,
                     normalize_json, task_finished, task_started)

# HandlerSpec fields a user may set in OPTIONS (JOB_OPTIONS, TASK_OPTIONS); the others are the
# backend's to fill in
RESERVED_OPTIONS = {"name", "fn", "queue", "is_async"}


def job_type_of(task: Task[Any, Any]) -> str:
    return task.module_path


def payload_of(task: Task[Any, Any], args: Any, kwargs: Any) -> dict[str, Any]:
    """The stored payload: the arguments bound to the function's parameters, defaults filled
    in, in their canonical form (positional where a parameter can be, so ``add(2, 3)``,
    ``add(2, b=3)`` and ``add(b=3, a=2)`` are one payload and one derived key), as JSON
    (tuples become lists, as Django's own ``TaskResult`` keeps them). ``TypeError`` at enqueue
    when they do not fit the function, or for a value JSON cannot hold."""
    context = (None,) if task.takes_context else ()
    bound = inspect.signature(task.func).bind(*context, *args, **kwargs)
    bound.apply_defaults()
    return {"args": normalize_json(list(bound.args)[len(context):]),
            "kwargs": normalize_json(dict(bound.kwargs))}


def derived_key(task: Task[Any, Any], payload: dict[str, Any]) -> str:
    """The idempotency key of a task and its (canonical) arguments: the same for every
    enqueue of the same call (a re-sent request, a retried view), so its effect runs once;
    different arguments, different key.
    ``django:<task path>:<sha256 of the canonical JSON of the arguments>``."""
    blob = json.dumps([payload["args"], payload["kwargs"]], sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return f"django:{job_type_of(task)}:{hashlib.sha256(blob.encode()).hexdigest()[:32]}"


def arguments(job_type: str, payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """The task's arguments from a stored payload; ``Permanent`` (to the DLQ, not retried)
    when it is not what the backend stores."""
    if (not isinstance(payload, dict) or not isinstance(payload.get("args", []), list)
            or not isinstance(payload.get("kwargs", {}), dict)):
        raise Permanent(f"payload of Django task {job_type} must be "
                        '{"args": [...], "kwargs": {...}}')
    return list(payload.get("args", [])), dict(payload.get("kwargs", {}))


def running_result(task: Task[Any, Any], ctx: JobContext, args: list[Any],
                   kwargs: dict[str, Any], backend: str) -> TaskResult[Any]:
    """The ``TaskResult`` a task sees in its ``TaskContext`` while it runs (``attempt`` is
    Antre's: 1 on the first run)."""
    now = timezone.now()
    return make_result(task=task, id=ctx.job.id, status=TaskResultStatus.RUNNING,
                       enqueued_at=None, started_at=now, finished_at=None,
                       last_attempted_at=now, args=args, kwargs=kwargs, backend=backend,
                       errors=[], worker_ids=[ctx.worker_id] * ctx.attempt)


def runner(task: Task[Any, Any]) -> Callable[[JobContext, Any], Any]:
    """The one handler of every Django task: runs the task's function with the stored
    arguments (and its ``TaskContext`` when it ``takes_context``), between Django's
    ``close_old_connections()`` as Django's own request cycle does, and sends
    ``task_started`` / ``task_finished`` for each attempt. Its return value is the job's
    result; one that JSON cannot hold is ``Permanent`` (the effect happened: never re-run)."""
    job_type = job_type_of(task)

    def run(ctx: JobContext, payload: Any) -> Any:
        args, kwargs = arguments(job_type, payload)
        sender = type(task.get_backend())
        result = running_result(task, ctx, args, kwargs, task.backend)
        task_started.send(sender, task_result=result)
        close_old_connections()
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        except BaseException:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", timezone.now())
            task_finished.send(sender, task_result=result)
            raise
        finally:
            close_old_connections()
        try:
            value = normalize_json(value)
        except (TypeError, ValueError) as exc:
            raise Permanent(f"the return value of {job_type} is not JSON: {exc}") from None
        from .compat import SUCCESSFUL
        object.__setattr__(result, "status", SUCCESSFUL)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "_return_value", value)
        task_finished.send(sender, task_result=result)
        return value
    return run


def in_installed_app(path: str) -> bool:
    """Whether ``path`` (``shop.tasks.send``) lies inside an app of ``INSTALLED_APPS``: a job
    type is written by whoever can write to Redis, so the worker imports no module outside the
    project's own apps to find a task."""
    from django.apps import apps

    module = path.rpartition(".")[0]
    return any(module == cfg.name or module.startswith(cfg.name + ".")
               for cfg in apps.get_app_configs())


def resolve_task(job_type: str) -> Task[Any, Any] | None:
    """The Django task a job type names, if it is one that runs on an ``AntreBackend``."""
    from .backend import AntreBackend

    if "." not in job_type or not in_installed_app(job_type):
        return None
    try:
        found = import_string(job_type)
    except ImportError:
        return None
    if not isinstance(found, Task) or not isinstance(found.get_backend(), AntreBackend):
        return None
    return found


def handler_spec(task: Task[Any, Any], options: dict[str, Any]) -> HandlerSpec:
    """The task's ``HandlerSpec``: ``OPTIONS["JOB_OPTIONS"]``, then its own entry of
    ``OPTIONS["TASK_OPTIONS"]`` (keyed by task path)."""
    job_type = job_type_of(task)
    merged = {**options.get("JOB_OPTIONS", {}),
              **options.get("TASK_OPTIONS", {}).get(job_type, {})}
    return HandlerSpec(name=job_type, fn=runner(task), queue=task.queue_name, **merged)


class TaskHandlers(dict[str, HandlerSpec]):
    """``Antre.handlers`` that finds a Django task's handler on first use (the worker looks
    handlers up with ``get``); a job type that names no such task stays unknown, so the
    worker dead-letters its job as it does any job without a handler."""

    def __init__(self, find: Callable[[str], HandlerSpec | None]) -> None:
        super().__init__()
        self._find = find
        self._making = threading.Lock()

    def _resolve(self, name: str) -> HandlerSpec | None:
        with self._making:
            spec = dict.get(self, name)
            if spec is None:
                spec = self._find(name)
                if spec is not None:
                    self[name] = spec
            return spec

    def get(self, name: str, default: Any = None) -> Any:
        spec = dict.get(self, name)
        if spec is None:
            spec = self._resolve(name)
        return default if spec is None else spec

    def __missing__(self, name: str) -> HandlerSpec:
        spec = self._resolve(name)
        if spec is None:
            raise KeyError(name)
        return spec


class DjangoAntre(Antre):
    """The ``Antre`` app of an ``AntreBackend``: on ``OPTIONS["REDIS_URL"]`` /
    ``["DATABASE_URL"]`` (else ``ANTRE_REDIS_URL`` / ``ANTRE_DATABASE_URL``); serves the
    backend's ``QUEUES`` besides its default queue; resolves Django tasks' handlers."""

    def __init__(self, options: dict[str, Any], queues: Iterable[str] = (),
                 **kwargs: Any) -> None:
        super().__init__(options.get("REDIS_URL"), options.get("DATABASE_URL"), **kwargs)
        self.options = options
        self.django_queues = sorted(queues)
        self.handlers = TaskHandlers(self._find_handler)

    def _find_handler(self, job_type: str) -> HandlerSpec | None:
        task = resolve_task(job_type)
        if task is None:
            return None
        return handler_spec(task, task.get_backend().options)

    def queues(self) -> list[str]:
        return sorted(set(super().queues()) | set(self.django_queues))
