"""Replay with an edited payload: ``plan`` says what a replay of a dead job
with a new payload (and maybe a new idempotency key) would do: the diff, the handler, the
idempotency record of the key it would run under, and why it would be refused. It is the dry
run the dashboard shows and the check ``ReplayEdits.replay`` makes before it changes anything.

Refused: a job that is not dead, a payload that is not JSON or cannot be stored or does not fit
the job's typed task (``@app.task``: its model or signature, when the app knows it), and a key
whose effect already completed (the replay would only return the stored result) or is being
processed, unless a new key is given. A unique job keeps its key. A key that failed is reset
(its row forgotten, as a worker does for a plain replay) before the job is replayed: its row
carries the old payload's fingerprint, which the edited payload would not match. The original payload goes onto the timeline's
``replayed`` event; the caller audits the edit.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from antre.engine.envelope import Job, encode_payload
from antre.engine.queue import Queue
from antre.errors import InvalidJob
from antre.stores.idempotency import IdempotencyStore, Record
from antre.engine import states

MAX_KEY = 200
_KEY_RE = re.compile(rf"[A-Za-z0-9_.: \-]{{1,{MAX_KEY}}}")


@dataclass(frozen=True)
class EditPlan:
    """A dry run of a replay with an edited payload (the page, the API and the check read it)."""

    queue: str
    job_id: str
    job_type: str
    state: str
    original: Any
    edited: Any
    diff: tuple[str, ...]  # unified diff of the pretty JSON, original first
    key: str  # the idempotency key the replay runs under
    new_key: str  # '' keeps the job's own
    record_status: str  # of that key: '' no record, pending, completed, failed
    handler_known: bool | None  # None: the dashboard's app registers no handlers
    problems: tuple[str, ...]  # each a reason the replay is refused

    @property
    def resets_failed(self) -> bool:
        """The replay forgets the key's ``failed`` row first (the edited payload would not
        match its fingerprint)."""
        return self.record_status == "failed" and not self.new_key

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def changed(self) -> bool:
        return bool(self.original != self.edited)


def pretty(payload: Any) -> str:
    return json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)


def parse(text: str) -> tuple[Any, str]:
    """The edited JSON and '' , or None and what is wrong with it."""
    try:
        return json.loads(text), ""
    except ValueError as exc:
        return None, f"the payload is not JSON: {exc}"


def _key_problem(new_key: str, job: Job) -> str:
    if not new_key:
        return ""
    if not _KEY_RE.fullmatch(new_key):  # every character, not the first 100
        return (f"the new idempotency key must be 1-{MAX_KEY} of A-Z a-z 0-9 _ . : - and "
                "spaces")
    if new_key == job.idempotency_key:
        return "the new idempotency key is the job's own; leave it empty to keep it"
    return ""


def plan(queue: str, job: Job, text: str, new_key: str, record: Record | None,
         handler_known: bool | None, unique: bool,
         fits: Callable[[Any], str] | None = None) -> EditPlan:
    """The dry run. ``record``: the idempotency row of the key the replay would run under;
    ``unique``: the job holds a uniqueness entry (its key cannot change); ``fits``: why a
    payload does not fit the job's typed task (``Task.problem``), when the app knows it."""
    new_key = new_key.strip()
    edited, bad_json = parse(text)
    problems = [p for p in (bad_json, _key_problem(new_key, job)) if p]
    if job.state != states.DEAD:
        problems.append(f"job {job.id} is {job.state}, not in the dead-letter queue")
    if not bad_json:
        try:
            encode_payload(edited)
        except InvalidJob as exc:
            problems.append(str(exc))
        misfit = fits(edited) if fits is not None else ""
        if misfit:
            problems.append(f"{misfit}: the worker would bury it again")
    if new_key and unique:
        problems.append("a unique job keeps its idempotency key (its uniqueness is the key)")
    if record is not None and record.status == "completed" and new_key:
        problems.append(f"key {new_key} already completed the effect of job {record.job_id}: "
                        "a replay under it would only return that job's stored result; give "
                        "a key no job has used")
    if record is not None and record.status == "completed" and not new_key:
        problems.append(f"the effect of key {job.idempotency_key} already completed: a replay "
                        "would only return the stored result; give a new key to run it again")
    if record is not None and record.status == "processing":
        problems.append(f"key {record.key} is being processed by job {record.job_id}; give a "
                        "new key or wait")
    if handler_known is False:
        problems.append(f"no handler '{job.type}' is registered: the job would fail again")
    diff = tuple(difflib.unified_diff(pretty(job.payload).splitlines(),
                                      pretty(edited).splitlines() if not bad_json else [],
                                      "original", "edited", lineterm="", n=2))
    return EditPlan(queue, job.id, job.type, job.state, job.payload, edited, diff,
                    new_key or job.idempotency_key, new_key,
                    record.status if record is not None else "", handler_known,
                    tuple(problems))


class ReplayEdits:
    """Carries out a checked plan on the queue (one script: ``replay_edited.lua``)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def unique(self, job_id: str) -> bool:
        """Whether the job holds a uniqueness entry (then its key cannot change)."""
        return bool(self.queue.redis.hget(self.queue.keys.job(job_id), "ukey"))

    def replay(self, p: EditPlan, actor: str, reason: str,
               idempotency: IdempotencyStore | None = None) -> int:
        """1 replayed, 0 the job left the DLQ meanwhile, -1 a unique job's key cannot change;
        ``ValueError`` for a plan with problems (nothing changes). A failed key is reset in
        ``idempotency`` first (``EditPlan.resets_failed``)."""
        if not p.ok:
            raise ValueError("; ".join(p.problems))
        if p.resets_failed and idempotency is not None:
            idempotency.reset(p.key)  # only a failed row goes
        note = {"edited": True, "original_payload": p.original, "reason": reason,
                **({"new_key": p.new_key} if p.new_key else {})}
        return self.queue.replay_edited(p.job_id, p.edited, p.new_key, actor, note)


__all__ = ["EditPlan", "ReplayEdits", "plan", "parse", "pretty"]
