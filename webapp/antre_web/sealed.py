"""Encrypted payloads on the dashboard and its API: an admin sees the payload opened with the
dashboard's key ring (``ANTRE_PAYLOAD_KEYS``); every other role sees ``[encrypted]``."""

from __future__ import annotations

import dataclasses

from antre.engine.cipher import CannotOpen, is_sealed
from antre.engine.envelope import Job, decode_stored
from antre.observe.joblog import LogLine

from . import services
from .security import current_user

HIDDEN = "[encrypted]"
SEES_PLAINTEXT = "admin"  # the role that may read an encrypted payload


def shown(job: Job) -> Job:
    """``job`` as the current user may see it: a sealed payload opened for an admin (or a
    note saying why it cannot be), ``[encrypted]`` for everyone else; other jobs as they are."""
    if not is_sealed(job.payload):
        return job
    user = current_user()
    if user is None or not user.can(SEES_PLAINTEXT):
        return dataclasses.replace(job, payload=HIDDEN)
    cipher = services.get().antre.cipher
    if cipher is None:
        return dataclasses.replace(job, payload=HIDDEN,
                                   payload_error="encrypted: the dashboard has no "
                                                 "ANTRE_PAYLOAD_KEYS to open it")
    try:
        payload, error = decode_stored(cipher.open(job.payload, job.queue, job.type, job.id))
    except CannotOpen as exc:
        return dataclasses.replace(job, payload=HIDDEN, payload_error=str(exc))
    return dataclasses.replace(job, payload=payload, payload_error=error)


def shown_log(job: Job, lines: list[LogLine]) -> tuple[list[LogLine], str]:
    """The job's own log as the current user may see it, and why not: a handler of a job
    whose payload is encrypted may have logged from it, so only an admin reads its log."""
    if not lines or not is_sealed(job.payload):
        return lines, ""
    user = current_user()
    if user is None or not user.can(SEES_PLAINTEXT):
        return [], f"{len(lines)} line(s) hidden: the job's payload is encrypted"
    return lines, ""
