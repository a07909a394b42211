"""A worker's batch of failed jobs in one script call (``fail_many.lua``).

``Failure`` is one job's retry (``op='retry'``: back in ``delay_ms``, an attempt spent) or
burial (``op='bury'``: to the DLQ with ``reason``), with what ``Queue.retry`` / ``Queue.bury``
take for it; ``Queue.fail_many`` sends a batch of them in one round trip, each fenced on its
own lease and applied exactly as the single-job scripts apply it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import redis
from redis.commands.core import Script

from antre.engine.envelope import Job
from antre.engine.keys import QueueKeys
from antre.engine.retry import group_signature
from antre.engine.scripts import Batch, Pinned

FAIL_CHUNK = 100  # jobs per fail_many.lua call (each carries a traceback of up to 8,000 chars)
_encode = json.JSONEncoder(default=str, separators=(",", ":")).encode  # made once


@dataclass(frozen=True)
class Failure:
    """One failed job of a batch; ``note``: details for its timeline event."""

    job: Job
    op: Literal["retry", "bury"]
    error: str
    kind: str
    traceback: str = ""
    note: dict[str, Any] | None = None
    spend_attempt: bool = True
    delay_ms: int = 0  # retry
    keep_turn: bool = True  # retry: a lock_key's head keeps its turn (ordered handlers)
    reason: str = ""  # bury
    signature: str | None = None  # bury: the error group's ('<kind>: <normalised error>')


def failure_args(f: Failure, now: int) -> list[Any]:
    """The job's eleven arguments of ``fail_many.lua``."""
    head = [f.op, f.job.id, f.job.epoch, f.error or f.reason, f.kind, f.traceback,
            _encode(f.note) if f.note else "",
            int(f.spend_attempt)]
    if f.op == "retry":
        return head + [now + max(0, int(f.delay_ms)), "retried", int(f.keep_turn)]
    sig = f.signature or group_signature(f.kind, f.error or f.reason)
    return head + [f.reason, sig, ""]


def fail_many(client: "redis.Redis", script: Script, k: QueueKeys, now: int,
              failures: Sequence[Failure], pinned: Pinned | None = None) -> list[str]:
    """``failures`` through ``fail_many.lua`` (chunks of ``FAIL_CHUNK``, one round trip): per
    job its reply, in order ('OK', 'CANCELLED', 'OK:<group>' or 'LOST:<why>'). ``pinned``: the
    calling thread's own connection (a worker's runner, as its acks go), else a pipeline."""
    if not failures:
        return []
    keys_ = [k.inflight, k.scheduled, k.ready, k.stats, k.dead, k.error_groups, k.cancels]
    head = [k.job_prefix, now, k.dead_type_prefix, k.dead_group_prefix]
    calls = [(script, keys_, head + [a for f in failures[start:start + FAIL_CHUNK]
                                     for a in failure_args(f, now)])
             for start in range(0, len(failures), FAIL_CHUNK)]
    if pinned is not None:
        replies = pinned.call(calls)
    else:
        batch = Batch(client)
        for call in calls:
            batch.script(*call)
        replies = batch.execute()
    return [r.decode() if isinstance(r, bytes) else str(r) for reply in replies for r in reply]
