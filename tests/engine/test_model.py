"""A Hypothesis stateful test: the queue's Lua transitions against a pure-Python model of the
lease state machine, on a real Redis with a ManualClock.

Each step drives one operation (enqueue, reserve, ack, retry, bury, extend, hand_back, snooze,
sweep, promote, replay, discard, run_now, clock moves). Leases are the ``Job`` objects that
``reserve`` returned, kept for the whole run, so later steps use stale ones too (and forged
future epochs). After every step the invariants are checked against Redis:

* every job is in exactly one place (``Queue.where`` has length 1; 0 once discarded) and its
  hash ``state`` says the same place; the ready list's order and the scheduled / in-flight
  scores are the model's;
* ``attempt``, ``deliveries`` and ``epoch`` are the model's;
* an operation with a lease that is not the current one raises ``LeaseLost`` and changes
  nothing (the job hash and every index are byte-for-byte as before).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from antre import LeaseLost
from antre.clock import ManualClock
from antre.engine.envelope import Job
from antre.engine.queue import JobSpec, Queue

VT_MS = 10_000          # visibility timeout of every job in the model
MAX_DELIVERIES = 2      # small, so poison jobs (swept to the DLQ) happen in short runs
FAR = 10**12            # done jobs are never trimmed during a run


@dataclass
class MJob:
    """The model's view of one job."""

    id: str
    place: str = "ready"          # ready | scheduled | inflight | done | dead | gone
    epoch: int = 0
    deliveries: int = 0
    attempt: int = 0
    visible_at: int = 0
    deadline: int = 0


class LeaseModel(RuleBasedStateMachine):
    url: str = ""  # set by the test function from the session's private Redis

    def __init__(self) -> None:
        super().__init__()
        self.r = redis.Redis.from_url(self.url, decode_responses=True)
        self.r.flushall()
        self.clock = ManualClock()
        self.q = Queue(self.r, "model", clock=self.clock, done_retention_ms=FAR, done_max=10**9)
        self.jobs: dict[str, MJob] = {}
        self.ready: list[str] = []     # index -1 is the next one RPOP takes
        self.leases: list[Job] = []    # every lease ever handed out (stale ones included)
        self.n = 0

    def teardown(self) -> None:
        self.r.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _snapshot(self, job_id: str) -> tuple:
        k = self.q.keys
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(k.job(job_id))
        pipe.lrange(k.ready, 0, -1)
        for z in (k.scheduled, k.inflight, k.done, k.dead):
            pipe.zrange(z, 0, -1, withscores=True)
        # compared as values: a hash's field order may change on a mere read (Redis rehashes
        # incrementally), which is no change of state
        return tuple(pipe.execute())

    def _lease(self, i: int, forge: bool) -> Job:
        job = self.leases[i % len(self.leases)]
        if forge:  # a lease with an epoch from the future: never valid either
            job = Job(id=job.id, type=job.type, queue=job.queue, idempotency_key="k",
                      payload=None, epoch=self.jobs[job.id].epoch + 1)
        return job

    def _valid(self, job: Job) -> bool:
        m = self.jobs[job.id]
        return m.place == "inflight" and m.epoch == job.epoch

    def _fenced(self, job: Job, call) -> bool:
        """Runs ``call()``; if the lease is not current it must raise LeaseLost and change
        nothing. Returns whether the lease was valid (and the call went through)."""
        if self._valid(job):
            call()
            return True
        before = self._snapshot(job.id)
        with pytest.raises(LeaseLost):
            call()
        assert self._snapshot(job.id) == before, "a stale lease changed something"
        return False

    def _to_ready_front(self, m: MJob) -> None:  # RPUSH: next in line
        m.place = "ready"
        self.ready.append(m.id)

    def _to_ready_back(self, m: MJob) -> None:   # LPUSH: end of the line
        m.place = "ready"
        self.ready.insert(0, m.id)

    # -- producing --------------------------------------------------------------------------------
    @initialize(n=st.integers(1, 4))
    def seed(self, n: int) -> None:
        self.enqueue_many(n, 0)

    @rule(n=st.integers(1, 3), delay_ms=st.sampled_from([0, 0, 1, 5_000, 20_000]))
    def enqueue_many(self, n: int, delay_ms: int) -> None:
        specs = []
        for _ in range(n):
            self.n += 1
            specs.append(JobSpec("t", {"n": self.n}, f"key:{self.n}", delay_s=delay_ms / 1000,
                                 visibility_timeout_s=VT_MS / 1000,
                                 max_deliveries=MAX_DELIVERIES, job_id=f"j{self.n:05d}"))
        ids = self.q.enqueue_many(specs)
        now = self.clock()
        for job_id in ids:
            m = MJob(job_id, visible_at=now + delay_ms)
            self.jobs[job_id] = m
            if delay_ms > 0:
                m.place = "scheduled"
            else:
                self._to_ready_back(m)

    # -- consuming --------------------------------------------------------------------------------
    @rule(count=st.integers(1, 3))
    def reserve(self, count: int) -> None:
        got = self.q.reserve("w", count=count)
        expected = [self.ready.pop() for _ in range(min(count, len(self.ready)))]
        assert [j.id for j in got] == expected
        now = self.clock()
        for job in got:
            m = self.jobs[job.id]
            m.place, m.epoch, m.deliveries = "inflight", m.epoch + 1, m.deliveries + 1
            m.deadline = now + VT_MS
            assert (job.epoch, job.deliveries, job.attempt, job.state, job.deadline) == (
                m.epoch, m.deliveries, m.attempt, "inflight", m.deadline)
            self.leases.append(job)

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), forge=st.booleans())
    def ack(self, i: int, forge: bool) -> None:
        job = self._lease(i, forge)
        if self._fenced(job, lambda: self.q.ack(job, {"ok": True})):
            self.jobs[job.id].place = "done"

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), k=st.integers(1, 4))
    def ack_many(self, i: int, k: int) -> None:
        batch = []
        for j in range(k):  # possibly the same lease twice: the second must come back lost
            job = self._lease(i + j * 7, False)
            batch.append(job)
        expect_lost = []
        for job in batch:
            if self._valid(job):
                self.jobs[job.id].place = "done"
            else:
                expect_lost.append(job.id)
        lost = self.q.ack_many([(job, None) for job in batch])
        assert [job.id for job in lost] == expect_lost

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), forge=st.booleans(),
          delay_ms=st.sampled_from([0, 1_000, 30_000]), spend=st.booleans())
    def retry(self, i: int, forge: bool, delay_ms: int, spend: bool) -> None:
        job = self._lease(i, forge)
        if self._fenced(job, lambda: self.q.retry(job, delay_ms=delay_ms, error="boom",
                                                  spend_attempt=spend)):
            m = self.jobs[job.id]
            m.attempt += int(spend)
            m.visible_at = self.clock() + delay_ms
            if delay_ms <= 0:
                self._to_ready_front(m)
            else:
                m.place = "scheduled"

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), forge=st.booleans(), spend=st.booleans())
    def bury(self, i: int, forge: bool, spend: bool) -> None:
        job = self._lease(i, forge)
        if self._fenced(job, lambda: self.q.bury(job, reason="model says so", kind="permanent",
                                                 spend_attempt=spend)):
            m = self.jobs[job.id]
            m.attempt += int(spend)
            m.place = "dead"

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), forge=st.booleans(), ms=st.integers(1, 40_000),
          mode=st.sampled_from(["from_now", "add"]), cap=st.sampled_from([0, 0, 15_000]))
    def extend(self, i: int, forge: bool, ms: int, mode: str, cap: int) -> None:
        job = self._lease(i, forge)
        now = self.clock()
        cap_ms = now + cap if cap else 0
        out: list[int] = []
        if self._fenced(job, lambda: out.append(self.q.extend(job.id, job.epoch, ms, mode=mode,
                                                              cap_ms=cap_ms))):
            m = self.jobs[job.id]
            deadline = max(m.deadline, now) + ms if mode == "add" else now + ms
            if cap_ms and deadline > cap_ms:
                deadline = cap_ms
            m.deadline = deadline
            assert out == [deadline]

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), forge=st.booleans())
    def hand_back(self, i: int, forge: bool) -> None:
        job = self._lease(i, forge)
        if self._fenced(job, lambda: self.q.hand_back(job)):
            m = self.jobs[job.id]
            m.deliveries -= 1
            m.visible_at = self.clock()
            self._to_ready_front(m)

    @precondition(lambda self: self.leases)
    @rule(i=st.integers(0, 10**6), forge=st.booleans(), delay_ms=st.sampled_from([0, 2_000]))
    def snooze(self, i: int, forge: bool, delay_ms: int) -> None:
        job = self._lease(i, forge)
        if self._fenced(job, lambda: self.q.snooze(job, delay_ms, "rate_limited")):
            m = self.jobs[job.id]
            m.deliveries -= 1
            m.visible_at = self.clock() + delay_ms
            if delay_ms <= 0:
                self._to_ready_front(m)
            else:
                m.place = "scheduled"

    # -- maintenance --------------------------------------------------------------------------------
    @rule(ms=st.sampled_from([1, 999, 1_000, 5_000, 10_000, 25_000]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(count=st.integers(1, 3))
    def worker_dies_holding(self, count: int) -> None:
        """A worker reserves jobs and is killed: its leases expire and the sweeper runs."""
        self.reserve(count)
        self.workers_vanish()

    @rule()
    def workers_vanish(self) -> None:
        """Every worker holding a lease dies: past the deadlines, then the sweeper runs."""
        self.clock.advance(VT_MS + 1)
        self.sweep()

    @rule()
    def sweep(self) -> None:
        now = self.clock()
        due = sorted((m for m in self.jobs.values() if m.place == "inflight" and m.deadline < now),
                     key=lambda m: (m.deadline, m.id))
        expected = {}
        for m in due:
            m.deadline = 0
            if m.deliveries >= MAX_DELIVERIES:
                m.place = "dead"
                expected[m.id] = "dead"
            else:
                self._to_ready_front(m)
                expected[m.id] = "ready"
        res = self.q.sweep()
        assert res.outcomes == expected
        assert (res.requeued, res.buried) == (
            sum(v == "ready" for v in expected.values()), sum(v == "dead" for v in expected.values()))

    @rule()
    def promote(self) -> None:
        now = self.clock()
        due = sorted((m for m in self.jobs.values()
                      if m.place == "scheduled" and m.visible_at <= now),
                     key=lambda m: (m.visible_at, m.id))
        for m in due:
            self._to_ready_back(m)
        assert self.q.promote() == len(due)

    @precondition(lambda self: self.jobs)
    @rule(i=st.integers(0, 10**6))
    def run_now(self, i: int) -> None:
        m = sorted(self.jobs.values(), key=lambda m: m.id)[i % len(self.jobs)]
        moved = m.place == "scheduled"
        if moved:
            m.visible_at = self.clock()
            self._to_ready_front(m)
        assert self.q.run_now(m.id) is moved

    @precondition(lambda self: self.jobs)
    @rule(i=st.integers(0, 10**6))
    def replay(self, i: int) -> None:
        m = sorted(self.jobs.values(), key=lambda m: m.id)[i % len(self.jobs)]
        ok = m.place == "dead"
        if ok:
            m.attempt = m.deliveries = 0
            m.visible_at = self.clock()
            self._to_ready_back(m)
        assert self.q.replay(m.id) is ok

    @precondition(lambda self: self.jobs)
    @rule(i=st.integers(0, 10**6))
    def discard(self, i: int) -> None:
        m = sorted(self.jobs.values(), key=lambda m: m.id)[i % len(self.jobs)]
        ok = m.place == "dead"
        if ok:
            m.place = "gone"
        assert self.q.discard(m.id) is ok

    # -- invariants ---------------------------------------------------------------------------------
    @invariant()
    def every_job_in_exactly_one_place(self) -> None:
        for m in self.jobs.values():
            places = self.q.where(m.id)
            if m.place == "gone":
                assert places == [] and self.q.get(m.id) is None, m
                continue
            assert places == [m.place], (m, places)
            job = self.q.get(m.id)
            assert job is not None and job.state == m.place, (m, job)
            assert (job.epoch, job.deliveries, job.attempt) == (m.epoch, m.deliveries, m.attempt), (
                m, job)

    @invariant()
    def indexes_match_the_model(self) -> None:
        k = self.q.keys
        assert self.r.lrange(k.ready, 0, -1) == self.ready
        scheduled = {m.id: m.visible_at for m in self.jobs.values() if m.place == "scheduled"}
        inflight = {m.id: m.deadline for m in self.jobs.values() if m.place == "inflight"}
        assert {i: int(s) for i, s in self.r.zrange(k.scheduled, 0, -1, withscores=True)} == scheduled
        assert {i: int(s) for i, s in self.r.zrange(k.inflight, 0, -1, withscores=True)} == inflight


def test_lease_state_machine(redis_server):
    if not redis_server.running:
        redis_server.start()
    LeaseModel.url = redis_server.url
    run_state_machine_as_test(LeaseModel, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
