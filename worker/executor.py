"""Kept so ``from antre_worker.executor import WorkerProcess`` goes on working: the executor is now
split by role (runner.py, pipeline.py, execution.py, outcomes.py, settle.py, leases.py,
failures.py, held.py; see docs/ARCHITECTURE.md)."""

from __future__ import annotations

from .held import Running
from .runner import DEFAULT_PREFETCH, EXIT_RECYCLE, WorkerProcess, default_worker_id

__all__ = ["DEFAULT_PREFETCH", "EXIT_RECYCLE", "Running", "WorkerProcess", "default_worker_id"]
