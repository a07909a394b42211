"""Writing flows: a compiled flow stored in one ``enqueue_flow.lua`` call (all or nothing),
jobs added to an open batch, a batch closed, a flow cancelled (``flow_cancel.lua``, a chunk of
its jobs per call). Every spec is checked before anything is sent (``InvalidJob`` saying what
to pass); nothing of a refused flow is stored.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Sequence

import orjson

import antre.settings as settings
from antre.engine import keys
from antre.engine.envelope import JobSpec, new_job_id
from antre.engine.queue import Queue
from antre.errors import InvalidJob
from antre.flows.compose import Node

RESULT_MAX = settings.FLOW_RESULT_MAX.default  # a member's result kept for its dependents
MAX_FLOW_JOBS = 10_000  # jobs per enqueue call (a batch takes more, a call at a time)
CANCEL_CHUNK = 500  # jobs per flow_cancel.lua call
_ids_json = json.JSONEncoder(separators=(",", ":")).encode


def result_max() -> int:
    """``ANTRE_FLOW_RESULT_MAX`` (bytes), default 64 KiB: a member whose result is larger goes
    to the DLQ with that reason instead of being stored (the worker checks it)."""
    return settings.FLOW_RESULT_MAX.get()


class FlowError(ValueError):
    """A flow change that was refused (no such flow, closed batch, finished flow)."""


@dataclass(frozen=True)
class Member:
    """One job to store: its spec, its parents' and children's ids, a batch callback's name."""

    spec: JobSpec
    parents: Sequence[str] = ()
    children: Sequence[str] = ()
    hook: str = ""


def member_ids(nodes: Sequence[Node], q: Queue | None = None) -> list[str]:
    """Each node's job id (its spec's, else a new one; with ``q``, ending with its partition's
    suffix); ``InvalidJob`` for one given twice."""
    ids = [n.spec.job_id or new_job_id() for n in nodes]
    if q is not None and (q.partition or any("~" in i for i in ids)):
        ids = [q.partition_id(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise InvalidJob("two jobs of the flow have the same job_id; give each its own or "
                         "leave job_id out")
    return ids


def members_of(nodes: Sequence[Node], ids: Sequence[str]) -> list[Member]:
    """The nodes as jobs to store, each spec given its id (a copy: the caller's is untouched)."""
    return [Member(dataclasses.replace(n.spec, job_id=job_id), [ids[p] for p in n.parents],
                   [ids[c] for c in n.children]) for n, job_id in zip(nodes, ids)]


def _encoded(q: Queue, flow_id: str, members: Sequence[Member], now: int) -> list[bytes]:
    """Each member as enqueue_flow.lua reads it (field names and values in pairs), every spec
    checked first."""
    if len(members) > MAX_FLOW_JOBS:
        raise InvalidJob(f"a flow is stored with at most {MAX_FLOW_JOBS} jobs at once; add "
                         "more to a batch (app.batch) a call at a time")
    for m in members:
        if m.spec.unique:
            raise InvalidJob(f"job {m.spec.job_type!r}: a unique job cannot be part of a "
                             "flow (a duplicate would leave the jobs after it waiting); "
                             "drop unique=")
    made = [q.encode(m.spec, now) for m in members]  # every InvalidJob before any write
    out = []
    for m, (names, values) in zip(members, made):
        pairs: list[str] = []
        for name, value in zip(names, values):
            pairs += (name, value)
        pairs += ("flow", flow_id)
        if m.parents:
            pairs += ("fdeps", str(len(m.parents)), "fpar", _ids_json(list(m.parents)),
                      "fin", str(len(m.parents)))
        if m.children:
            pairs += ("fkids", _ids_json(list(m.children)))
        if m.hook:
            pairs += ("fhook", m.hook)
        out.append(orjson.dumps(pairs))
    return out


def _keys(q: Queue, flow_id: str) -> list[str]:
    k = q.keys
    out = [k.ready, k.scheduled, k.stats, k.types, k.wake, k.held, k.flow(flow_id),
           k.flow_jobs(flow_id), k.idem_index]
    return out if q.cluster else [*out, keys.queues_index()]


def _answer(q: Queue, reply: Any, flow_id: str) -> None:
    text = str(reply)
    if q.cluster and text == "OK":
        q.redis.sadd(keys.queues_index(), q.name)
    if text.startswith("EXISTS:"):
        raise InvalidJob(f"id {text[7:]} exists already in queue {q.name!r} (a job or a "
                         "flow): nothing of the flow was stored; leave job_id / flow_id out")
    if text == "GONE":
        raise FlowError(f"no flow {flow_id} in queue {q.name!r}")
    if text.startswith("CLOSED:"):
        raise FlowError(f"flow {flow_id} is closed ({text[7:]}): no job can be added to it")


def store_new(q: Queue, flow_id: str, members: Sequence[Member], meta: dict[str, str]) -> None:
    """Store a new flow (``meta``: its fields, see enqueue_flow.lua) and its jobs."""
    if not keys.valid_job_id(flow_id):
        raise InvalidJob(f"bad flow id {flow_id!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    now = q.clock()
    args: list[Any] = [q.keys.job_prefix, now, "new", json.dumps(meta),
                       *_encoded(q, flow_id, members, now)]
    _answer(q, q.scripts.enqueue_flow(keys=_keys(q, flow_id), args=args), flow_id)


def store_added(q: Queue, flow_id: str, members: Sequence[Member]) -> None:
    """Add jobs to the open batch ``flow_id`` (``FlowError`` once it is closed)."""
    now = q.clock()
    args: list[Any] = [q.keys.job_prefix, now, "add", "", *_encoded(q, flow_id, members, now)]
    _answer(q, q.scripts.enqueue_flow(keys=_keys(q, flow_id), args=args), flow_id)


def close(q: Queue, flow_id: str) -> str:
    """Close the batch ``flow_id``; returns its state then."""
    reply = str(q.scripts.flow_close(keys=[q.keys.flow(flow_id)],
                                     args=[q.keys.job_prefix, q.clock()]))
    if reply == "GONE":
        raise FlowError(f"no flow {flow_id} in queue {q.name!r}")
    return reply


@dataclass(frozen=True)
class CancelSummary:
    """What cancelling a flow did: jobs ended at once (held, scheduled, waiting) and jobs
    asked to stop (in flight, or ready: the reserve that pops one ends it)."""

    flow_id: str
    looked_at: int
    ended: int
    requested: int


def cancel(q: Queue, flow_id: str, request_json: str) -> CancelSummary:
    """Cancel the flow and every job of it not ended yet (``FlowError`` when it is gone,
    succeeded or cancelled already). ``request_json``: a ``CancelRequest``'s JSON."""
    k, start = q.keys, 0
    looked = ended = requested = 0
    while start >= 0:
        reply = q.scripts.flow_cancel(
            keys=[k.flow(flow_id), k.flow_jobs(flow_id), k.held, k.scheduled, k.waiting,
                  k.cancels, k.dead, k.stats, k.error_groups],
            args=[k.job_prefix, q.clock(), request_json, start, CANCEL_CHUNK,
                  k.dead_type_prefix, k.dead_group_prefix])
        if isinstance(reply, str):
            if reply == "GONE":
                raise FlowError(f"no flow {flow_id} in queue {q.name!r}")
            raise FlowError(f"flow {flow_id} is {reply.partition(':')[2]} already: nothing "
                            "to cancel")
        looked, ended, requested = looked + reply[0], ended + reply[1], requested + reply[2]
        start = int(reply[3])
    return CancelSummary(flow_id, looked, ended, requested)
