"""The demo application: the three seed scenarios (email, stock sync, webhook -> invoice) and
jobs that inject faults, plus the traffic that drives them and a duplicate-effects report.

``antre worker antre_demo:app`` / ``antre web antre_demo:app`` serve :data:`app`; tests build
their own with :func:`make_app`. ``app`` is built on first access (PEP 562), so the
``ANTRE_REDIS_URL`` / ``ANTRE_DATABASE_URL`` it uses are those set by then, not at import.
"""

from __future__ import annotations

from typing import Any

from antre import Antre
from antre.clock import Clock, system_ms

from . import tables
from .handlers import (
    QUEUES,
    FakeEmailProvider,
    Faults,
    ProviderTimeout,
    email_key,
    email_payload,
    faults,
    register,
)
from .report import report
from .traffic import MIX, Traffic

__all__ = [
    "MIX",
    "QUEUES",
    "FakeEmailProvider",
    "Faults",
    "ProviderTimeout",
    "Traffic",
    "app",
    "email_key",
    "email_payload",
    "faults",
    "make_app",
    "report",
    "setup",
    "tables",
]


def make_app(redis_url: str | None = None, database_url: str | None = None,
             clock: Clock | None = None) -> Antre:
    """A fresh ``Antre`` with every demo handler registered (URLs default to the environment)."""
    return register(Antre(redis_url, database_url, clock=clock or system_ms))


def setup(app: Antre) -> None:
    """Create the demo tables in the app's database (Antre's own tables migrate on first use)."""
    if app.engine is not None:
        tables.create_tables(app.engine)


def __getattr__(name: str) -> Any:
    if name == "app":
        value = make_app()
        globals()["app"] = value
        return value
    raise AttributeError(f"module 'antre_demo' has no attribute {name!r}")
