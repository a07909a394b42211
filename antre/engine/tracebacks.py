"""A dead job's traceback as its readers show it. A burial keeps the traceback's head
(every line but the last) once per error group, in ``keys.QueueKeys.error_tracebacks``; the job
keeps its last line (the exception and its message) and ``tb_group``, in its ``errors`` entry
and in its ``buried`` event (``tb_share`` in antre/engine/lua/_failure.lua). ``resolve`` puts the
two together (``Queue.get``, ``ReadModels.job``, ``Finder.timeline``); an entry without
``tb_group`` (any job stored before, or whose head differed from its group's) is left as it
is."""

from __future__ import annotations

from typing import Any

from antre.engine.envelope import Job

# shown in place of a head that went with its group (retention removed the group, the job lives
# on after a replay): the job's own last line is still there
HEAD_GONE = "(the start of this traceback was kept with its error group, since removed)\n"


def join(head: str | None, tail: str, limit: int = 0) -> str:
    """The whole traceback of a head (None: gone) and a job's last line, its last ``limit``
    characters when ``limit``."""
    text = f"{head}\n{tail}" if head is not None else HEAD_GONE + tail
    return text[-limit:] if limit else text


def resolve(client: Any, heads_key: str, entries: list[Any], limit: int = 0) -> None:
    """Make the shared tracebacks of ``entries`` (errors entries, or events' details: dicts)
    whole, in place, with one HMGET of ``heads_key`` (the queue's ``error_tracebacks``) for
    all of them; ``tb_group`` is taken out."""
    shared = [e for e in entries if isinstance(e, dict) and isinstance(e.get("tb_group"), str)]
    if not shared:
        return
    groups = sorted({e["tb_group"] for e in shared})
    raw = client.hmget(heads_key, groups)
    heads = {g: (h.decode("utf-8", "replace") if isinstance(h, bytes) else h)
             for g, h in zip(groups, raw)}
    for e in shared:
        tail = e.get("traceback")
        e["traceback"] = join(heads.get(e.pop("tb_group")), tail if isinstance(tail, str) else "",
                              limit)


def resolve_job(client: Any, heads_key: str, job: Job, raw_errors: str | None) -> Job:
    """``job`` (decoded from a hash whose 'errors' text is ``raw_errors``) with its shared
    tracebacks made whole, and its ``traceback`` the last one's; untouched when none is."""
    if '"tb_group"' not in (raw_errors or ""):
        return job
    resolve(client, heads_key, job.errors)
    last = job.errors[-1] if job.errors else None
    if isinstance(last, dict) and isinstance(last.get("traceback"), str):
        job.traceback = last["traceback"]
    return job
