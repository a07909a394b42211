"""One import path for Django's Tasks framework: ``django.tasks`` (Django >= 6.0, Python >=
3.12) when present, else the ``django-tasks`` backport (``django_tasks``) that brings the same
API to Django 5.2 on Python 3.11.

The two differ in a few names, smoothed here: the invalid-task error (``InvalidTask`` in
Django, ``InvalidTaskError`` in the backport), the success status (``SUCCESSFUL``, later
``SUCCEEDED``) and ``TaskResult``'s fields (``metadata`` in newer versions): ``make_result``
passes only the fields the installed ``TaskResult`` has.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type-checked against the backport (what Python 3.11 has)
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import get_module_path, normalize_json
    SOURCE = "django_tasks"
else:
    try:
        from django.tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
        from django.tasks import exceptions as _exceptions
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.tasks.utils import get_module_path, normalize_json
        SOURCE = "django.tasks"
    except ImportError:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
        from django_tasks import exceptions as _exceptions
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import get_module_path, normalize_json
        SOURCE = "django_tasks"
    InvalidTask = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
    TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist

SUCCESSFUL: TaskResultStatus = (getattr(TaskResultStatus, "SUCCESSFUL", None)
                                or getattr(TaskResultStatus, "SUCCEEDED"))
_RESULT_FIELDS = {f.name for f in dataclasses.fields(TaskResult) if f.init}


def make_result(**fields: Any) -> TaskResult[Any]:
    """A ``TaskResult`` of the installed version: ``metadata`` given only where it exists."""
    if "metadata" in _RESULT_FIELDS:
        fields.setdefault("metadata", {})
    return TaskResult(**{k: v for k, v in fields.items() if k in _RESULT_FIELDS})


__all__ = ["BaseTaskBackend", "DEFAULT_TASK_PRIORITY", "InvalidTask", "SOURCE", "SUCCESSFUL",
           "Task", "TaskContext", "TaskError", "TaskResult", "TaskResultDoesNotExist",
           "TaskResultStatus", "get_module_path", "task", "make_result", "normalize_json",
           "task_backends", "task_enqueued", "task_finished", "task_started"]
