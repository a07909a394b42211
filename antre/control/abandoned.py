"""Resolving an abandoned idempotency record (``antre.observe.finder.Abandoned``: stuck in
``processing``, its owner's lease expired, no job with its key in any queue): mark it
``failed`` (``Antre.result`` then answers failed, with the operator's reason) or ``reset`` it
(the record goes; a resend runs afresh). Both are fenced on the record as it was seen: a
delivery that took the key over since keeps it. Who asked, and the audit entry, are the
caller's (the dashboard's actions, the CLI)."""

from __future__ import annotations

from antre.observe.finder import Abandoned, Finder
from antre.stores.idempotency import IdempotencyStore

RESOLUTIONS = ("failed", "reset")


class ResolveError(Exception):
    """Nothing was changed; the message says why and what to do."""


class AbandonedRecords:
    def __init__(self, finder: Finder, store: IdempotencyStore) -> None:
        self.finder = finder
        self.store = store

    def resolve(self, key: str, to: str, *, by: str, reason: str = "") -> Abandoned:
        """Mark the abandoned record of ``key`` failed, or reset it; returns what it was.
        Raises ``ResolveError`` when ``to`` is unknown or the record is not abandoned."""
        if to not in RESOLUTIONS:
            raise ResolveError(f"resolve to one of {', '.join(RESOLUTIONS)}, not {to!r}")
        found = self.finder.abandoned(key)
        if found is None:
            raise ResolveError(f"the idempotency record {key!r} is not abandoned (no record, "
                               "not processing, its owner's lease still runs, or a job with "
                               "this key exists); nothing was changed")
        if to == "failed":
            error = f"{found.message} — marked failed by {by}" + (f": {reason}" if reason else "")
            done = self.store.fail(key, found.fence, error, True, job_id=found.job_id)
        else:
            done = self.store.forget_processing(key, found.fence, found.job_id)
        if not done:
            raise ResolveError(f"the idempotency record {key!r} changed meanwhile (a delivery "
                               "took it over); nothing was changed")
        return found


__all__ = ["AbandonedRecords", "ResolveError", "RESOLUTIONS"]
