"""Queue operations: each state change of a job is one Lua script (see ``antre/engine/lua``).

A ``Queue`` is cheap; it holds a Redis client, the queue's keys and the clock. Every method that
depends on time reads ``clock()``; tests pass a ``ManualClock`` instead of sleeping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Any, Iterable, Iterator, Sequence, cast

import redis
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.commands.core import Script

from antre.engine import keys
from antre.engine import progress as progress_codec
from antre.clock import Clock, system_ms
from antre.engine import states
from antre.engine.envelope import (DEFAULT_MAX_PAYLOAD_BYTES, ENTROPY_HEX, MAX_SECONDS, NEW_FIELDS,
                       RESERVE_FIELDS, ROW_ID, TRACEPARENT, Job, JobSpec, checked_payload,
                       encode_new, encode_payload, from_fields, from_raw_row, new_entropy,
                       new_values, pack_chunk, pack_new, pack_standard, rate_field)
from antre.errors import InvalidJob, LeaseLost
from antre.engine.failing import Failure, fail_many
from antre.engine.retry import error_signature, group_signature
from antre.engine import tracebacks
from antre.engine.scripts import (Batch, Call, Scripts, direct, direct_ok, script_and_command,
                                  script_raw)

if TYPE_CHECKING:
    from antre.engine.cipher import PayloadCipher

# the codec lives in antre/engine/envelope.py; these names stay importable from here
__all__ = ["DONE_MAX", "DONE_RETENTION_MS", "MAX_SECONDS", "RESERVE_FIELDS", "TRACEPARENT",
           "Handover", "JobSpec", "Queue", "ResultJSON", "SweepResult", "encode_result"]

DONE_RETENTION_MS = 3_600_000
DONE_MAX = 10_000
# a single enqueue adds its job's type and queue to their indexes (SETs that only grow) for
# the first job of a type, then at most once per this many seconds per Queue (enqueue_one)
INDEX_EVERY_MS = 1000
ACK_CHUNK = 200  # jobs per ack_many.lua call
ENQUEUE_CHUNK = 100  # jobs per enqueue.lua call of enqueue_many / store
DISCARDED_TIMELINE_MS = 7 * 86_400_000  # a discarded job's timeline stays this long
Note = dict[str, Any] | None  # a transition's details from the caller, on the job's timeline


def _note(note: Note) -> str:
    if not note:
        return ""
    if len(note) == 1 and type(note.get("ran_ms")) is int:  # a plain job's ack: no encoder
        return '{"ran_ms":%d}' % note["ran_ms"]
    return json.dumps(note, default=str, separators=(",", ":"))


class ResultJSON(str):
    """A handler's result already encoded as the ack stores it (``encode_result``): passed as
    the result, it is stored as it is, not encoded again."""


encode_result = json.JSONEncoder(default=str, separators=(",", ":")).encode  # one encoder


def _result(result: Any) -> str:
    if result is None:
        return ""
    return result if type(result) is ResultJSON else encode_result(result)


@dataclass(frozen=True)
class Handover:
    """What ``Queue.handover`` did: ``status`` 'OK', 'LOST:<why>' (the lease was lost; the job
    unchanged, its lock released) or 'LOCK' (the lock was not held any more: nothing changed);
    ``jobs`` the reserve behind it took; ``next_id`` ('' none) the key's next head whose lock
    was taken, for its delivery of lease epoch ``next_epoch``, with fencing token ``fence``."""
    status: str
    jobs: list[Job]
    next_id: str = ""
    next_epoch: int = 0
    fence: int = 0


@dataclass(frozen=True)
class SweepResult:
    requeued: int
    buried: int
    outcomes: dict[str, str]


Encoded = tuple[tuple[str, ...], list[str]]  # a new job's field names and values


def _runs(encoded: Iterable[Encoded],
          chunk: int) -> Iterator[tuple[tuple[str, ...], list[list[str]]]]:
    """Consecutive jobs with the same field names, at most ``chunk`` per run (one script call
    each: unique jobs and periodic ticks carry extra fields)."""
    names: tuple[str, ...] = ()
    run: list[list[str]] = []
    for job_names, values in encoded:
        if run and (len(run) >= chunk or job_names is not names and job_names != names):
            yield names, run
            run = []
        names = job_names
        run.append(values)
    if run:
        yield names, run


def _held_ids(ids: Sequence[str], replies: Sequence[Any]) -> list[str]:
    """Each job's id, or for a unique job whose key was held, the id of the job holding it."""
    return [job_id if reply == 1 else _stored(job_id, reply)[0]
            for job_id, reply in zip(ids, replies)]


def _stored(job_id: str, reply: Any) -> tuple[str, str]:
    if reply == 1:
        return job_id, "stored"
    if reply == 0:
        return job_id, "exists"
    outcome, _, holder = str(reply).partition(":")
    return holder, outcome


def _lease_result(reply: str, job_id: str) -> str:
    if reply.startswith("LOST:"):
        raise LeaseLost(f"job {job_id}: {reply[5:]}; nothing was changed")
    return reply


class Queue:
    def __init__(self, client: "redis.Redis", name: str = "default", *, clock: Clock = system_ms,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 done_retention_ms: int = DONE_RETENTION_MS, done_max: int = DONE_MAX,
                 scripts: Scripts | None = None, partition: int = 0,
                 cipher: PayloadCipher | None = None,
                 sealed_types: AbstractSet[str] | None = None) -> None:
        if not keys.valid_name(name):
            raise InvalidJob(f"bad queue name {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        self.redis = client
        self.name = name
        # one of the queue's partitions (antre/engine/partitions.py): its keys have their own
        # hash tag, the ids made here end with its suffix ('' for partition 0)
        self.partition = partition
        self.id_suffix = keys.partition_suffix(partition)
        self.keys = keys.QueueKeys(name, partition)
        self.clock = clock
        self.max_payload_bytes = max_payload_bytes
        self.done_retention_ms = done_retention_ms
        self.done_max = done_max
        # encrypted payloads (antre/engine/cipher.py): with a cipher, new payloads of the
        # types in sealed_types (None: every type) are stored sealed
        self.cipher = cipher
        self.sealed_types = sealed_types
        self.scripts = scripts or Scripts(client)
        # on a cluster each queue's wake list is in its own slot: one BLPOP cannot watch several
        self.cluster = isinstance(client, RedisCluster)
        k = self.keys  # built once: each key property formats a string
        self._enqueue_keys = [k.ready, k.scheduled, k.stats, k.types, k.wake]
        self._reserve_keys = [k.ready, k.inflight, k.stats, k.paused, k.parked_types,
                              k.tombstones, k.dead, k.error_groups, k.quarantine, k.cancels]
        self._job_prefix = k.job_prefix
        self._index_command = ("SADD", keys.queues_index(), name)
        # not on a cluster (the index is in another slot): enqueue.lua adds the queue's name to
        # the index itself (KEYS[6]), and a thread's enqueues share one connection (Pinned)
        pinned = self.scripts.pinned
        self._pinned = pinned if pinned is not None and pinned.client is client else None
        self._indexed_keys = [*self._enqueue_keys, keys.queues_index()]
        # enqueue_one.lua's keys: without the indexes, with the type's, with both
        self._one_keys = [k.ready, k.stats, k.wake, k.idem_index]
        self._one_typed_keys = [*self._one_keys, k.types]
        self._one_indexed_keys = [*self._one_typed_keys, keys.queues_index()]
        self._indexed_at = -INDEX_EVERY_MS  # when the set below was started (the clock's ms)
        self._indexed_types: set[str] = set()  # types a single enqueue indexed since then

    # -- producing -------------------------------------------------------------------------
    def build(self, spec: JobSpec, now: int) -> dict[str, str]:
        """Validate ``spec`` and return the hash fields of the new job (raises ``InvalidJob``)."""
        return dict(zip(*self.encode(spec, now)))

    def encode(self, spec: JobSpec, now: int, entropy: str | None = None,
               now_text: str | None = None) -> Encoded:
        """The new job's field names and values (``NEW_FIELDS``, then a unique job's
        ``ukey`` / ``unique_ms`` that enqueue.lua reads to deduplicate it). ``entropy``,
        ``now_text``: see ``envelope.encode_new``."""
        return self._encoded(spec, now, checked_payload(spec, self.name, self.max_payload_bytes),
                             entropy, now_text)

    def _encoded(self, spec: JobSpec, now: int, payload: str, entropy: str | None = None,
                 now_text: str | None = None) -> Encoded:
        """``encode`` of a spec that ``checked_payload`` passed, given its payload text."""
        values = new_values(spec, self.name, now, payload, entropy, now_text)
        if self.id_suffix or spec.job_id and keys.PARTITION_SEP in spec.job_id:
            values[0] = self.partition_id(values[0])
        if self.cipher is not None:
            self._seal(values)
        if not spec.unique and spec.group is None:
            return NEW_FIELDS, values
        names: tuple[str, ...] = NEW_FIELDS
        if spec.unique:
            names += ("ukey", "unique_ms")
            values += [self.keys.unique(spec.idempotency_key), str(int(spec.unique_for_s * 1000))]
        if spec.group is not None:  # a fair-share group: its name and slots (enqueue.lua)
            names += ("fgroup", "gconc")
            values += [spec.group, str(spec.group_concurrency or "")]
            if spec.group_rate is not None:  # its rate, '<starts>/<window ms>' (rate_start)
                names += ("grate",)
                values += [rate_field(spec.group_rate)]
        return names, values

    def _seal(self, values: list[str]) -> None:
        """A new job's payload (``NEW_FIELDS`` values) sealed, when its type is sealed here."""
        assert self.cipher is not None
        if ((self.sealed_types is None or values[1] in self.sealed_types)
                and not values[5].startswith('{"$enc":')):  # (a sealed copy stays as it is)
            values[5] = self.cipher.seal(values[5], values[3], values[1], values[0])

    def seals(self, job_type: str) -> bool:
        """Whether new payloads (and results) of ``job_type`` are stored sealed here."""
        return self.cipher is not None and (self.sealed_types is None
                                            or job_type in self.sealed_types)

    def partition_id(self, job_id: str) -> str:
        """``job_id`` ending with this partition's suffix (an id made in another partition
        is refused: the job would be looked for there)."""
        p = keys.id_partition(job_id)
        if p == self.partition:
            return job_id
        if p:
            raise InvalidJob(f"job id {job_id!r} belongs to partition {p}, not "
                             f"{self.partition}, of queue {self.name!r}")
        return job_id + self.id_suffix

    def enqueue(self, job_type: str, payload: Any, *, idempotency_key: str,
                lock_key: str | None = None, delay_s: float = 0.0, **options: Any) -> str:
        """Store a job; returns its id. A job id that already exists is left as it is.
        ``lock_key``: jobs of this queue sharing it run one at a time in enqueue order (the
        others wait, state 'waiting'); ``group``: fair shares, at most ``group_concurrency``
        (default 128) of the group's jobs ready or running at once, the rest wait their turn."""
        spec = JobSpec(job_type, payload, idempotency_key, lock_key, delay_s, **options)
        return self.enqueue_one(spec)

    def enqueue_one(self, spec: JobSpec) -> str:
        """``enqueue_many([spec])`` in one round trip, on the leanest path: one EVALSHA on the
        thread's own connection (``scripts.Pinned``); elsewhere ``scripts.script_and_command``
        (the script and the queue-index SADD written together). A job made ready now with an
        id made here (the common case) goes to ``enqueue_one.lua``, which does only what such
        a job needs (and adds the job's type and queue to their indexes for the first job of a
        type, then once every ``INDEX_EVERY_MS``); a delayed job, a unique one or one with the
        caller's id goes to ``enqueue.lua``."""
        if spec.unique or spec.group is not None:  # its reply may name another job; a
            return self.enqueue_many([spec])[0]      # group is a named field (enqueue.lua)
        now = self.clock()
        values, script, script_keys, args = self._one_call(spec, now)
        if script is self.scripts.enqueue:
            indexed = self._indexed_keys
        else:
            indexed = self._one_indexed_keys
            if self._pinned is not None and not self._index_due(spec.job_type, now):
                indexed = self._one_keys
        if self._pinned is not None:
            self._pinned.call([(script, indexed, args)])
            if indexed is self._one_indexed_keys:
                self._indexed_types.add(spec.job_type)
        else:
            script_and_command(self.redis, script, script_keys, args, self._index_command)
        return values[0]

    def _one_call(self, spec: JobSpec, now: int) -> tuple[list[str], Script, list[str],
                                                          list[Any]]:
        """A single job's values and its script call (keys without the queue index): the lean
        ``enqueue_one.lua`` for a job made ready now with an id made here, ``enqueue.lua``
        for a delayed job, one with the caller's id or one with a lock_key (it may wait behind
        its key's head: only enqueue.lua knows how)."""
        values = encode_new(spec, self.name, now, self.max_payload_bytes)
        if self.id_suffix or spec.job_id and keys.PARTITION_SEP in spec.job_id:
            values[0] = self.partition_id(values[0])
        if self.cipher is not None:
            self._seal(values)
        if spec.job_id or values[2] != values[7] or values[9]:  # the caller's id, visible
            # later, or a lock_key
            return (values, self.scripts.enqueue, self._enqueue_keys,
                    [self._job_prefix, now, "", pack_new(values)])
        return values, self.scripts.enqueue_one, self._one_typed_keys, [self._job_prefix, *values]

    def enqueue_calls(self, specs: Sequence[JobSpec],
                      chunk: int = ENQUEUE_CHUNK) -> tuple[list[str], list[Call]]:
        """What ``enqueue_one`` / ``enqueue_many`` send, as calls an asynchronous client sends
        itself (``antre.engine.aio``): the jobs' ids and the script calls, then the queue
        index's SADD. Every spec is checked first (``InvalidJob`` before anything is made).
        With one spec that is not unique, its lean single-job call; else ``enqueue.lua`` per
        chunk (a unique job's reply may name the job holding its key: see ``stored_ids``)."""
        now = self.clock()
        index: Call = (None, self._index_command, ())
        if len(specs) == 1 and not specs[0].unique and specs[0].group is None:
            values, script, script_keys, args = self._one_call(specs[0], now)
            return [values[0]], [(script, script_keys, args), index]
        ids, made = self._encoder(specs, now)
        calls: list[Call] = [(self.scripts.enqueue, self._enqueue_keys,
                              self._run_args(names, part, now))
                             for names, part in _runs(made, chunk)]
        return ids, [*calls, index]

    @staticmethod
    def stored_ids(ids: Sequence[str], replies: Sequence[Any]) -> list[str]:
        """Each job's id from ``enqueue_calls``' replies (the last one is the index's): a
        unique job whose key was held gives the id of the job holding it."""
        per_job = [r for reply in replies[:-1] for r in (reply if isinstance(reply, list)
                                                          else [reply])]
        if len(per_job) != len(ids):  # the lean single-job script answers with the id
            return list(ids)
        return _held_ids(ids, per_job)

    def _index_due(self, job_type: str, now: int) -> bool:
        """Whether a single enqueue of ``job_type`` at ``now`` (ms, the queue's clock) adds its
        type and queue to their indexes: for the first job of a type, then once every
        ``INDEX_EVERY_MS`` (the indexes only grow; one removed by hand, or by a flush, is whole
        again within that time)."""
        if not 0 <= now - self._indexed_at < INDEX_EVERY_MS:  # (a clock set back starts over)
            self._indexed_at, self._indexed_types = now, set()
        return job_type not in self._indexed_types

    def enqueue_many(self, specs: Iterable[JobSpec], chunk: int = ENQUEUE_CHUNK) -> list[str]:
        """Store many jobs in few round trips (one script call per ``chunk`` jobs). Returns
        each job's id; for a unique job whose key is held, the id of the job holding it.
        Every spec is checked first: an ``InvalidJob`` stores none of them. Then each chunk
        is written to Redis as soon as it is made, so Redis stores one chunk while the next is
        made (on a thread's own connection, ``scripts.Pinned.call_made``)."""
        now = self.clock()
        specs = list(specs)
        if not specs:
            return []
        ids, made = self._encoder(specs, now)
        return _held_ids(ids, self._send(_runs(made, chunk), now))

    def _encoder(self, specs: Sequence[JobSpec], now: int) -> tuple[list[str], Iterator[Encoded]]:
        """Every spec checked now (an ``InvalidJob`` before anything is made or sent), then the
        jobs made one by one as the caller takes them, each id appended to the list as its job
        is made (so a chunk can be sent while the next is made)."""
        name, limit = self.name, self.max_payload_bytes
        payloads = [checked_payload(s, name, limit) for s in specs]  # every refusal, first
        ids: list[str] = []

        def encoded() -> Iterator[Encoded]:
            raw = new_entropy(len(specs))  # the random bits of every new id, in one call
            make, now_text = self._encoded, str(now)
            for i, spec in enumerate(specs):
                job = make(spec, now, payloads[i], raw[i * ENTROPY_HEX:(i + 1) * ENTROPY_HEX],
                           now_text)
                ids.append(job[1][0])
                yield job
        return ids, encoded()

    def _run_args(self, names: tuple[str, ...], part: list[list[str]], now: int) -> list[Any]:
        """enqueue.lua's arguments for one run of jobs (their values in one argument)."""
        if names == NEW_FIELDS:
            return [self._job_prefix, now, "", pack_standard(part)]
        return [self._job_prefix, now, json.dumps(names), pack_chunk(part)]

    def store(self, encoded: list[Encoded], now: int,
              chunk: int = ENQUEUE_CHUNK) -> list[tuple[str, str]]:
        """Send encoded jobs to enqueue.lua; returns (id, outcome) per job, outcome being
        'stored', 'exists' or a guard's refusal ('dup', 'recent', 'tick', 'paused'), the id
        then the job that holds the key or the tick (may be '')."""
        if not encoded:
            return []
        replies = self._send(_runs(encoded, chunk), now)
        return [(values[0], "stored") if reply == 1 else _stored(values[0], reply)
                for (_, values), reply in zip(encoded, replies)]

    def _send(self, runs: Iterable[tuple[tuple[str, ...], list[list[str]]]],
              now: int) -> list[Any]:
        """One enqueue.lua call per run of jobs (their values in one argument); returns the
        script's reply for each job. On the thread's own connection each call is written as
        soon as its run is made, with the queue index in the script (one command per run);
        elsewhere the calls and the index's SADD go in one batch."""
        script = self.scripts.enqueue
        if self._pinned is not None:
            indexed = self._indexed_keys
            out = self._pinned.call_made(
                (script, indexed, self._run_args(names, part, now)) for names, part in runs)
        else:
            batch = Batch(self.redis)
            for names, part in runs:
                batch.script(script, self._enqueue_keys, self._run_args(names, part, now))
            batch.command("sadd", keys.queues_index(), self.name)
            out = batch.execute()[:-1]
        return [r for reply in out for r in reply]

    # -- consuming -------------------------------------------------------------------------
    def reserve(self, worker_id: str, count: int = 1) -> list[Job]:
        k = self.keys
        args: list[Any] = [k.job_prefix, self.clock(), count, worker_id, k.parked_prefix,
                           k.dead_type_prefix, k.dead_group_prefix]  # (fields: RESERVE_FIELDS)
        # the reply is read undecoded: a job holding bytes that are not UTF-8 is that job's
        # problem (from_raw_row), not a failure of the batch's whole reply
        if self._pinned is not None:  # a runner thread's own connection, as a producer's
            rows = self._pinned.call([(self.scripts.reserve, self._reserve_keys, args)],
                                     raw=True)[0]
        else:
            rows = script_raw(self.redis, self.scripts.reserve, self._reserve_keys, args)
        return self._reserved(rows, worker_id)

    def _reserved(self, rows: list[list[bytes | None]], worker_id: str) -> list[Job]:
        """The jobs of reserve's reply (read undecoded) for ``worker_id``; one whose id is not
        UTF-8 (no command could name it as text) goes to the quarantine instead."""
        name = self.name
        jobs = [from_raw_row(row, name, worker_id) for row in rows]
        if all(not job.payload_error for job in jobs):
            return jobs
        kept = []
        for row, job in zip(rows, jobs):
            if job.payload_error and "field 'id'" in job.payload_error:
                k = self.keys
                self.scripts.quarantine(
                    keys=[k.inflight, k.quarantine, k.stats],
                    args=[row[ROW_ID] or b"", self.clock(),
                          "job id is not UTF-8 text (found by reserve)"])
            else:
                kept.append(job)
        return kept

    def wait_and_reserve(self, worker_id: str, count: int, timeout_s: float) -> list[Job]:
        """An idle runner's wait: block until a job is enqueued or promoted (or ``timeout_s``),
        then reserve up to ``count`` jobs. Both go in one write: Redis runs the reserve the
        moment the wait ends, so a woken runner gets its jobs with the wake (one round trip and
        one thread wake-up, not two). That reserve reads the server's clock (the client's is up
        to ``timeout_s`` old by then), so it is used with the system clock only; with another
        clock, on a cluster or a single-connection client it is ``wait_for_work`` + ``reserve``."""
        if self.clock is not system_ms or not direct_ok(self.redis):
            self.wait_for_work(timeout_s)
            return self.reserve(worker_id, count)
        k = self.keys
        calls: list[Call] = [
            (None, ("BLPOP", k.wake, timeout_s), ()),
            (self.scripts.reserve, self._reserve_keys,
             [k.job_prefix, "server", count, worker_id, k.parked_prefix, k.dead_type_prefix,
              k.dead_group_prefix])]
        _, rows = (self._pinned.call(calls, raw=True) if self._pinned is not None
                   else direct(self.redis, calls, raw=True))
        return self._reserved(rows, worker_id)

    def ack(self, job: Job, result: Any = None, *, counter: str = "acked",
            note: Note = None, release: Call | None = None) -> bool | None:
        """in-flight → done. Raises ``LeaseLost`` if ``job.epoch`` is no longer the lease.
        ``note``: details for the 'completed' event of the job's timeline (run time, fence).
        ``release``: the job's lock release (``Locks.release_call``), sent first in the same
        round trip; returns whether the lock was still held (None without one)."""
        if release is None or not direct_ok(self.redis):
            _lease_result(self.scripts.ack(*self._ack_call(job, result, counter, note)), job.id)
            return None
        ack_keys, ack_args = self._ack_call(job, result, counter, note)
        released, reply = direct(self.redis, [release, (self.scripts.ack, ack_keys, ack_args)])
        _lease_result(reply if isinstance(reply, str) else reply.decode(), job.id)
        return bool(int(released))

    def handover_ok(self) -> bool:
        """Whether ``handover`` may be used: the lock's keys and the queue's on one server
        (not a cluster; not a single-connection client)."""
        return direct_ok(self.redis)

    def handover(self, job: Job, result: Any, *, lock_key: str, token: str, worker_id: str,
                 count: int, next_token: str = "", ttl_ms: int = 0, note: Note = None
                 ) -> "Handover":
        """A locked job's end and its key's next job in one round trip (the hot
        key): ``handover.lua`` checks the lock is still held by ``token`` (else nothing
        changes: status 'LOCK'), releases it and acks the job (the key's turn passes); when
        the new head is the next job a reserve takes, its lock is taken with ``next_token``
        (``ttl_ms``, for a head of ``job``'s type); then ``reserve.lua`` takes up to ``count``
        jobs for ``worker_id``. ``Handover.next_id`` / ``next_epoch``: the delivery that lock
        was taken for (the caller releases it if it did not get that delivery). Callers check
        ``handover_ok`` first. Raises ``LeaseLost`` as ``ack`` does only through the status
        (the jobs reserved behind it are the caller's either way)."""
        k, now = self.keys, self.clock()
        ack_keys, ack_args = self._ack_call(job, result, "acked", note)
        hand_keys = [*ack_keys, keys.lock(lock_key), keys.lock_fence(lock_key),
                     keys.locks_held(), keys.locks_since(), k.ready, k.paused, k.wake, k.turns,
                     k.gate_active]
        hand_args = [*ack_args, token, lock_key, next_token, int(ttl_ms), job.type,
                     f"{self.name}/"]
        calls: list[Call] = [
            (self.scripts.handover, hand_keys, hand_args),
            (self.scripts.reserve, self._reserve_keys,
             [k.job_prefix, now, count, worker_id, k.parked_prefix, k.dead_type_prefix,
              k.dead_group_prefix])]
        hand, rows = (self._pinned.call(calls, raw=True) if self._pinned is not None
                      else direct(self.redis, calls, raw=True))
        status, next_id = hand[0].decode(), hand[1].decode()
        return Handover(status, self._reserved(rows, worker_id), next_id, int(hand[2]),
                        int(hand[3]))

    def ack_many(self, done: Sequence[tuple[Job, Any]],
                 notes: Sequence[Note] | None = None) -> list[Job]:
        """Ack several jobs in one round trip (one ``ack_many.lua`` call per ``ACK_CHUNK``
        jobs: each job fenced on its own lease, as ``ack``); returns the jobs whose lease was
        lost (nothing of those changed)."""
        if not done:
            return []
        k, now = self.keys, self.clock()
        keys_ = [k.inflight, k.done, k.stats]
        head = [k.job_prefix, now, self.done_retention_ms, self.done_max, "acked"]
        calls = []
        for start in range(0, len(done), ACK_CHUNK):
            args: list[Any] = list(head)
            for i in range(start, min(start + ACK_CHUNK, len(done))):
                job, result = done[i]
                args += (job.id, job.epoch, _result(result),
                         _note(notes[i]) if notes is not None else "",
                         job.created_at if job._plain else "")
            calls.append(args)
        if self._pinned is not None:  # every chunk in one write, on this thread's connection
            replies = [r for reply in self._pinned.call(
                [(self.scripts.ack_many, keys_, args) for args in calls]) for r in reply]
        elif len(calls) == 1:
            replies = self.scripts.ack_many(keys=keys_, args=calls[0])
        else:
            batch = Batch(self.redis)
            for args in calls:
                batch.script(self.scripts.ack_many, keys_, args)
            replies = [r for reply in batch.execute() for r in reply]
        return [job for (job, _), reply in zip(done, replies) if str(reply).startswith("LOST:")]

    def _ack_call(self, job: Job, result: Any, counter: str,
                  note: Note = None) -> tuple[list[str], list[Any]]:
        k = self.keys
        return ([k.job(job.id), k.inflight, k.done, k.stats, k.timeline(job.id)],
                [job.id, job.epoch, self.clock(), _result(result), self.done_retention_ms,
                 self.done_max, k.job_prefix, counter, _note(note), ""])

    def retry(self, job: Job, *, delay_ms: int, error: str = "", kind: str = "error",
              traceback: str = "", spend_attempt: bool = True, undeliver: bool = False,
              counter: str = "retried", note: Note = None, count_snooze: bool = False,
              keep_turn: bool = True) -> bool:
        """in-flight → scheduled (or ready when ``delay_ms`` <= 0); True when the job was
        cancelled by an operator instead, and so ended as cancelled (never put back). ``keep_turn=False``: a job
        holding its lock_key's turn gives it to the next in line and waits at the end of it."""
        k = self.keys
        now = self.clock()
        reply = self.scripts.retry(
            keys=[k.job(job.id), k.inflight, k.scheduled, k.ready, k.stats, k.timeline(job.id),
                  k.dead, k.error_groups, k.cancels],
            args=[job.id, job.epoch, now, now + max(0, int(delay_ms)), int(spend_attempt),
                  int(undeliver), error, kind, traceback, counter, _note(note), "",
                  int(count_snooze), int(keep_turn), k.dead_type_prefix, k.dead_group_prefix])
        return _lease_result(reply, job.id) == "CANCELLED"

    def fail_many(self, failures: Sequence[Failure]) -> list[str]:
        """Retry or bury a batch of failed jobs in one round trip, each fenced on its own
        lease as ``retry`` / ``bury`` (``failing.fail_many``): per job its reply, in order."""
        return fail_many(self.redis, self.scripts.fail_many, self.keys, self.clock(), failures,
                         self._pinned)

    def hand_back(self, job: Job, note: Note = None) -> bool:
        """Graceful shutdown: back to ready, no attempt spent, the delivery not counted; True
        when the job was cancelled and so ended as cancelled instead."""
        return self.retry(job, delay_ms=0, spend_attempt=False, undeliver=True, counter="handed_back",
                   note=note)

    def snooze(self, job: Job, delay_ms: int, why: str, counter: str = "snoozed",
               note: Note = None, keep_turn: bool = True) -> bool:
        """Rate limited, lock busy, breaker open: later, no attempt spent. ``note``: what held
        it back (the lock and its fence, the limiter, ...) for the job's timeline.
        ``keep_turn=False``: a job with a lock_key waits behind its key's next job (a version
        conflict)."""
        return self.retry(job, delay_ms=delay_ms, spend_attempt=False, undeliver=True,
                          counter=counter, error="", kind=why, note=note, count_snooze=True,
                          keep_turn=keep_turn)

    def bury(self, job: Job, *, reason: str, error: str = "", kind: str = "permanent",
             traceback: str = "", signature: str | None = None, spend_attempt: bool = True,
             note: Note = None) -> str:
        """in-flight → dead. Returns the error group id."""
        k = self.keys
        sig = signature or group_signature(kind, error or reason)
        reply = self.scripts.bury(
            keys=[k.job(job.id), k.inflight, k.dead, k.stats, k.error_groups, k.timeline(job.id)],
            args=[job.id, job.epoch, self.clock(), reason, error or reason, kind, traceback, sig,
                  k.dead_type_prefix, k.dead_group_prefix, int(spend_attempt), _note(note), ""])
        return _lease_result(reply, job.id)[3:]

    def finish_cancelled(self, job: Job, *, to: str, reason: str) -> None:
        """in-flight → the DLQ with ``reason`` (``to='dlq'``) or gone (``'discard'``): an
        operator's cancel request carried out. Raises ``LeaseLost`` if the lease changed."""
        k = self.keys
        reply = self.scripts.cancel_finish(
            keys=[k.job(job.id), k.inflight, k.dead, k.stats, k.error_groups, k.cancels,
                  k.timeline(job.id)],
            args=[job.id, job.epoch, self.clock(), to, reason,
                  f"cancelled: {error_signature(reason)}", k.dead_type_prefix,
                  k.dead_group_prefix, k.job_prefix])
        _lease_result(reply, job.id)

    def extend(self, job_id: str, epoch: int, ms: int, *, mode: str = "from_now",
               cap_ms: int = 0, actor: str = "", note: Note = None) -> int:
        """Move the lease deadline; returns the new deadline. ``mode='add'`` adds ``ms`` to the
        current deadline (the dashboard's button); ``'from_now'`` sets now + ms (heartbeats).
        ``actor``: who, for the timeline (default: the worker holding the job)."""
        k = self.keys
        reply = self.scripts.extend_lease(
            keys=[k.job(job_id), k.inflight, k.timeline(job_id)],
            args=[job_id, epoch, self.clock(), int(ms), mode, int(cap_ms), actor, _note(note)])
        return int(_lease_result(reply, job_id))

    def checkpoint(self, job: Job, state: Any) -> None:
        """Persist a running job's progress (lease-fenced); a retry starts from it."""
        text = json.dumps(state, default=str, separators=(",", ":"))
        k = self.keys
        _lease_result(self.scripts.checkpoint(keys=[k.job(job.id), k.timeline(job.id)],
                                              args=[job.epoch, text, self.clock(), ""]), job.id)
        job.checkpoint = state

    def progress(self, job: Job, fraction: float, message: str = "") -> None:
        """Store a running job's progress (``ctx.progress``; lease-fenced, no timeline event):
        ``fraction`` 0..1 and a short text, checked here (``ValueError`` says what to pass).
        Raises ``LeaseLost`` when the lease is no longer ``job``'s."""
        value, text = progress_codec.checked(fraction, message)
        _lease_result(self.scripts.progress(
            keys=[self.keys.job(job.id)],
            args=[job.epoch, progress_codec.encode(value, text, self.clock())]), job.id)

    def wait_start(self, job_id: str) -> str:
        """Count one more producer waiting for the job's end (``result_wait.lua``): the script
        that ends it pushes a token to ``keys.result_wake(job_id)``. Returns the job's state
        ('' when it does not exist; 'done' and 'dead' count nothing)."""
        k = self.keys
        return str(self.scripts.result_wait(keys=[k.job(job_id), k.result_wake(job_id)]))

    # -- maintenance -----------------------------------------------------------------------
    def promote(self, limit: int = 1000) -> int:
        k = self.keys
        return int(self.scripts.promote_due(keys=[k.scheduled, k.ready, k.wake],
                                            args=[k.job_prefix, self.clock(), limit]))

    def sweep(self, limit: int = 1000) -> SweepResult:
        k = self.keys
        reply = self.scripts.sweep_expired(
            keys=[k.inflight, k.ready, k.dead, k.stats, k.error_groups, k.quarantine, k.cancels],
            args=[k.job_prefix, self.clock(), limit, k.dead_type_prefix, k.dead_group_prefix])
        outcomes = dict(zip(reply[2::2], reply[3::2]))
        return SweepResult(int(reply[0]), int(reply[1]), outcomes)

    # ``actor`` (an operator's name) and ``note`` (e.g. the bulk task) go on the timeline
    def replay(self, job_id: str, actor: str = "", note: Note = None, task: str = "") -> bool:
        """dead → ready; ``task``: the paced bulk replay doing it (its failures are counted
        for it, ``keys.QueueKeys.replay_watch``)."""
        k = self.keys
        return bool(self.scripts.replay(
            keys=[k.job(job_id), k.dead, k.ready, k.stats, k.timeline(job_id)],
            args=[job_id, self.clock(), k.dead_type_prefix, k.dead_group_prefix, actor,
                  _note(note), task]))

    def replay_edited(self, job_id: str, payload: Any, new_key: str = "", actor: str = "",
                      note: Note = None) -> int:
        """dead → ready with ``payload`` instead of the job's own (encoded and size-checked
        here; ``InvalidJob`` if it cannot be stored) and, with ``new_key``, a new idempotency
        key. 1 replayed, 0 not dead, -1 a unique job's key cannot change."""
        k = self.keys
        return int(self.scripts.replay_edited(
            keys=[k.job(job_id), k.dead, k.ready, k.stats, k.timeline(job_id), k.idem_index],
            args=[job_id, self.clock(), k.dead_type_prefix, k.dead_group_prefix, actor,
                  _note(note), encode_payload(payload), new_key]))

    def discard(self, job_id: str, actor: str = "", note: Note = None) -> bool:
        """dead → gone; the job's timeline stays ``DISCARDED_TIMELINE_MS`` to say who did it."""
        k = self.keys
        return bool(self.scripts.discard(
            keys=[k.job(job_id), k.dead, k.stats, k.timeline(job_id), k.idem_index],
            args=[job_id, k.dead_type_prefix, k.dead_group_prefix, self.clock(), actor,
                  _note(note), DISCARDED_TIMELINE_MS]))

    def run_now(self, job_id: str, actor: str = "", note: Note = None) -> bool:
        k = self.keys
        return bool(self.scripts.run_now(
            keys=[k.job(job_id), k.scheduled, k.ready, k.timeline(job_id)],
            args=[job_id, self.clock(), actor, _note(note)]))

    def wait_for_work(self, timeout_s: float, others: Sequence["Queue"] = ()) -> bool:
        """Block until a job is enqueued or promoted in this queue (or ``others``, which must
        share a Redis server; not on a cluster) or ``timeout_s`` passes. True when woken."""
        wake_keys = [self.keys.wake] + ([] if self.cluster else [q.keys.wake for q in others])
        return self.redis.blpop(wake_keys, timeout=timeout_s) is not None

    # -- reading ---------------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        """The job's hash decoded; bytes in it that are not UTF-8 read as replacement
        characters (a damaged job can still be looked at)."""
        execute: Any = self.redis.execute_command
        raw = cast(dict[bytes, bytes], execute("HGETALL", self.keys.job(job_id),
                                               **{NEVER_DECODE: True}))
        fields = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
                  for k, v in raw.items()}
        if not fields:
            return None
        # a dead job's traceback: its error group keeps the head
        return tracebacks.resolve_job(self.redis, self.keys.error_tracebacks,
                                      from_fields(fields, self.name, job_id),
                                      fields.get("errors"))

    def where(self, job_id: str) -> list[str]:
        """Every place the job id is indexed (a consistency check for tests: exactly one)."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.lpos(k.ready, job_id)
        pipe.zscore(k.scheduled, job_id)
        pipe.zscore(k.inflight, job_id)
        pipe.zscore(k.done, job_id)
        pipe.zscore(k.dead, job_id)
        pipe.zscore(k.waiting, job_id)
        pipe.zscore(k.held, job_id)  # a job of a flow waiting for its parents
        pipe.smembers(k.parked_types)
        *found, parked_types = pipe.execute()
        if found[0] is None and any(self.redis.lpos(k.parked(t), job_id) is not None
                                    for t in parked_types):
            found[0] = "parked"  # held because its job type is paused: still a ready job
        names = (states.READY, states.SCHEDULED, states.INFLIGHT, states.DONE, states.DEAD,
                 states.WAITING, states.HELD)
        return [name for name, hit in zip(names, found) if hit is not None]

    def quarantined(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the queue's quarantine: ids too broken to be dead jobs (not
        ASCII, or their record missing), each ``{t, id, id_hex, why}``, and damaged records
        beside the jobs (``keys.RECORDS``), each ``{t, record, key, type, why, preview}``
        (lua/_guard.lua); ``quarantine_count`` counts them."""
        raw = cast(list[str], self.redis.lrange(self.keys.quarantine, 0, limit - 1))
        return [json.loads(entry) for entry in raw]

    def quarantine_count(self) -> int:
        return int(self.redis.llen(self.keys.quarantine))

    def stats(self) -> dict[str, int]:
        stats = cast(dict[str, str], self.redis.hgetall(self.keys.stats))
        return {name: int(v) for name, v in stats.items()}

    def incr_stat(self, name: str, by: int = 1) -> None:
        self.redis.hincrby(self.keys.stats, name, by)
