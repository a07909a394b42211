"""Import the application object a worker serves from ``pkg.module:attr``."""

from __future__ import annotations

import importlib
import os
import sys

from antre import Antre


class AppLoadError(ValueError):
    """APP_PATH does not name an ``Antre`` object; the message says what to fix."""


def load_app(path: str) -> Antre:
    """``pkg.module:attr`` (``attr`` defaults to ``app``): an ``Antre``, or an object holding one
    as ``.antre`` (a Celery-style app). The current directory is importable, as it is for
    ``python -m``."""
    module_name, _, attr = path.partition(":")
    attr = attr or "app"
    if not module_name:
        raise AppLoadError(f"bad app path {path!r}: expected pkg.module:attr, e.g. myapp.jobs:app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"cannot import {module_name!r} (from app path {path!r}): {exc}") from exc
    obj = getattr(module, attr, None)
    if obj is None:
        raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}")
    if not isinstance(obj, Antre) and isinstance(getattr(obj, "antre", None), Antre):
        obj = obj.antre  # a Celery-style app (antre.compat.celery.Celery) holds its Antre
    if not isinstance(obj, Antre):
        raise AppLoadError(f"{path!r} is a {type(obj).__name__}, not an antre.Antre")
    return obj
