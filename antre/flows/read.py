"""The read model of flows: what the Flows pages, the API, the CLI and a producer's ``Flow``
handle read (typed dataclasses; nothing here writes). Bounded reads only: a page of one
state's index, one flow's jobs a page at a time, one job's links.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any, cast

import redis

from antre.engine import keys, partitions, states
from antre.engine import progress as progress_codec
from antre.engine.progress import Progress
from antre.engine.queue import Queue
from antre.errors import InvalidJob

FLOW_STATES = states.FLOW_STATES
FINAL_STATES = states.FINAL_FLOW_STATES
_ROW_FIELDS = ("kind", "state", "description", "policy", "total", "done", "failed", "pending",
               "created_at", "finished_at", "open", "failed_job", "failed_reason",
               "cancelled_by", "cancel_reason", "given_up_at", "given_up_by")
_JOB_FIELDS = ("type", "state", "attempt", "fpar", "fkids", "fhook", "last_error", "idem_key",
               "progress")
MAX_PAGE = 1000
RESULTS_PAGE = 1000  # ids (and results) read per command by iter_results


def _int(raw: str | None) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0


def _ids(raw: str | None) -> tuple[str, ...]:
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class FlowRow:
    """One flow: its state (``FLOW_STATES``), progress counters and why it stopped."""

    id: str
    queue: str
    kind: str  # 'chain', 'group', 'chord', 'batch' or 'job'
    state: str
    description: str
    policy: str  # 'fail', 'ignore', 'wait' or 'batch'
    total: int  # its members (a batch's callbacks are not)
    done: int
    failed: int  # members dead now (or, once ignored, dead when they settled)
    pending: int  # members not settled yet
    created_at: int
    finished_at: int  # 0 while not in a final state
    open: bool  # a batch that may still get jobs
    failed_job: str = ""  # the last dead member that holds it (fail / wait)
    failed_reason: str = ""
    cancelled_by: str = ""
    cancel_reason: str = ""
    # given up (fail / wait): the dead member that held it went for good ('discarded by NAME',
    # 'purged'); it stays failed, its held jobs were dropped, its other members settle as they end
    given_up_at: int = 0
    given_up_by: str = ""
    damaged: str = ""  # why its record cannot be read ('' when it can): listed, marked

    @property
    def given_up(self) -> bool:
        return self.given_up_at > 0

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def to_go(self) -> int:
        """Members neither done nor dead: a dead member holding a 'fail' / 'wait' flow is
        counted in ``failed`` and still in ``pending`` (it may be replayed), so it is taken out
        here; under 'ignore' / 'batch' it settled and left ``pending`` already, as every dead
        member of a given-up flow has."""
        held_dead = self.failed if self.policy in ("fail", "wait") and not self.given_up else 0
        return max(self.pending - held_dead, 0)

    @property
    def progress(self) -> float:
        """Settled members / members (1.0 for a flow of none)."""
        return 1.0 if self.total <= 0 else (self.total - self.pending) / self.total

    @classmethod
    def unreadable(cls, flow_id: str, queue: str, state: str, why: str) -> FlowRow:
        """A flow whose record is not a hash (written by hand, by another program): a row
        that says so, so its listing goes on."""
        return cls(flow_id, queue, "", state, f"(its record cannot be read: {why})", "fail",
                   0, 0, 0, 0, 0, 0, False, "", "", "", "", 0, "", why)

    @classmethod
    def of(cls, flow_id: str, queue: str, values: list[str | None]) -> "FlowRow":
        f = dict(zip(_ROW_FIELDS, values))
        return cls(flow_id, queue, f["kind"] or "", f["state"] or "", f["description"] or "",
                   f["policy"] or "fail", _int(f["total"]), _int(f["done"]),
                   _int(f["failed"]), _int(f["pending"]), _int(f["created_at"]),
                   _int(f["finished_at"]), f["open"] == "1", f["failed_job"] or "",
                   f["failed_reason"] or "", f["cancelled_by"] or "", f["cancel_reason"] or "",
                   _int(f["given_up_at"]), f["given_up_by"] or "")


@dataclass(frozen=True)
class FlowPage:
    state: str
    rows: list[FlowRow]
    total: int  # flows in that state
    offset: int
    limit: int


@dataclass(frozen=True)
class FlowJob:
    """One job of a flow as its tree shows it."""

    id: str
    type: str
    state: str  # a job state ('held', 'ready', ..., 'done', 'dead'), 'gone' once trimmed
    attempt: int
    parents: tuple[str, ...]  # in input order (the order their results are handed over)
    children: tuple[str, ...]
    hook: str  # a batch's callback: 'on_success' / 'on_complete'; else ''
    last_error: str
    idempotency_key: str
    progress: Progress | None = None  # its handler's last ctx.progress (read with the job)

    @property
    def attempt_text(self) -> str:
        """Its attempt as a reader counts them, from 1 (``states.attempt_text``)."""
        return states.attempt_text(self.state, self.attempt)


@dataclass(frozen=True)
class FlowTree:
    flow: FlowRow
    jobs: list[FlowJob]  # in the order they were made (parents before children)
    total_jobs: int
    offset: int
    limit: int


@dataclass(frozen=True)
class FlowLinks:
    """A job's place in its flow: the job page's links."""

    flow_id: str
    queue: str
    flow_state: str  # '' when the flow record is gone (trimmed)
    parents: tuple[str, ...]
    children: tuple[str, ...]
    hook: str


@dataclass(frozen=True)
class ChildFailure:
    """In a flow's results, a member that died and was settled as failed (``on_failure=
    'ignore'``, a batch): its id and why."""

    job_id: str
    error: str


def decode_result(raw: str | None) -> Any:
    """A stored result (see ``QueueKeys.flow_results``): its value, a ``ChildFailure``, or
    None when none is stored."""
    if raw is None or raw == "":
        return None
    if raw.startswith("!"):
        try:
            data = json.loads(raw[1:])
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        return ChildFailure(str(data.get("job_id", "")), str(data.get("error", "")))
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _page(offset: int, limit: int) -> tuple[int, int]:
    if type(offset) is not int or type(limit) is not int or offset < 0 or not 1 <= limit <= MAX_PAGE:
        raise InvalidJob(f"pass offset >= 0 and limit from 1 to {MAX_PAGE}")
    return offset, limit


class FlowReader:
    """Reads flows from Redis. Signatures (for the pages, the API and the CLI):

    - ``counts(queue) -> dict[state, int]``
    - ``list_flows(queue, state='running', offset=0, limit=50) -> FlowPage`` (newest first)
    - ``get(queue, flow_id) -> FlowRow | None``
    - ``tree(queue, flow_id, offset=0, limit=500) -> FlowTree | None``
    - ``links(queue, job_id) -> FlowLinks | None`` (None: the job is in no flow)
    - ``results(queue, flow_id) -> list[Any]`` (the flow's last jobs' results, in order; a
      batch's: its members', in the order added)
    """

    def __init__(self, client: "redis.Redis") -> None:
        self.redis = client

    def counts(self, queue: str) -> dict[str, int]:
        every = partitions.all_keys(self.redis, queue)
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            for state in FLOW_STATES:
                pipe.zcard(k.flows_by_state(state))
        counts = [int(n) for n in pipe.execute()]
        n = len(FLOW_STATES)
        return {state: sum(counts[i::n]) for i, state in enumerate(FLOW_STATES)}

    def list_flows(self, queue: str, state: str = "running", offset: int = 0,
             limit: int = 50) -> FlowPage:
        if state not in FLOW_STATES:
            raise InvalidJob(f"state must be one of {', '.join(FLOW_STATES)}, not {state!r}")
        offset, limit = _page(offset, limit)
        every = partitions.all_keys(self.redis, queue)  # merged by score, newest first
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            pipe.zrevrange(k.flows_by_state(state), 0, offset + limit - 1, withscores=True)
            pipe.zcard(k.flows_by_state(state))
        replies = pipe.execute()
        pairs = sorted((p for reply in replies[0::2] for p in reply),
                       key=lambda p: (p[1], p[0]), reverse=True)
        ids = [i for i, _ in pairs[offset:offset + limit]]
        total = sum(int(n) for n in replies[1::2])
        for flow_id in ids:
            pipe.hmget(keys.of_job(queue, flow_id).flow(flow_id), _ROW_FIELDS)
        rows = [FlowRow.unreadable(i, queue, state, _why(r)) if isinstance(r, redis.ResponseError)
                else FlowRow.of(i, queue, r) if r[1] else None
                for i, r in zip(ids, pipe.execute(raise_on_error=False))]
        return FlowPage(state, [r for r in rows if r is not None], int(total), offset, limit)

    def get(self, queue: str, flow_id: str) -> FlowRow | None:
        if not keys.valid_name(queue) or not keys.valid_job_id(flow_id):
            return None
        try:
            values = cast(list[str | None], self.redis.hmget(
                keys.of_job(queue, flow_id).flow(flow_id), _ROW_FIELDS))
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            return FlowRow.unreadable(flow_id, queue, "", _why(exc))
        return FlowRow.of(flow_id, queue, values) if values[1] else None

    def tree(self, queue: str, flow_id: str, offset: int = 0,
             limit: int = 500) -> FlowTree | None:
        offset, limit = _page(offset, limit)
        row = self.get(queue, flow_id)
        if row is None:
            return None
        k = keys.of_job(queue, flow_id)  # a flow and its jobs: in one partition
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(k.flow_jobs(flow_id))
        pipe.lrange(k.flow_jobs(flow_id), offset, offset + limit - 1)
        replies = pipe.execute(raise_on_error=False)
        if any(isinstance(r, redis.ResponseError) for r in replies):
            total, ids = 0, []  # its jobs' list is not a list: none listed
        else:
            total, ids = replies
        for job_id in ids:
            pipe.hmget(k.job(job_id), _JOB_FIELDS)
        jobs = [_job(job_id, [None] * len(_JOB_FIELDS) if isinstance(values, redis.ResponseError)
                     else values)
                for job_id, values in zip(ids, pipe.execute(raise_on_error=False))]
        return FlowTree(row, jobs, int(total), offset, limit)

    def links(self, queue: str, job_id: str) -> FlowLinks | None:
        if not keys.valid_name(queue) or not keys.valid_job_id(job_id):
            return None
        k = keys.of_job(queue, job_id)
        flow_id, par, kids, hook = cast(list[str | None], self.redis.hmget(
            k.job(job_id), ("flow", "fpar", "fkids", "fhook")))
        if not flow_id:
            return None
        try:
            state = cast(str | None, self.redis.hget(k.flow(flow_id), "state"))
        except redis.ResponseError:  # its flow's record is not a hash
            state = None
        return FlowLinks(flow_id, queue, state or "", _ids(par), _ids(kids), hook or "")

    def results(self, queue: str, flow_id: str, offset: int = 0,
                limit: int | None = None) -> list[Any]:
        """``iter_results`` from ``offset`` (at most ``limit`` of them; None: all)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidJob(f"offset must be a whole number >= 0, not {offset!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise InvalidJob(f"limit must be a whole number >= 0 or None, not {limit!r}")
        out: list[Any] = []
        for value in self.iter_results(queue, flow_id, offset):
            if limit is not None and len(out) >= limit:
                break
            out.append(value)
        return out

    def iter_results(self, queue: str, flow_id: str, offset: int = 0) -> Iterator[Any]:
        """The results of the flow's last jobs, in order, read ``RESULTS_PAGE`` at a time (a
        batch of a million members is a thousand short reads, never one reply of all): the
        ids from the batch's jobs' list (an LRANGE a page, its callbacks left out) or from
        its exits, then their results (one HMGET a page)."""
        k = keys.of_job(queue, flow_id)  # a flow and its jobs: in its partition
        try:
            kind, exits, *hooks = cast(list[str | None], self.redis.hmget(
                k.flow(flow_id), ("kind", "exits", "on_success", "on_complete")))
        except redis.ResponseError as exc:  # its record is not a hash: no results to read
            if "WRONGTYPE" not in str(exc):
                raise
            return
        pages = (self._batch_pages(k, flow_id, hooks, offset) if kind == "batch"
                 else _pages(list(_ids(exits))[offset:]))
        for ids in pages:
            try:
                raw = cast(list[str | None], self.redis.hmget(k.flow_results(flow_id), ids))
            except redis.ResponseError as exc:  # its results' record is not a hash: none
                if "WRONGTYPE" not in str(exc):
                    raise
                raw = [None] * len(ids)
            yield from (decode_result(r) for r in raw)

    def _batch_pages(self, k: keys.QueueKeys, flow_id: str, hooks: list[str | None],
                     offset: int) -> Iterator[list[str]]:
        """A batch's members' ids a page at a time, from the ``offset``-th member on (its
        callbacks, which are in its jobs' list too, are not members)."""
        start, skip = 0, offset
        while True:
            page = cast(list[str], self.redis.lrange(k.flow_jobs(flow_id), start,
                                                     start + RESULTS_PAGE - 1))
            ids = [i for i in page if i not in hooks]
            if skip:
                ids, skip = ids[skip:], max(0, skip - len(ids))
            if ids:
                yield ids
            if len(page) < RESULTS_PAGE:
                return
            start += RESULTS_PAGE


def _why(exc: BaseException) -> str:
    """What a refused read of a record says, short (WRONGTYPE: not of its type)."""
    return "not a hash" if "WRONGTYPE" in str(exc) else str(exc)[:100]


def _pages(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), RESULTS_PAGE):
        yield ids[start:start + RESULTS_PAGE]


def inputs(q: Queue, job_id: str) -> list[Any]:
    """What a job of a flow gets from its parents (``flow_inputs.lua``: one read): their
    results in its input order (``decode_result`` each)."""
    reply = q.scripts.flow_inputs(keys=[q.keys.job(job_id)], args=[q.keys.job_prefix])
    return [decode_result(r if isinstance(r, str) else None) for r in list(reply)[1:]]


def _job(job_id: str, values: list[str | None]) -> FlowJob:
    f = dict(zip(_JOB_FIELDS, values))
    return FlowJob(job_id, f["type"] or "", f["state"] or "gone", _int(f["attempt"]),
                   _ids(f["fpar"]), _ids(f["fkids"]), f["fhook"] or "", f["last_error"] or "",
                   f["idem_key"] or "", progress_codec.decode(f["progress"]))
