"""Find any job and read its whole life: by job id, by idempotency key (the exact index the
scripts keep), by payload field (``order_id=1234``, dotted paths) in bounded chunks; the job's
timeline; the producer's view of a job (``Antre.job``) and of a key's result (``Antre.result``).

Every read is indexed or bounded: a job id or a key costs one pipelined round trip over the
known queues; a payload search reads ``CHUNK`` ids (LRANGE/ZRANGE by rank) and one pipelined
HMGET of their payloads per chunk, so no single Redis command grows with the queue.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.engine.envelope import STATES, job_traceparent
from antre.engine.progress import Progress, decode as decode_progress
from antre.stores.idempotency import IdempotencyStore, Record
from antre.stores.sql import datetime_to_ms
from antre.engine import tracebacks
from antre.observe.readmodels import Page, ReadModels
from antre.engine import states

CHUNK = 500  # ids read per Redis command of a payload search
SEARCH_BUDGET_MS = 200  # one search step stops after this much time, with a cursor
MAX_HITS = 100  # hits returned by one step
STUCK_SCAN = 1_000  # in-flight jobs sorted worst first (by running or silent time)
TIMELINE_CAP = 100  # antre/engine/lua/_timeline.lua TL_CAP
SEARCH_ORDER = (states.READY, states.WAITING, states.HELD, states.SCHEDULED, states.INFLIGHT,
                states.DEAD, states.DONE)
_SEGMENT = re.compile(r"^[A-Za-z0-9_\-]{1,100}$")


class BadQuery(ValueError):
    """A finder input that cannot be understood; the message says what to type instead."""


# -- read models ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TimelineEvent:
    at_ms: int
    kind: str  # enqueued, reserved, extended, snoozed, checkpoint, failed, swept, handed_back,
    # buried, replayed, run_now, due, discarded, completed, deduplicated
    actor: str  # a worker id (host:pid:nonce), an operator's name, 'sweeper', 'producer', ...
    details: dict[str, Any] = field(default_factory=dict)
    # checkpoints and a worker's extensions in a row are one event: how many, the newest's
    # time (``at_ms`` is the first's); kind 'elided': ``count`` events dropped from between
    # the first ones and the newest past the cap, the first at ``at_ms``, the last at ``last_ms``
    count: int = 1
    last_ms: int = 0


@dataclass(frozen=True)
class Timeline:
    queue: str
    job_id: str
    events: list[TimelineEvent]
    job_exists: bool  # False: the job is gone (discarded), only its timeline is left
    capped: bool  # past the cap, events between the first ones and the newest were dropped
    trace_id: str = ""


@dataclass(frozen=True)
class Located:
    """Where a job id or an idempotency key leads."""

    queue: str
    job_id: str
    state: str  # a job state, or 'gone' (only the timeline of a discarded job is left)


@dataclass(frozen=True)
class JobStatus:
    """``Antre.job(job_id)``: what a producer may ask about a job it enqueued."""

    job_id: str
    queue: str
    state: str  # ready, scheduled, inflight, done, dead, or 'unknown'
    job_type: str = ""
    attempts: int = 0
    max_attempts: int = 0
    deliveries: int = 0
    result: Any = None
    last_error: str = ""
    reason: str = ""
    idempotency_key: str = ""
    created_at: int = 0
    finished_at: int = 0
    error_kind: str = ""
    progress: Progress | None = None  # the handler's last ctx.progress, if it called it


FINAL = frozenset({"completed", "failed", "cancelled", "abandoned"})  # ResultStatus.final


class Waits(Protocol):
    """What ``ResultStatus.wait`` asks (``antre.observe.waiting.ResultWaiter``)."""

    def wait(self, idempotency_key: str, timeout: float) -> "ResultStatus": ...


@dataclass(frozen=True)
class ResultStatus:
    """``Antre.result(idempotency_key)``: completed (with the stored result), pending, failed,
    cancelled (an operator cancelled its job), abandoned (``error`` says since when and what
    to do) or unknown. ``source``: 'sql' (the idempotency record) or 'redis' (the job itself).
    ``progress``: the running (or ended) job's last ``ctx.progress``. ``wait(timeout)`` (on a
    status from ``Antre.result``) waits for the end; ``timed_out`` says it did not come."""

    idempotency_key: str
    status: str
    result: Any = None
    job_id: str = ""
    queue: str = ""
    error: str = ""
    source: str = ""
    abandoned_since_ms: int = 0  # status 'abandoned': when its owner's lease expired
    progress: Progress | None = None
    timed_out: bool = False  # from wait(): the timeout passed before the job ended

    @property
    def final(self) -> bool:
        """Whether this is an end: completed, failed, cancelled or abandoned (not pending nor
        unknown, which a later read may change)."""
        return self.status in FINAL

    def wait(self, timeout: float) -> "ResultStatus":
        """The key's final status, waiting up to ``timeout`` seconds for its job to end (woken
        by the end itself, not by polling: see README "Waiting for a result"); when it does not
        end in time, the status then, with ``timed_out`` True. Raises ``ResultUnavailable``
        when Redis was unreachable up to the timeout. A final status returns itself."""
        check_timeout(timeout)
        if self.final:
            return self
        waiter = cast("Waits | None", self.__dict__.get("_waiter"))
        if waiter is None:
            raise RuntimeError("this ResultStatus was not read through Antre.result: call "
                               "app.result(key).wait(timeout)")
        return waiter.wait(self.idempotency_key, timeout)


def check_timeout(timeout: Any) -> float:
    """A wait's timeout in seconds, or ``ValueError`` saying what to pass."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout \
            or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0 (e.g. 30), not {timeout!r}")
    return min(float(timeout), 366 * 86_400.0)


@dataclass(frozen=True)
class Abandoned:
    """An idempotency record stuck in ``processing`` whose owner's lease expired (at
    ``since_ms``) while no job with its key exists in any queue: after Redis lost its data
    nothing will ever finish it. A resend takes it over; an operator may mark it failed or
    reset it (``antre.control.abandoned``)."""
    key: str
    job_id: str
    job_type: str
    fence: int
    since_ms: int

    @property
    def message(self) -> str:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since_ms / 1000))
        return (f"abandoned since {at}: the owner lease of job {self.job_id} expired and no job "
                f"with this key exists in any queue (Redis lost it?); nothing will finish it. "
                f"Resend the job (it takes the key over), or resolve it: mark it failed, or "
                f"reset it so a resend runs afresh")


@dataclass(frozen=True)
class Hit:
    queue: str
    state: str
    job_id: str
    job_type: str
    created_at: int
    matched: dict[str, Any]


@dataclass(frozen=True)
class SearchStep:
    """One bounded step of a payload search: the hits found in it and where to go on."""

    expression: str
    hits: list[Hit]
    scanned: int  # ids looked at so far, over all steps
    total: int  # ids in the lists searched (as of this step; they move while we look)
    cursor: str | None  # None: finished
    took_ms: int

    @property
    def done(self) -> bool:
        return self.cursor is None


# -- payload field expressions --------------------------------------------------------------
@dataclass(frozen=True)
class FieldMatch:
    path: tuple[str, ...]
    raw: str

    def value_in(self, payload: Any) -> tuple[bool, Any]:
        node = payload
        for seg in self.path:
            if isinstance(node, dict) and seg in node:
                node = node[seg]
            elif isinstance(node, list) and _INDEX.fullmatch(seg) and int(seg) < len(node):
                node = node[int(seg)]
            else:
                return False, None
        return _equal(node, self.raw), node


def _equal(value: Any, raw: str) -> bool:
    if isinstance(value, bool):
        return raw.lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(raw) == float(value)
        except ValueError:
            return False
    if isinstance(value, str):
        return value == raw or (len(raw) >= 2 and raw[0] == raw[-1] == '"' and value == raw[1:-1])
    if value is None:
        return raw == "null"
    return json.dumps(value, separators=(",", ":"), sort_keys=True) == raw


def parse_fields(text: str) -> list[FieldMatch]:
    """``order_id=1234`` or ``customer.address.city=Paris&items.0.sku=X`` (terms joined by
    '&' must all match). Raises ``BadQuery`` saying what is wrong."""
    terms = [t for t in (text or "").split("&") if t.strip()]
    if not terms:
        raise BadQuery("give a payload field to match, e.g. order_id=1234 or customer.id=7")
    out = []
    for term in terms:
        path, eq, raw = term.partition("=")
        segments = tuple(path.strip().split("."))
        if not eq or not all(_SEGMENT.match(s) for s in segments):
            raise BadQuery(f"cannot read {term.strip()!r} as field=value: write a field name "
                           "(dotted for nested fields, e.g. customer.id; list items by number, "
                           "items.0.sku), '=', then the value")
        out.append(FieldMatch(segments, raw.strip()))
    return out


def _matches(fields: list[FieldMatch], payload: Any) -> dict[str, Any] | None:
    found = {}
    for f in fields:
        ok, value = f.value_in(payload)
        if not ok:
            return None
        found[".".join(f.path)] = value
    return found


_INDEX = re.compile(r"[0-9]{1,15}")  # ASCII digits only (int() refuses '²'); within a list's range


# -- cursors --------------------------------------------------------------------------------
def _cursor(queue: str, state: str, offset: int) -> str:
    return f"{queue}|{state}|{offset}"


def _parse_cursor(text: str) -> tuple[str, str, int]:
    parts = text.split("|")
    if len(parts) != 3 or parts[1] not in STATES or not _INDEX.fullmatch(parts[2]):
        raise BadQuery("bad search cursor: start the search again without one")
    return parts[0], parts[1], int(parts[2])


def _part(name: str) -> keys.QueueKeys:
    """The keys of ``<queue>`` (partition 0) or ``<queue>~p`` (a search list's name)."""
    return keys.QueueKeys(name.rpartition("~")[0], keys.id_partition(name)) \
        if keys.id_partition(name) else keys.QueueKeys(name)


def state_key(k: keys.QueueKeys, state: str) -> str:
    """The index holding a queue's jobs in ``state`` (LIST for ready, ZSET for the others)."""
    return {states.READY: k.ready, states.SCHEDULED: k.scheduled, states.INFLIGHT: k.inflight,
            states.DEAD: k.dead, states.DONE: k.done, states.WAITING: k.waiting,
            states.HELD: k.held}[state]


def _int(v: Any) -> int:
    try:
        return int(float(v or 0))
    except (TypeError, ValueError):
        return 0


def _event(raw: str) -> TimelineEvent:
    try:
        ev = json.loads(raw)
    except ValueError:
        return TimelineEvent(0, "unreadable", "", {"raw": raw[:500]})
    details = dict(ev.get("d") or {}) if isinstance(ev.get("d"), dict) else {}
    extra = ev.get("x")
    if isinstance(extra, dict):
        details.update(extra)
    elif extra is not None:
        details["note"] = extra
    first = _int(ev.get("t"))
    return TimelineEvent(first, str(ev.get("k", "")), str(ev.get("a", "")), details,
                         max(1, _int(ev.get("n")) or 1), _int(ev.get("l")) or first)


# A delivery's routine events are kept in the job's hash, not written to its timeline
# ("A delivery's routine events" in antre/engine/lua/_timeline.lua): its 'reserved' event until
# something else happens to the job (that writes it out first, and 'tlf' names its epoch), and
# a plain completion by the job's worker for good. These are the fields they are made from.
_KEPT = ("epoch", "tlf", "reserved_at", "worker_id", "deliveries", "vt_ms", "finished_at",
         "result", "dnote")


def _kept_events(events: list[TimelineEvent], f: dict[str, Any],
                 state: str | None) -> list[TimelineEvent]:
    """``events`` (the stored ones, in order) with the delivery's events the hash ``f`` (its
    ``_KEPT`` fields; ``state``: its state) keeps:
    the current epoch's 'reserved' when no stored event carries it, then the 'completed' of a
    done job when none was stored. A 'reserved' event stored twice for one epoch (a job
    reserved by an older version and then failed under this one) is shown once."""
    seen: set[int] = set()
    out: list[TimelineEvent] = []
    for e in events:
        if e.kind == "reserved":
            epoch = e.details.get("epoch")
            if isinstance(epoch, int) and epoch in seen:
                continue
            if isinstance(epoch, int):
                seen.add(epoch)
        out.append(e)
    epoch, at = _strict_int(f.get("epoch")), _strict_int(f.get("reserved_at"))
    if epoch is not None and at is not None and epoch not in seen and f.get("tlf") != f.get("epoch"):
        vt = _strict_int(f.get("vt_ms"))
        if vt is None or vt <= 0 or vt > 604_800_000:
            vt = 30_000
        event = TimelineEvent(at, "reserved", f.get("worker_id") or "",
                              {"epoch": epoch, "delivery": _int(f.get("deliveries")),
                               "deadline": at + vt})
        place = len(out)  # (after every stored event; before any stored later, if one is)
        while place > 0 and out[place - 1].at_ms > at:
            place -= 1
        out.insert(place, event)
    finished = _strict_int(f.get("finished_at"))
    if (state == states.DONE and finished is not None
            and not any(e.kind in ("completed", "deduplicated") and e.at_ms == finished
                        for e in out)):
        result = (f.get("result") or "").encode()[:500].decode("utf-8", "replace")
        details: dict[str, Any] = {"result": result,
                                   "since_reserved_ms": finished - (at if at is not None else finished)}
        note = f.get("dnote")
        if note:
            try:
                extra = json.loads(note)
            except ValueError:
                extra = note
            if isinstance(extra, dict):
                details.update(extra)
            else:
                details["note"] = extra
        out.append(TimelineEvent(finished, "completed", f.get("worker_id") or "", details))
    return out


def _strict_int(raw: Any) -> int | None:
    """An integer field as reserve / ack write them (digits), else None."""
    if isinstance(raw, str) and raw.lstrip("-").isdigit():
        return int(raw)
    return None


class Finder:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 idempotency: IdempotencyStore | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.idempotency = idempotency

    def queue_names(self) -> list[str]:
        return sorted(cast(set[str], self.redis.smembers(keys.queues_index())))

    # -- by id and by key ---------------------------------------------------------------------
    def locate(self, job_id: str) -> Located | None:
        """The queue holding ``job_id`` (one pipelined HGET + EXISTS per known queue)."""
        if not keys.valid_job_id(job_id):
            return None
        names = self.queue_names()
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hget(keys.of_job(name, job_id).job(job_id), "state")
            pipe.exists(keys.of_job(name, job_id).timeline(job_id))
        replies = pipe.execute()
        for i, name in enumerate(names):
            if replies[2 * i]:
                return Located(name, job_id, str(replies[2 * i]))
        for i, name in enumerate(names):
            if replies[2 * i + 1]:
                return Located(name, job_id, "gone")
        return None

    def by_key(self, idempotency_key: str) -> Located | None:
        """The newest job carrying ``idempotency_key`` (the scripts' exact index), else the job
        named by the key's SQL record when a database is configured."""
        if not idempotency_key or len(idempotency_key) > 500:
            return None
        every = [k for name in self.queue_names()
                 for k in partitions.all_keys(self.redis, name)]  # each partition's index
        pipe = self.redis.pipeline(transaction=False)
        for k in every:
            pipe.hget(k.idem_index, idempotency_key)
        hits = [(k, str(job_id)) for k, job_id in zip(every, pipe.execute()) if job_id]
        if len(hits) > 1:  # the key in several partitions: the newest job carries it
            pipe = self.redis.pipeline(transaction=False)
            for k, job_id in hits:
                pipe.hget(k.job(job_id), "created_at")
            made = [_int(v) for v in pipe.execute()]
            hits = [h for _, h in sorted(zip(made, hits), key=lambda x: -x[0])]
        for _, job_id in hits:
            found = self.locate(job_id)
            if found is not None:
                return found
        record = self.idempotency.lookup(idempotency_key) if self.idempotency else None
        return self.locate(record.job_id) if record is not None and record.job_id else None

    def resolve(self, text: str) -> Located | None:
        """The finder box: a job id, else an idempotency key; None when neither is known."""
        text = (text or "").strip()
        return self.locate(text) or self.by_key(text)

    # -- the timeline ---------------------------------------------------------------------------
    def timeline(self, queue: str, job_id: str) -> Timeline:
        k = keys.of_job(queue, job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(k.timeline(job_id), 0, -1)
        pipe.hmget(k.job(job_id), "created_at", "trace_id", "state", *_KEPT)
        raw, (created, trace_id, state, *kept) = pipe.execute()
        if state and not trace_id:  # a trace made from the job's id (not stored)
            trace_id = job_traceparent(job_id)
        events = _kept_events([_event(r) for r in raw], dict(zip(_KEPT, kept)), state)
        # a burial's traceback: its error group keeps the head, the event the rest;
        # the event kept the last 2,000 characters of the whole
        tracebacks.resolve(self.redis, k.error_tracebacks,
                           [e.details for e in events if e.kind == "buried"], limit=2000)
        if events and events[0].kind == "enqueued":
            events[0].details.setdefault("trace_id", trace_id or "")
        elif state:  # an immediate job's enqueue is read from its hash (no event stored)
            events.insert(0, TimelineEvent(_int(created), "enqueued", "producer",
                                           {"delay_ms": 0, "trace_id": trace_id or ""}))
        return Timeline(queue, job_id, events, job_exists=bool(state),
                        capped=any(e.kind == "elided" for e in events),
                        trace_id=trace_id or "")

    # -- the producer's view --------------------------------------------------------------------
    def job_status(self, job_id: str, found: Located | None = None) -> JobStatus:
        """The job's status; ``found``: where ``locate`` just found it (not asked again)."""
        found = found if found is not None and found.job_id == job_id else self.locate(job_id)
        if found is None or found.state == "gone":
            return JobStatus(job_id, found.queue if found else "", "unknown")
        f = cast(dict[str, str], self.redis.hgetall(keys.of_job(found.queue, job_id).job(job_id)))
        try:
            result = json.loads(f["result"]) if f.get("result") else None
        except ValueError:
            result = f.get("result")
        return JobStatus(job_id, found.queue, f.get("state", "unknown"), f.get("type", ""),
                         _int(f.get("attempt")), _int(f.get("max_attempts")),
                         _int(f.get("deliveries")), result, f.get("last_error", ""),
                         f.get("reason", ""), f.get("idem_key", ""), _int(f.get("created_at")),
                         _int(f.get("finished_at")), f.get("error_kind", ""),
                         decode_progress(f.get("progress")))

    def result(self, idempotency_key: str) -> ResultStatus:
        """The stored result once the key's effect completed (the SQL record wins: it is what
        a duplicate delivery returns), else the newest job's state: pending while it is queued
        or running, failed when it is dead; unknown when neither knows the key."""
        record = self.idempotency.lookup(idempotency_key) if self.idempotency else None
        if record is not None and record.status == "completed":
            return ResultStatus(idempotency_key, "completed", record.result, record.job_id,
                                source="sql")
        found = self.by_key(idempotency_key)
        if found is not None and found.state != "gone":
            job = self.job_status(found.job_id, found)
            status = {states.DONE: "completed", states.DEAD: "failed"}.get(job.state, "pending")
            if status == "failed" and job.error_kind == "cancelled":
                status = "cancelled"
            return ResultStatus(idempotency_key, status, job.result, job.job_id, job.queue,
                                job.reason or job.last_error, "redis", progress=job.progress)
        if found is not None and self.cancelled_gone(found.queue, found.job_id):
            return ResultStatus(idempotency_key, "cancelled", None, found.job_id, found.queue,
                                "cancelled (the job was discarded)", "redis")
        if record is not None:
            gone = self._abandoned(record, found)
            if gone is not None:
                return ResultStatus(idempotency_key, "abandoned", None, record.job_id,
                                    error=gone.message, source="sql",
                                    abandoned_since_ms=gone.since_ms)
            status = "failed" if record.status == "failed" else "pending"
            return ResultStatus(idempotency_key, status, None, record.job_id,
                                error=record.last_error or "", source="sql")
        return ResultStatus(idempotency_key, "unknown")

    def cancelled_gone(self, queue: str, job_id: str) -> bool:
        """Whether a gone job's kept timeline ends with its cancellation (a cancel request
        that discarded it)."""
        last = self.redis.lindex(keys.of_job(queue, job_id).timeline(job_id), -1)
        return isinstance(last, str) and _event(last).kind == "cancelled"

    def abandoned(self, idempotency_key: str) -> Abandoned | None:
        """The key's record when it is abandoned (see ``Abandoned``), else None."""
        record = self.idempotency.lookup(idempotency_key) if self.idempotency else None
        if record is None or record.status != "processing":
            return None
        return self._abandoned(record, self.by_key(idempotency_key))

    def _abandoned(self, record: Record, found: Located | None) -> Abandoned | None:
        if record.status != "processing" or (found is not None and found.state != "gone"):
            return None
        # a released record (a retryable failure: deadline 0) was left at its last update
        since = record.lease_deadline_ms or datetime_to_ms(record.updated_at)
        if since > self.clock():
            return None  # its owner may still be running it
        return Abandoned(record.key, record.job_id, record.job_type, record.fence, since)

    # -- browsing ---------------------------------------------------------------------------------
    def ready_of_type(self, queue: str, job_type: str, offset: int, limit: int,
                      scan: int) -> Page:
        """Ready jobs of one type, oldest first, among the oldest ``scan`` ready jobs (the ready
        list has no per-type index: read in chunks of ``CHUNK`` ids, never all of it).
        ``total`` counts the matches in that window (of each partition's oldest ``scan``)."""
        matching: list[str] = []
        for k in partitions.all_keys(self.redis, queue):
            for start in range(0, scan, CHUNK):
                stop = min(start + CHUNK, scan)
                ids = cast(list[str], self.redis.lrange(k.ready, -stop, -start - 1))
                ids.reverse()
                pipe = self.redis.pipeline(transaction=False)
                for job_id in ids:
                    pipe.hget(k.job(job_id), "type")
                matching += [j for j, t in zip(ids, pipe.execute()) if t == job_type]
                if len(ids) < stop - start:
                    break
        reads = ReadModels(self.redis, self.clock)
        rows = reads.rows(queue, matching)
        if len(rows) > 1 and any(keys.id_partition(j) for j in matching):
            rows.sort(key=lambda r: (r.visible_at, r.id))  # the partitions merged, oldest first
        return Page(rows[offset:offset + limit], len(matching), offset, limit, self.clock())

    def inflight_worst_first(self, queue: str, sort: str, offset: int, limit: int,
                             scan: int = STUCK_SCAN) -> Page:
        """In-flight jobs, worst first: ``running`` (longest running) or ``silent`` (longest
        since the lease was last extended), among the ``scan`` soonest lease deadlines."""
        every = partitions.all_keys(self.redis, queue)
        ids = [i for k in every
               for i in cast(list[str], self.redis.zrange(k.inflight, 0, scan - 1))]
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(keys.of_job(queue, job_id).job(job_id), "reserved_at", "extended_at")
        now = self.clock()

        def since_ms(times: list[Any]) -> int:
            reserved, extended = _int(times[0]), _int(times[1])
            last = reserved if sort == "running" else max(reserved, extended)
            return now - last if last else 0
        worst = sorted(zip(ids, pipe.execute()), key=lambda p: since_ms(p[1]), reverse=True)
        page_ids = [job_id for job_id, _ in worst[offset:offset + limit]]
        total = sum(int(self.redis.zcard(k.inflight)) for k in every)
        return Page(ReadModels(self.redis, self.clock).rows(queue, page_ids),
                    min(total, scan * len(every)), offset, limit, now)

    # -- payload search -------------------------------------------------------------------------
    def _lists(self, queue: str | None, state: str | None) -> list[tuple[str, str]]:
        """(queue, state) to walk; a partition p > 0 of a queue is named ``<queue>~p`` (in
        the cursor too: ``_part``)."""
        names = [queue] if queue else self.queue_names()
        states = [state] if state else list(SEARCH_ORDER)
        parts = [k.queue + keys.partition_suffix(k.partition) for q in names
                 for k in partitions.all_keys(self.redis, q)]
        return [(q, s) for q in parts for s in states]

    def _sizes(self, lists: list[tuple[str, str]]) -> list[int]:
        pipe = self.redis.pipeline(transaction=False)
        for q, s in lists:
            key = state_key(_part(q), s)
            if s == states.READY:
                pipe.llen(key)
            else:
                pipe.zcard(key)
        return [int(n) for n in pipe.execute()]

    def _ids(self, queue: str, state: str, offset: int, count: int) -> list[str]:
        key = state_key(_part(queue), state)
        if state == states.READY:
            return cast(list[str], self.redis.lrange(key, offset, offset + count - 1))
        return cast(list[str], self.redis.zrange(key, offset, offset + count - 1))

    def _scan_chunk(self, fields: list[FieldMatch], queue: str, state: str,
                    ids: list[str]) -> list[Hit]:
        k = _part(queue)
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(k.job(job_id), "payload", "type", "created_at")
        hits = []
        for job_id, (payload, jtype, created) in zip(ids, pipe.execute()):
            try:
                found = _matches(fields, json.loads(payload)) if payload else None
            except ValueError:
                found = None
            if found is not None:
                hits.append(Hit(k.queue, state, job_id, jtype or "", _int(created), found))
        return hits

    def search(self, expression: str, queue: str | None = None, state: str | None = None,
               cursor: str | None = None, budget_ms: int = SEARCH_BUDGET_MS,
               chunk: int = CHUNK, max_hits: int = MAX_HITS) -> SearchStep:
        """One step of a payload search: chunks of ``chunk`` ids until ``budget_ms`` passed or
        ``max_hits`` were found; call again with the returned cursor to go on. Jobs move while
        the search runs, so like SCAN a job may be seen twice or missed if it moved meanwhile."""
        fields = parse_fields(expression)
        if state is not None and state not in STATES:
            raise BadQuery(f"state must be one of {', '.join(STATES)}, not {state!r}")
        if queue is not None and not keys.valid_name(queue):
            raise BadQuery(f"bad queue name {queue!r}")
        started = time.monotonic()
        lists = self._lists(queue, state)
        sizes = self._sizes(lists)
        at, offset = self._start(lists, cursor)
        hits: list[Hit] = []
        while at < len(lists) and len(hits) < max_hits:
            q, s = lists[at]
            ids = self._ids(q, s, offset, chunk)
            hits.extend(self._scan_chunk(fields, q, s, ids))
            offset += len(ids)
            if len(ids) < chunk:
                at, offset = at + 1, 0
            if (time.monotonic() - started) * 1000 >= budget_ms:
                break
        scanned = sum(sizes[:at]) + (min(offset, sizes[at]) if at < len(lists) else 0)
        nxt = _cursor(lists[at][0], lists[at][1], offset) if at < len(lists) else None
        return SearchStep(expression, hits, scanned, sum(sizes), nxt,
                          int((time.monotonic() - started) * 1000))

    @staticmethod
    def _start(lists: list[tuple[str, str]], cursor: str | None) -> tuple[int, int]:
        if not cursor:
            return 0, 0
        queue, state, offset = _parse_cursor(cursor)
        if (queue, state) not in lists:
            raise BadQuery("the search cursor does not belong to this queue/state: start again")
        return lists.index((queue, state)), offset
