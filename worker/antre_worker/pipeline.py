"""One job's way from reserve to settlement, as named steps.

``Pipeline.process(r)`` runs ``steps`` in order. A step takes the ``Running`` job and returns
``None`` ("go on": it may have taken something for the job and noted it on ``r``) or an
``Outcome`` (outcomes.py), which ends the job's processing. The outcome is settled once, by
``Settler.settle`` (settle.py), while the job still holds its lock and slots; then
``give_back`` returns what the steps took (database session, slots, lock).

The steps, in order (add a step by putting a method of the same shape into ``steps``):

``stop_check``         shutting down: ``HandBack`` before anything starts
``cancel_requested``   an operator cancelled it (seen with the job or by the heartbeat):
                       ``Cancelled``; looked at again right before the handler runs
``check_envelope``     undecodable payload, a sealed one that does not open here, or no
                       handler here: ``Bury``; else ``r.spec`` (a sealed payload opened)
``too_old``            older than its handler's ``max_age_s`` when reserved: ``Expired``
``already_completed``  a duplicate this process saw complete (locked jobs): ``Ack``
``take_lock``          the job's business lock (``r.lock``), or ``Snooze`` when busy
``admit``              circuit breaker, concurrency slots, rate limit (``r.admission``)
                       or ``Snooze`` (held back)
``claim_key``          the idempotency claim (``r.store`` once owned), or ``Ack``
                       (completed before), ``Snooze`` (busy, database away) or ``Bury``;
                       within a prefetched batch one statement also inserts fresh claims
                       for the next jobs (an unused one is taken back by ``give_back``)
``execution.run``      the handler and its commit (execution.py): always an outcome

A ``Snooze`` for lock busy, flow control or idempotency busy past the handler's
``max_snoozes`` becomes ``SnoozeCap`` (to the DLQ with the reason) in ``outcome``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

import redis

from antre import Antre, InvalidJob, LockBusy
from antre.control.cancel import CancelRequest
from antre.engine.cipher import KEYS_SETTING, CannotOpen, is_sealed
from antre.engine.envelope import Job, decode_stored
from antre.limits.admission import Admission, Limits, LimitPolicy
from antre.limits.gates import held, shared_downstreams
from antre.stores.idempotency import (ACQUIRED, BUSY, COMPLETED, FAILED, MISMATCH, TAKEN_OVER, Begin,
                               Claim, IdempotencyStore, Record, fingerprint)
from antre.engine.locks import Lock, Locks
from antre.stores.sql import unstorable
from antre.observe.logs import job_fields

from .execution import Execution
from .health import RedisHealth
from .held import Running
from .leases import quietly
from .failures import cancelled
from .outcomes import (Ack, Bury, Expired, HandBack, Outcome, Snooze, SnoozeCap, jitter_ms,
                       kind_of)
from .settle import Settler
from .spans import traced

log = logging.getLogger("antre.worker")

Step = Callable[[Running], Outcome | None]
# the snoozes counted against a handler's max_snoozes: held back by something that may never
# clear on its own (a lock nobody releases, an open breaker, a key stuck as busy)
CAPPED_SNOOZES = frozenset({"lock_busy", "idempotency_busy", "concurrency_limited",
                            "rate_limited", "breaker_open", "version_conflict"})


class Pipeline:
    """The per-job steps of one ``WorkerProcess`` (shared by its runner threads)."""

    def __init__(self, app: Antre, locks: Locks, flow: Limits, health: RedisHealth,
                 settler: Settler, execution: Execution, *, worker_id: str,
                 stopping: threading.Event, stop_grace_s: float) -> None:
        self.app = app
        self.locks = locks
        self.flow = flow
        self.health = health
        self.settler = settler
        self.worker_id = worker_id
        self.stopping = stopping
        self.stop_grace_s = stop_grace_s
        self._local = threading.local()  # per runner thread: a lock to release with the next
        # queues whose flow gates this process declared: there the type's and the
        # downstream's concurrency and rate were held at reserve (antre.limits.gates)
        self.held_queues: set[str] = set()
        self._shared = shared_downstreams(app.handlers.values())
        self.execution = execution
        self.steps: tuple[Step, ...] = (
            self.stop_check,
            self.cancel_requested,
            self.check_envelope,
            self.too_old,
            self.already_completed,
            traced("lock acquire", self.take_lock),  # spans.py: a span while traces record
            self.admit,
            traced("idempotency claim", self.claim_key),
            self.cancel_requested,
            execution.run,
        )

    def process(self, r: Running) -> None:
        """Run the steps, settle their outcome, give back what they took."""
        r.thread = threading.get_ident()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("received job %s", r.job.id, extra=job_fields(r.job, "received"))
        try:
            outcome = self.outcome(r)
            if (kind_of(outcome).releases_lock and r.lock is not None
                    and not self.settler.batching()):
                # the key goes to its next job as this one acks: one round trip for both
                r.ack_release = self.locks.release_call(r.lock)
            self.settler.settle(r, outcome)
        finally:
            self.give_back(r)

    # -- async handlers (aio.py) ----------------------------------------------------------------
    def start(self, r: Running) -> Coroutine[Any, Any, Any] | None:
        """An async job: the steps up to the handler, then the handler's coroutine for the
        loop (``finish`` settles it when it ends); None when a step settled the job."""
        r.thread = 0  # no runner thread waits for it
        if log.isEnabledFor(logging.DEBUG):
            log.debug("received job %s", r.job.id, extra=job_fields(r.job, "received"))
        try:
            outcome = self.prepare(r)
            if outcome is None:
                return self.execution.begin(r)
            self.settler.settle(r, outcome)
        except BaseException:
            self.give_back(r)
            raise
        self.give_back(r)
        return None

    def finish(self, r: Running, result: Any, exc: BaseException | None) -> None:
        """An async job's handler ended: settle its outcome, give back what the steps took."""
        try:
            self.settler.settle(r, self.execution.end(r, result, exc))
        finally:
            self.give_back(r)

    def prepare(self, r: Running) -> Outcome | None:
        """Every step but the last (the handler's run)."""
        for step in self.steps[:-1]:
            outcome = step(r)
            if outcome is not None:
                return outcome
        return None

    def outcome(self, r: Running) -> Outcome:
        for step in self.steps:
            outcome = step(r)
            if outcome is not None:
                return self.cap_snoozes(r, outcome)
        raise RuntimeError(f"job {r.job.id}: the pipeline's last step gave no outcome")

    def cap_snoozes(self, r: Running, outcome: Outcome) -> Outcome:
        """A job held back more than its handler's ``max_snoozes`` goes to the DLQ with the
        reason instead of cycling forever."""
        if kind_of(outcome).snooze_reason(outcome) not in CAPPED_SNOOZES:
            return outcome
        spec = r.spec or self.app.handlers.get(r.job.type)
        cap = self.app.max_snoozes_for(spec) if spec is not None else None
        if cap is None or r.job.snoozes < cap:
            return outcome
        return SnoozeCap(r.job.snoozes, cap, cast(Snooze, outcome))

    # -- the steps -----------------------------------------------------------------------------
    def stop_check(self, r: Running) -> Outcome | None:
        if self.stopping.is_set():
            return HandBack(time.monotonic() + self.stop_grace_s)
        return None

    def cancel_requested(self, r: Running) -> Outcome | None:
        """An operator's cancel request, seen with the job or by the heartbeat: the job ends
        where they chose, without running (or before the handler starts)."""
        if r.cancel is None and not r.job.cancel:
            return None  # the common case, without a parse
        req = r.cancel or CancelRequest.parse(r.job.cancel)
        if req is None:
            return None
        r.cancel = req
        self.execution.before_own_write()
        return cancelled(r)

    def too_old(self, r: Running) -> Outcome | None:
        """Older than its handler's ``max_age_s`` when reserved: to the DLQ, not run."""
        assert r.spec is not None
        max_age_s = self.app.max_age_s_for(r.spec)
        age_ms = r.job.reserved_at - r.job.created_at
        if not max_age_s or age_ms <= max_age_s * 1000:
            return None
        self.flush_release()  # the previous job's lock goes now, not with a next acquire
        return Expired(age_ms, max_age_s)

    def check_envelope(self, r: Running) -> Outcome | None:
        job = r.job
        if job.payload_error:
            self.flush_release()  # the previous job's lock goes now, not with a next acquire
            return Bury(f"payload cannot be decoded: {job.payload_error}", "malformed")
        if is_sealed(job.payload):
            refused = self.open_payload(job)
            if refused is not None:
                self.flush_release()
                return refused
        spec = self.app.handlers.get(job.type)
        if spec is None:
            self.flush_release()
            names = ", ".join(sorted(self.app.handlers)) or "none"
            return Bury(f"no handler for job type {job.type!r} in this worker (registered: "
                        f"{names}); deploy a worker that has it, then replay", "unknown_type")
        r.spec = spec
        return None

    def open_payload(self, job: Job) -> Bury | None:
        """A sealed payload opened in place for the handler, or ``Bury`` with the reason it
        cannot be (no key here, an unknown version, a wrong key, a moved ciphertext)."""
        cipher = self.app.cipher
        if cipher is None:
            return Bury(f"payload is encrypted and this worker has no key: set {KEYS_SETTING} "
                        "to the producer's key ring, then replay", "cannot_decrypt")
        try:
            text = cipher.open(job.payload, job.queue, job.type, job.id)
        except CannotOpen as exc:
            return Bury(str(exc), "cannot_decrypt")
        payload, error = decode_stored(text)
        if error:
            return Bury(f"decrypted payload cannot be decoded: {error}", "malformed")
        job.payload = payload
        return None

    def already_completed(self, r: Running) -> Outcome | None:
        """A duplicate of work this process saw complete needs no business lock: answer it
        from the in-process cache before queueing up for the lock (everything else, duplicates
        completed elsewhere included, is decided by the store under the lock)."""
        job = r.job
        if not job.lock_key:
            return None
        store = self.app.idempotency
        if store is None or store.cache is None or not job.idempotency_key:
            return None
        record = store.cache.get(job.idempotency_key)
        if (record is None or record.status != "completed"
                or record.fingerprint != fingerprint(job.type, job.payload)):
            return None
        return Ack(record.result, deduplicated=True)

    def take_lock(self, r: Running) -> Outcome | None:
        if not r.job.lock_key:
            self.flush_release()  # the previous job's lock goes now, not with a next acquire
            return None
        assert r.spec is not None
        if self.execution.holds(lock_key=r.job.lock_key):
            self.execution.finish_transaction()  # its lock goes with that commit
        if r.prelock is not None:  # taken for this delivery by the hand-over that reserved it
            self.flush_release()
            r.lock, r.prelock = r.prelock, None
            r.lock_renewed = time.monotonic()
            r.lock_fence = r.lock.fence
            return None
        previous, self._local.release = getattr(self._local, "release", None), None
        try:
            r.lock = self.health.call(self.locks.acquire, r.job.lock_key,
                                      ttl_ms=int(r.spec.lock_ttl_s * 1000),
                                      owner=self.worker_id, release=previous,
                                      holder_job=f"{r.queue.name}/{r.job.id}",
                                      holder_epoch=r.job.epoch)
        except LockBusy as exc:
            return Snooze(jitter_ms(200, 1000), "lock_busy", counter="lock_busy",
                          count_as="lock_busy", note=f"lock busy: {exc}",
                          details={"lock": exc.key, "holder": exc.holder,
                                   "holder_fence": exc.fence, "ttl_ms": exc.ttl_ms})
        r.lock_renewed = time.monotonic()  # renewed by the heartbeat from now on
        r.lock_fence = r.lock.fence
        return None

    # -- taking ahead: the next jobs of a prefetched batch -------------------------------------
    def begin_batch(self, held: list[Running]) -> None:
        """This thread now works through ``held`` in order: a job's idempotency claim also
        inserts fresh claims for the jobs after it (one statement, one commit for all of
        them), used when their turn comes (``_claim_ahead``)."""
        self._local.batch = held if len(held) > 1 else None
        self.execution.begin_batch(len(held) > 1)

    def end_batch(self) -> None:
        """The batch's jobs have run: their shared transaction commits (before their acks)."""
        self._local.batch = None
        self.execution.end_batch()

    def _after(self, r: Running) -> list[Running]:
        """The jobs of this thread's batch after ``r`` that will most likely run their handler
        as they are (undecodable, unknown, async, cancelled or too old ones are left out)."""
        batch: list[Running] | None = getattr(self._local, "batch", None)
        if not batch or self.stopping.is_set():
            return []
        for i, x in enumerate(batch):
            if x is r:
                return [y for y in batch[i + 1:] if self._likely_to_run(y)]
        return []

    def _likely_to_run(self, r: Running) -> bool:
        job = r.job
        if r.closed or r.lease_lost or r.cancel is not None or job.cancel or job.payload_error:
            return False
        spec = self.app.handlers.get(job.type)
        if spec is None or spec.is_async:
            return False
        max_age_s = self.app.max_age_s_for(spec)
        if max_age_s and job.reserved_at - job.created_at > max_age_s * 1000:
            return False
        store = self.app.idempotency
        cache = store.cache if store is not None else None
        return cache is None or not job.idempotency_key or cache.peek(job.idempotency_key) is None

    def admit(self, r: Running) -> Outcome | None:
        """Circuit breaker, concurrency slots and rate limit of the job type and its downstream.
        Held back: snoozed without spending an attempt."""
        spec = r.spec
        assert spec is not None
        downstream = self.app.downstreams.get(spec.downstream or "")
        if spec.flow is None and downstream is None:
            return None
        mine = r.job.queue == spec.queue and r.job.queue in self.held_queues
        held_at_reserve = (mine and held(spec.flow),
                           mine and held(downstream, shared=spec.downstream in self._shared))
        adm = self.health.call(self.flow.admit, f"{r.job.id}:{r.job.epoch}", r.job.deadline,
                               job_type=r.job.type, type_policy=spec.flow,
                               downstream=spec.downstream, downstream_policy=downstream,
                               held=held_at_reserve)
        if adm.allowed:
            r.admission = adm
            return None
        return Snooze(self._hold_ms(r, adm, downstream), adm.reason, counter=adm.reason,
                      count_as=adm.reason, note=f"held back: {adm.reason} for {adm.wait_s:.2f}s",
                      details={"downstream": spec.downstream or "", "wait_s": adm.wait_s})

    def _hold_ms(self, r: Running, adm: Admission, downstream: LimitPolicy | None) -> int:
        """How long a held-back job waits. A slot usually frees when its job ends, not at its
        deadline. Behind a rate limit or an open breaker the waiting jobs are spread over the
        time the backlog needs at that rate (or over the cool-down), so they do not all come
        back at once and spin through reserve and snooze."""
        wait_s, spread_s = adm.wait_s, 0.25
        if adm.reason == "concurrency_limited":
            wait_s = min(wait_s, 1.0)
        elif downstream is not None:
            backlog = self.health.call(r.queue.redis.zcard, r.queue.keys.scheduled)
            spread_s = (backlog / downstream.rate_per_s if downstream.rate_per_s
                        else downstream.cooldown_s)
        return int((wait_s + random.uniform(0, min(max(spread_s, 0.25), 600.0))) * 1000)

    def claim_key(self, r: Running) -> Outcome | None:
        """The at-most-once claim on the job's idempotency key (under its lock, if any). Within
        a prefetched batch its row may have been inserted already, with an earlier job's
        claim: a fresh row nobody else could take, used as it is."""
        job = r.job
        store = self.app.idempotency
        if store is None or not job.idempotency_key:
            return None
        ahead = self._adopt_claim(r)
        if ahead is not None:
            return self._on_begin(r, store, ahead)
        if self.execution.holds(key=job.idempotency_key):
            # a duplicate of a success earlier in this batch, in its shared transaction:
            # committed first, so this one is answered from its completed record
            self.execution.finish_transaction()
        self.execution.before_own_write()
        if self.settler.completing(job.idempotency_key):
            # a duplicate of a success earlier in this batch: record and ack that one first,
            # so this one is answered from its completed record
            self.flush_release()
            self.settler.flush_acks()
            self.settler.begin_batch(True)
        while True:
            try:
                begin = self._begin(store, r)
            except InvalidJob as exc:
                return Bury(f"bad idempotency key: {exc}", "invalid")
            except Exception as exc:
                if unstorable(exc):  # no retry stores this value: to the DLQ, not an outage
                    return Bury(f"the idempotency store cannot store this job's key or "
                                f"payload: {exc}; enqueue text without NUL characters or lone "
                                "surrogates, then replay", "invalid", error=repr(exc))
                # the database is unreachable: wait, spend nothing
                return Snooze(jitter_ms(1000, 5000), "database_unavailable",
                              level=logging.ERROR, note=f"idempotency store unavailable: {exc}")
            if not self._reset_on_replay(store, job, begin):
                return self._on_begin(r, store, begin)

    def _adopt_claim(self, r: Running) -> Begin | None:
        """The fresh claim inserted ahead for ``r``, if any, to act on as ``begin``'s answer
        (it is ours: nobody else can have run under it). Not used (None: ``begin`` decides, as
        for any key) when its lease deadline is near: the heartbeat extends only the records
        of claims in use."""
        begin, r.ahead_claim = r.ahead_claim, None
        if begin is None or begin.record is None:
            return None
        left_ms = begin.record.lease_deadline_ms - self.app.clock()
        return begin if left_ms > r.job.visibility_timeout_ms // 2 else None

    def _claim_ahead(self, store: IdempotencyStore, r: Running) -> Begin | None:
        """``r``'s claim (under its lock, if any) together with fresh claims for the next jobs
        of the batch that pass no other step before theirs (no flow control): one statement,
        one commit. A key whose row exists already is left out, to be decided under its own
        lock when its turn comes, and a claim its job does not use is taken back (give_back).
        Returns ``r``'s answer when its row was inserted (None: ``begin`` decides)."""
        out: list[tuple[Running, Claim]] = []
        keys = {r.job.idempotency_key}
        for x in self._after(r):
            job, spec = x.job, self.app.handlers.get(x.job.type)
            if (spec is None or spec.flow is not None
                    or self.app.downstreams.get(spec.downstream or "") is not None
                    or not job.idempotency_key or job.idempotency_key in keys
                    or x.ahead_claim is not None):
                continue
            claim = _claim(x, self.worker_id, None)
            if claim is not None:
                keys.add(job.idempotency_key)
                out.append((x, claim))
        mine = _claim(r, self.worker_id, r.lock)
        if not out or mine is None:
            return None
        got = store.claim_many([mine, *(c for _, c in out)])
        for x, c in out:
            x.ahead_claim = got.get(c.key)
        return got.get(mine.key)

    def _unclaim(self, store: IdempotencyStore, r: Running) -> None:
        job = r.job
        try:
            store.unclaim(job.idempotency_key, job.epoch, job.id)
        except Exception as exc:  # its lease passes, then the key is taken over
            log.warning("could not take back an unused idempotency claim: %s", exc,
                        extra=job_fields(job, "error"))

    def _begin(self, store: IdempotencyStore, r: Running) -> Begin:
        ahead = self._claim_ahead(store, r)
        if ahead is not None:
            return ahead
        job, lock = r.job, r.lock
        return store.begin(job.idempotency_key, fingerprint(job.type, job.payload), job.type,
                           job.id, job.epoch, self.worker_id, job.deadline,
                           lock_fence=lock.fence if lock else None)

    def _on_begin(self, r: Running, store: IdempotencyStore, begin: Begin) -> Outcome | None:
        outcome = begin.outcome
        if outcome in (ACQUIRED, TAKEN_OVER):
            if outcome == TAKEN_OVER:
                log.warning("took over idempotency key from a previous owner that did not finish",
                            extra=job_fields(r.job, "taken_over"))
            r.store = store
            return None
        if outcome == COMPLETED:
            return Ack(begin.record.result if begin.record is not None else None,
                       deduplicated=True)
        if outcome == BUSY:
            return Snooze(jitter_ms(800, 1200), "idempotency_busy", counter="idempotency_busy",
                          details={"key": r.job.idempotency_key,
                                   "owner": begin.record.owner if begin.record else None})
        if outcome == MISMATCH:
            return Bury("idempotency key reused with a different payload",
                        "idempotency_mismatch", spend_attempt=True)
        return Bury("idempotency key already failed permanently; replay the job from the "
                    "dead-letter queue to run it again", "idempotency_failed", spend_attempt=True)

    @staticmethod
    def _reset_on_replay(store: IdempotencyStore, job: Job, begin: Begin) -> bool:
        """An operator replayed this job after its key failed: the on-purpose reset (DESIGN:
        'failed permanently stays failed until a replay resets it'); then claim again."""
        if begin.outcome != FAILED or not _replayed_after_failure(job, begin.record):
            return False
        if not store.reset(job.idempotency_key):
            return False
        log.info("replayed on purpose: the failed idempotency key was reset",
                 extra=job_fields(job, "replay_reset"))
        return True

    # -- giving back what the steps took ----------------------------------------------------------
    def give_back(self, r: Running) -> None:
        ctx, r.ctx = r.ctx, None  # the context's callables hold ``r``: no cycle left for the GC
        try:
            if ctx is not None and ctx.opened_db is not None:
                if r.tx is not None:  # its batch's shared session: at most its savepoint
                    self.execution.undo(r)
                else:
                    ctx.opened_db.close()
        finally:
            lock, r.lock = r.lock, None
            if r.prelock is not None:  # taken by its hand-over, no step used it
                self.release_quietly(r.prelock)
                r.prelock = None
            claim, r.ahead_claim = r.ahead_claim, None
            if r.admission is not None:
                quietly(r.admission.release)
            store = self.app.idempotency if claim is not None else None
            if store is not None:
                self.execution.before_own_write()
                self._unclaim(store, r)  # taken ahead, never used: as if never claimed
            if (lock is not None and not r.released_with_ack
                    and (r.tx is None or r.job.id not in r.tx.member_ids)):
                self._release(lock)  # (a lock in the batch's transaction goes with its commit)

    def _release(self, lock: Lock) -> None:
        """Within a prefetched batch the release rides with the next job's acquire (one round
        trip for both); whatever is not taken that way goes before anything else runs."""
        if self.settler.batching():
            self.flush_release()
            self._local.release = lock
        else:
            self._release_now(lock)

    def take_release(self, lock_key: str) -> Lock | None:
        """The lock of ``lock_key`` waiting for its release on this thread, taken out (its
        release goes with the hand-over instead: runner.py); None when there is none."""
        lock = getattr(self._local, "release", None)
        if lock is None or lock.key != lock_key:
            return None
        self._local.release = None
        return cast(Lock, lock)

    def release_quietly(self, lock: Lock) -> None:
        """Release now; a Redis error leaves it to expire by its TTL."""
        quietly(lambda: self._release_now(lock))

    def flush_release(self) -> None:
        local = self._local
        lock = getattr(local, "release", None)
        if lock is not None:
            local.release = None
            self._release_now(lock)

    def _release_now(self, lock: Lock) -> None:
        """Compare-and-delete; its reply says whether the lock was still held when its job
        ended (``lock.lost``: a batched ack waiting on it becomes a ``lock_lost`` snooze)."""
        try:
            self.locks.release(lock)
        except redis.RedisError:
            lock.lost = True  # not known to be held to the end; it expires by its TTL


def _claim(r: Running, owner: str, lock: Lock | None) -> Claim | None:
    job = r.job
    try:
        IdempotencyStore.check_key(job.idempotency_key)  # one bad key must not fail the batch
        fp = fingerprint(job.type, job.payload)
    except (TypeError, ValueError):  # (InvalidJob is a ValueError)
        return None  # its own turn says why
    return Claim(job.idempotency_key, fp, job.type, job.id, job.epoch, owner, job.deadline,
                 lock.fence if lock is not None else None)


def _replayed_after_failure(job: Job, record: Record | None) -> bool:
    if not job.replayed_at or record is None or record.status != "failed":
        return False
    return job.replayed_at >= int(record.updated_at.timestamp() * 1000)
