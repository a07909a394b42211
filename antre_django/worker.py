"""The worker side: ``antre worker antre_django.worker:app`` runs a project's Django tasks.

With ``DJANGO_SETTINGS_MODULE`` set, ``app`` is made on first use: ``django.setup()``, then an
``Antre`` app from the ``TASKS`` entry named by ``ANTRE_DJANGO_BACKEND`` (default
``"default"``), which must be an ``AntreBackend``. It serves the backend's ``QUEUES`` and has
one handler for every Django task: it imports the task named by the job's type and runs its
function (``antre_django.jobs``).
"""

from __future__ import annotations

import threading
from typing import Any

import django
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from antre import settings

from .compat import task_backends
from .jobs import DjangoAntre

_made: dict[str, DjangoAntre] = {}
_lock = threading.Lock()


def make_app(alias: str | None = None, **kwargs: Any) -> DjangoAntre:
    """A worker's ``Antre`` app for the ``TASKS`` entry ``alias`` (default:
    ``ANTRE_DJANGO_BACKEND``, else ``"default"``); ``kwargs`` go to ``Antre`` (``clock=``)."""
    from .backend import AntreBackend

    if not apps.ready:
        django.setup()
    alias = alias or settings.DJANGO_BACKEND.get()
    backend = task_backends[alias]
    if not isinstance(backend, AntreBackend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__name__}, not "
            "antre_django.backend.AntreBackend: set ANTRE_DJANGO_BACKEND to the alias of "
            "the Antre backend")
    return backend.worker_app(**kwargs)


def __getattr__(name: str) -> Any:
    """``app``: made once, on first use (so importing this module sets nothing up)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        if "app" not in _made:
            _made["app"] = make_app()
        return _made["app"]
