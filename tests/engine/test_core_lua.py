"""Every Lua transition against a real Redis, with the clock injected (no sleeping)."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from antre import InvalidJob, LeaseLost
from antre.clock import ManualClock
from antre.engine.envelope import _DEFAULT_TAIL, NEW_FIELDS, encode_new, pack_new, pack_standard
from antre.engine.queue import TRACEPARENT, JobSpec, Queue
from antre.observe.finder import Finder

# what the standard enqueue leaves out when it is empty or JobSpec's default
DEFAULTED = {"lock_key", "headers", "timeout_s", "vt_ms", "max_deliveries"}
# and what it never stores: the queue's name and the job's id (its key says both; readers are
# given them)
IMPLIED = {"queue", "id"}
# nor the trace of a job whose id it made (envelope.job_traceparent: read from the id), nor,
# for such a job visible at once, its visible_at (its created_at)
TRACE = {"trace_id"}
MADE = {"trace_id", "visible_at"}


def Job_with_epoch(job, epoch):
    import dataclasses
    return dataclasses.replace(job, epoch=epoch)


def one(q: Queue, worker: str = "w1"):
    jobs = q.reserve(worker)
    assert len(jobs) == 1
    return jobs[0]


def assert_one_place(q: Queue, job_id: str, place: str):
    assert q.where(job_id) == [place]
    assert q.get(job_id).state == place


def test_enqueue_makes_ready_and_records_envelope(q):
    job_id = q.enqueue("send_email", {"to": "a@example.org"}, idempotency_key="email:welcome:42",
                       lock_key="user:42", max_attempts=3)
    assert_one_place(q, job_id, "ready")
    job = q.get(job_id)
    assert (job.type, job.idempotency_key, job.lock_key, job.max_attempts) == (
        "send_email", "email:welcome:42", "user:42", 3)
    assert job.payload == {"to": "a@example.org"}
    assert job.trace_id.startswith("00-") and len(job.trace_id) == 55


def test_enqueue_with_delay_is_scheduled_until_promoted(q, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k", delay_s=10)
    assert_one_place(q, job_id, "scheduled")
    assert q.promote() == 0
    clock.advance(10_000)
    assert q.promote() == 1
    assert_one_place(q, job_id, "ready")


def test_enqueue_scripts_standard_field_list_is_new_fields():
    """enqueue.lua names the standard fields itself (the client sends '' for them)."""
    src = resources.files("antre.engine.lua").joinpath("enqueue.lua").read_text()
    # the standard job's HSETs, written out field by field: each name with its position; the
    # first for a job whose DEFAULTED fields are empty or JobSpec's (none stored), the second
    # for the others
    hsets = re.findall(r"redis.call\('HSET', key, ('type'.*?)'state', state\)", src, re.S)
    every = [(n, i + 1) for i, n in enumerate(NEW_FIELDS)]
    # (at the defaults: first a job visible at once without a trace of its own, then a later
    # one without, then with the caller's)
    assert [[(name, int(i)) for name, i in re.findall(r"'([a-z_]+)', v\[(\d+)\]", h)]
            for h in hsets] == [[p for p in every if p[0] not in DEFAULTED | IMPLIED | MADE],
                                [p for p in every if p[0] not in DEFAULTED | IMPLIED | TRACE],
                                [p for p in every if p[0] not in DEFAULTED | IMPLIED],
                                [p for p in every if p[0] not in IMPLIED]]


def test_enqueue_one_scripts_field_list_is_new_fields():
    """enqueue_one.lua gets the standard fields' values as ARGV[2 ..], in NEW_FIELDS order."""
    src = resources.files("antre.engine.lua").joinpath("enqueue_one.lua").read_text()
    hsets = re.findall(r"redis.call\('HSET', v\[1\] \.\. id, ('type'.*?)'state', S.ready\)", src,
                       re.S)
    every = [(n, i + 2) for i, n in enumerate(NEW_FIELDS)]
    # (the first two without the DEFAULTED fields: the lock key is always empty here; the first
    # without a trace made from the id either)
    assert [[(name, int(i)) for name, i in re.findall(r"'([a-z_]+)', v\[(\d+)\]", h)]
            for h in hsets] == [[p for p in every if p[0] not in DEFAULTED | IMPLIED | MADE],
                                [p for p in every if p[0] not in DEFAULTED | IMPLIED],
                                [p for p in every if p[0] not in IMPLIED]]


def _everything(r) -> dict:
    """Every key of the database with its type and content."""
    read = {"hash": r.hgetall, "set": r.smembers, "string": r.get,
            "list": lambda key: r.lrange(key, 0, -1),
            "zset": lambda key: r.zrange(key, 0, -1, withscores=True)}
    return {key: (r.type(key), read[r.type(key)](key)) for key in r.keys("*")}


@pytest.mark.parametrize("before", [0, 70])
@pytest.mark.parametrize("options", [{}, {"headers": {"tenant": "a"}, "max_attempts": 7,
                                          "timeout_s": 2.5}])
def test_enqueue_one_lua_leaves_what_enqueue_lua_leaves(q, r, clock, before, options):
    """The single enqueue's lean script (a ready job with an id the client made) changes the
    database exactly as enqueue.lua does for that job: the job's hash, the ready list, the
    idempotency-key, type and queue indexes, the counter, the wake tokens (capped at 64: with
    70 jobs enqueued before, the list is full)."""
    values = encode_new(JobSpec("t", {"v": [1, "ü"]}, "key-1", **options), q.name, clock())
    prior = [JobSpec("other", {}, f"p{i}") for i in range(before)]
    outcomes = []
    for script, args in ((q.scripts.enqueue, [q.keys.job_prefix, clock(), "", pack_new(values)]),
                         (q.scripts.enqueue_one, [q.keys.job_prefix, *values])):
        r.flushdb()
        for i in range(0, before, 10):  # the same jobs (same ids) before, in both databases
            q.store([(NEW_FIELDS, encode_new(s, q.name, clock(), entropy=f"{n:032x}{n:048x}"))
                     for n, s in enumerate(prior[i:i + 10], start=i)], clock())
        keys_ = q._indexed_keys if script is q.scripts.enqueue else q._one_indexed_keys
        assert script(keys=keys_, args=args) in ([1], 1)
        outcomes.append(_everything(r))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][q.keys.job(values[0])][1]["state"] == "ready"
    assert len(outcomes[1][q.keys.wake][1]) == min(before + 1, 64)


def test_enqueue_one_lua_refuses_a_job_with_a_lock_key(q, r, clock):
    """A lock_key job may have to wait behind its key's head: only enqueue.lua
    knows how; the lean script refuses one, leaving nothing behind."""
    import redis as redis_py
    values = encode_new(JobSpec("t", {}, "key-1", lock_key="acct:1"), q.name, clock())
    with pytest.raises(redis_py.ResponseError, match="lock_key"):
        q.scripts.enqueue_one(keys=q._one_indexed_keys, args=[q.keys.job_prefix, *values])
    assert r.keys("*") == []


@pytest.mark.parametrize("delay_s", [0, 60])
def test_enqueue_stores_exactly_the_new_fields_and_the_state(q, delay_s):
    job_id = q.enqueue("t", {"v": 1}, idempotency_key="k", delay_s=delay_s)
    stored = q.redis.hgetall(q.keys.job(job_id))
    # no lock key, no headers, JobSpec's timeout, lease and delivery limit: none of them is
    # stored (an absent one reads as empty / the default)
    # nor a trace made from its id (read back from the id), nor visible_at when it is now
    assert set(stored) == {*NEW_FIELDS, "state"} - DEFAULTED - IMPLIED - (
        TRACE if delay_s else MADE)
    assert stored["state"] == ("scheduled" if delay_s else "ready")
    assert stored["idem_key"] == "k"
    job = q.get(job_id)
    assert job.id == job_id  # (read from the key)
    assert (job.lock_key, job.headers, job.timeout_s, job.visibility_timeout_ms,
            job.max_deliveries, job.queue) == ("", {}, 30.0, 30_000, 10, q.name)
    assert job.trace_id == f"00-{job_id}-{job_id[16:]}-01" and TRACEPARENT.match(job.trace_id)
    assert job.visible_at == job.created_at + delay_s * 1000
    traced = q.enqueue("t", {}, idempotency_key="k1", delay_s=delay_s,
                       trace_id="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
    stored = q.redis.hgetall(q.keys.job(traced))  # the caller's trace is stored
    assert set(stored) == {*NEW_FIELDS, "state"} - DEFAULTED - IMPLIED
    assert q.get(traced).trace_id == stored["trace_id"] == f"00-{'ab' * 16}-{'cd' * 8}-01"
    mine = q.enqueue("t", {}, idempotency_key="k0", delay_s=delay_s, job_id="mine")
    assert TRACEPARENT.match(q.redis.hget(q.keys.job(mine), "trace_id"))  # made for it, stored
    other = q.enqueue("t", {}, idempotency_key="k2", delay_s=delay_s, max_deliveries=11)
    stored = q.redis.hgetall(q.keys.job(other))
    assert set(stored) == {*NEW_FIELDS, "state"} - IMPLIED and stored["max_deliveries"] == "11"
    with_both = q.enqueue("t", {}, idempotency_key="k3", delay_s=delay_s, lock_key="a",
                          headers={"h": "1"})
    stored = q.redis.hgetall(q.keys.job(with_both))
    assert set(stored) == {*NEW_FIELDS, "state"} - IMPLIED and stored["lock_key"] == "a"
    assert q.get(with_both).headers == {"h": "1"}


def test_the_defaults_enqueue_leaves_out_are_jobspecs_and_every_reader_reads_them(q, clock):
    """The enqueue scripts compare the encoded values with JobSpec's defaults as text
    (_lib.lua's at_defaults): a default changed in envelope.py without the scripts would store
    them again (and this fails)."""
    values = dict(zip(NEW_FIELDS, encode_new(JobSpec("t", {}, "k"), q.name, clock())))
    assert {k: values[k] for k in DEFAULTED} == {
        "lock_key": "", "headers": "{}", "timeout_s": "30.0", "vt_ms": "30000",
        "max_deliveries": "10"}
    lua = resources.files("antre.engine.lua")
    assert ("return headers == '{}' and timeout_s == '30.0' and vt_ms == '30000' and "
            "max_deliveries == '10'") in lua.joinpath("_base.lua").read_text()
    assert "if not v[10] or v[10] == '' and at_defaults(v[11], v[12], v[13], v[14]) then" in \
        lua.joinpath("enqueue.lua").read_text()
    # and the client's chunk leaves them out (a job of nine values: envelope.pack_standard)
    assert [values[k] for k in NEW_FIELDS[-5:]] == _DEFAULT_TAIL
    assert json.loads(pack_standard([list(values.values())])) == [list(values.values())[:9]]
    assert "if at_defaults(v[12], v[13], v[14], v[15]) then" in \
        lua.joinpath("enqueue_one.lua").read_text()
    job_id = q.enqueue("t", {}, idempotency_key="k")
    (job,) = q.reserve("w")  # the reserve's row, its deadline from the default lease
    assert job.id == job_id and job.deadline == clock() + 30_000 and job.queue == q.name
    assert (job.timeout_s, job.visibility_timeout_ms, job.max_deliveries) == (30.0, 30_000, 10)


def test_the_wake_list_stays_capped_at_64_tokens(q):
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(40)], chunk=10)
    assert q.redis.llen(q.keys.wake) == 40  # 10 per call, below the cap: nothing trimmed
    q.enqueue_many([JobSpec("t", {}, f"m{i}") for i in range(100)], chunk=10)
    assert q.redis.llen(q.keys.wake) == 64
    for i in range(5):
        q.enqueue("t", {}, idempotency_key=f"s{i}")
    assert q.redis.llen(q.keys.wake) == 64


def test_enqueue_same_job_id_twice_stores_once(q):
    assert q.enqueue("t", {"v": 1}, idempotency_key="k", job_id="fixed") == "fixed"
    q.enqueue("t", {"v": 2}, idempotency_key="k", job_id="fixed")
    assert q.redis.llen(q.keys.ready) == 1
    assert q.get("fixed").payload == {"v": 1}


@pytest.mark.parametrize("kwargs, message", [
    ({"payload": {"when": object()}}, "not JSON-serialisable"),
    ({"payload": "x" * 2000}, "over the limit"),
    ({"job_type": "bad type!"}, "bad job type"),
    ({"idempotency_key": ""}, "idempotency_key"),
    ({"lock_key": "{x}"}, "bad lock_key"),
])
def test_enqueue_rejects_what_cannot_be_stored(r, clock, kwargs, message):
    q = Queue(r, "jobs", clock=clock, max_payload_bytes=1000)
    args = {"job_type": "t", "payload": {}, "idempotency_key": "k", **kwargs}
    with pytest.raises(InvalidJob, match=message):
        q.enqueue(args.pop("job_type"), args.pop("payload"), **args)
    assert r.llen(q.keys.ready) == 0


def test_reserve_bumps_epoch_and_deliveries_and_sets_deadline(q, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=20)
    job = one(q)
    assert (job.id, job.epoch, job.deliveries, job.worker_id) == (job_id, 1, 1, "w1")
    assert job.deadline == clock() + 20_000
    assert_one_place(q, job_id, "inflight")
    assert q.redis.zscore(q.keys.inflight, job_id) == clock() + 20_000


def test_reserve_takes_a_batch_oldest_first(q):
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}") for i in range(5)])
    jobs = q.reserve("w1", count=3)
    assert [j.id for j in jobs] == ids[:3]
    assert q.redis.llen(q.keys.ready) == 2


def test_reserve_drops_orphan_ids(q):
    q.redis.lpush(q.keys.ready, "ghost")
    assert q.reserve("w1") == []
    assert q.stats()["orphans"] == 1


def test_ack_moves_to_done_with_result(q):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    q.ack(one(q), {"message_id": "m-1"})
    assert_one_place(q, job_id, "done")
    assert q.get(job_id).result == {"message_id": "m-1"}


def test_retry_schedules_and_spends_an_attempt(q, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    q.retry(one(q), delay_ms=5000, error="TimeoutError: upstream 504", kind="retryable")
    job = q.get(job_id)
    assert_one_place(q, job_id, "scheduled")
    assert job.attempt == 1 and job.last_error == "TimeoutError: upstream 504"
    assert q.redis.zscore(q.keys.scheduled, job_id) == clock() + 5000
    assert job.errors[-1]["kind"] == "retryable"


def test_snooze_spends_no_attempt_and_no_delivery(q):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    q.snooze(one(q), 500, "lock_busy", counter="lock_busy")
    job = q.get(job_id)
    assert (job.attempt, job.deliveries, job.state) == (0, 0, "scheduled")
    assert q.stats()["lock_busy"] == 1


def test_hand_back_returns_to_ready_without_spending(q):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    q.hand_back(one(q))
    job = q.get(job_id)
    assert_one_place(q, job_id, "ready")
    assert (job.attempt, job.deliveries) == (0, 0)


def test_bury_records_reason_and_indexes(q):
    job_id = q.enqueue("charge", {}, idempotency_key="k")
    group = q.bury(one(q), reason="permanent error: card declined", error="Declined: card 4242",
                   kind="permanent", traceback="Traceback ...")
    job = q.get(job_id)
    assert_one_place(q, job_id, "dead")
    assert job.reason == "permanent error: card declined" and job.traceback == "Traceback ..."
    assert job.first_failed_at and job.last_failed_at
    assert q.redis.zscore(q.keys.dead_by_type("charge"), job_id) is not None
    assert q.redis.zscore(q.keys.dead_by_group(group), job_id) is not None
    rec = json.loads(q.redis.hget(q.keys.error_groups, group))
    assert rec["total"] == 1 and "<n>" in rec["signature"]


def test_extend_from_now_and_add(q, clock):
    q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=10)
    job = one(q)
    clock.advance(4000)
    assert q.extend(job.id, job.epoch, 10_000) == clock() + 10_000
    assert q.extend(job.id, job.epoch, 5000, mode="add") == clock() + 15_000
    assert q.extend(job.id, job.epoch, 60_000, mode="add", cap_ms=clock() + 20_000) == clock() + 20_000
    assert q.redis.zscore(q.keys.inflight, job.id) == clock() + 20_000


def test_sweep_returns_expired_leases_to_ready(q, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=30)
    one(q)
    clock.advance(29_999)
    assert q.sweep().requeued == 0
    clock.advance(2)
    result = q.sweep()
    assert (result.requeued, result.buried, result.outcomes) == (1, 0, {job_id: "ready"})
    assert_one_place(q, job_id, "ready")
    assert q.stats()["expired"] == 1


def test_sweep_buries_a_job_delivered_too_many_times(q, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k", max_deliveries=3, visibility_timeout_s=1)
    for _ in range(3):
        one(q)
        clock.advance(1001)
        result = q.sweep()
    assert result.buried == 1
    job = q.get(job_id)
    assert_one_place(q, job_id, "dead")
    assert "delivered 3 times" in job.reason and "poison" in job.reason


def test_replay_resets_attempts_and_keeps_idempotency_key(q):
    job_id = q.enqueue("t", {}, idempotency_key="order:7")
    q.bury(one(q), reason="x")
    assert q.replay(job_id) is True
    job = q.get(job_id)
    assert_one_place(q, job_id, "ready")
    assert (job.attempt, job.deliveries, job.idempotency_key) == (0, 0, "order:7")
    assert q.replay(job_id) is False  # not dead any more: nothing changes


def test_discard_removes_only_dead_jobs(q):
    job_id = q.enqueue("t", {}, idempotency_key="k")
    assert q.discard(job_id) is False
    q.bury(one(q), reason="x")
    assert q.discard(job_id) is True
    assert q.get(job_id) is None and q.where(job_id) == []
    assert q.redis.zcard(q.keys.dead_by_type("t")) == 0


def test_run_now_moves_a_scheduled_job(q):
    job_id = q.enqueue("t", {}, idempotency_key="k", delay_s=3600)
    assert q.run_now(job_id) is True
    assert_one_place(q, job_id, "ready")
    assert q.run_now(job_id) is False


# -- stale epochs change nothing --------------------------------------------------------------

def stale_and_current(q, clock):
    q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=5)
    stale = one(q, "w1")
    clock.advance(5001)
    q.sweep()
    current = one(q, "w2")
    assert current.epoch == stale.epoch + 1
    return stale, current


def snapshot(q, job_id):
    return q.redis.hgetall(q.keys.job(job_id)), q.where(job_id)


@pytest.mark.parametrize("action", ["ack", "retry", "bury", "extend", "hand_back", "snooze"])
def test_stale_epoch_is_refused_and_changes_nothing(q, clock, action):
    stale, current = stale_and_current(q, clock)
    before = snapshot(q, stale.id)
    calls = {
        "ack": lambda: q.ack(stale, {"late": True}),
        "retry": lambda: q.retry(stale, delay_ms=10, error="late"),
        "bury": lambda: q.bury(stale, reason="late"),
        "extend": lambda: q.extend(stale.id, stale.epoch, 60_000),
        "hand_back": lambda: q.hand_back(stale),
        "snooze": lambda: q.snooze(stale, 10, "lock_busy"),
    }
    with pytest.raises(LeaseLost, match="epoch is 2, not 1"):
        calls[action]()
    assert snapshot(q, stale.id) == before
    q.ack(current)  # the current holder is unaffected
    assert q.where(current.id) == ["done"]


def test_ack_after_sweep_before_redelivery_is_refused(q, clock):
    q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=5)
    job = one(q)
    clock.advance(6000)
    q.sweep()
    with pytest.raises(LeaseLost, match="job is ready"):
        q.ack(job)


def test_ack_many_reports_lost_leases(q, clock):
    q.enqueue_many([JobSpec("t", {}, f"k{i}", visibility_timeout_s=5) for i in range(3)])
    jobs = q.reserve("w1", count=3)
    q.redis.zadd(q.keys.inflight, {jobs[0].id: clock() - 1})
    q.sweep()
    lost = q.ack_many([(j, None) for j in jobs])
    assert [j.id for j in lost] == [jobs[0].id]
    assert q.redis.zcard(q.keys.done) == 2


def test_ack_many_does_per_job_what_ack_does(r, clock):
    """Two queues, the same jobs: one acked job by job, the other in one ack_many call."""
    stores = {}
    for name in ("single", "many"):
        q = Queue(r, name, clock=ManualClock(1_000_000))
        q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}") for i in range(3)])
        q.enqueue("t", {}, idempotency_key="u", unique=True, unique_for_s=60)
        q.clock.advance(250)
        jobs = q.reserve("host:1:ab", count=4)
        q.clock.advance(750)
        done = [(j, {"n": i}) for i, j in enumerate(jobs)]
        notes = [{"ran_ms": i} for i in range(4)]
        if name == "single":
            for (job, result), note in zip(done, notes):
                q.ack(job, result, note=note)
        else:
            assert q.ack_many(done, notes=notes) == []
        hashes = [r.hgetall(q.keys.job(j.id)) for j in jobs]
        for h in hashes:
            h.pop("id", None), h.pop("trace_id", None), h.pop("queue", None), h.pop("ukey", None)
        # (the timeline as read: the 'reserved' and 'completed' events are kept in the hash)
        events = [[(e.at_ms, e.kind, e.actor, e.details)
                   for e in Finder(r).timeline(name, j.id).events[1:]] for j in jobs]
        stores[name] = (hashes, events, q.stats(), r.zcard(q.keys.done), r.zcard(q.keys.inflight),
                        r.get(q.keys.unique("u")).split(":")[0], r.pttl(q.keys.unique("u")) > 0)
    assert stores["single"] == stores["many"]
    hashes, events, stats, ndone, ninflight, unique, held = stores["many"]
    assert [h["state"] for h in hashes] == ["done"] * 4 and ndone == 4 and ninflight == 0
    assert stats["acked"] == 4 and stats["latency_ms_total"] == 4 * 1000
    assert unique == "done" and held
    assert events[1][-1] == (1_001_000, "completed", "host:1:ab",
                             {"result": '{"n":1}', "since_reserved_ms": 750, "ran_ms": 1})
    assert events[1][0] == (1_000_250, "reserved", "host:1:ab",
                            {"epoch": 1, "delivery": 1, "deadline": 1_030_250})


def test_ack_many_acks_the_held_leases_and_refuses_the_others(q, clock):
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(4)])
    jobs = q.reserve("w1", count=4)
    stale = Job_with_epoch(jobs[1], jobs[1].epoch + 5)
    q.ack(jobs[2])
    q.redis.delete(q.keys.job(jobs[3].id))
    lost = q.ack_many([(jobs[0], None), (stale, None), (jobs[2], None), (jobs[3], None)])
    assert [j.id for j in lost] == [jobs[1].id, jobs[2].id, jobs[3].id]
    assert q.where(jobs[0].id) == ["done"] and q.where(jobs[1].id) == ["inflight"]
    assert q.get(jobs[1].id).state == "inflight"
    assert q.stats()["acked"] == 2


def test_ack_many_sends_big_batches_in_chunks(r, clock):
    q = Queue(r, "jobs", clock=clock, done_max=100)
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(450)])
    jobs = q.reserve("w1", count=450)
    assert q.ack_many([(j, None) for j in jobs]) == []
    assert q.stats()["acked"] == 450 and r.zcard(q.keys.inflight) == 0
    assert r.zcard(q.keys.done) <= 100 + 200  # trimmed as it goes, bounded per call


def test_done_jobs_are_trimmed_by_age_in_ack_many(r, clock):
    q = Queue(r, "jobs", clock=clock, done_retention_ms=1_000)
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(6)])
    old = q.reserve("w1", count=3)
    q.ack_many([(j, None) for j in old])
    clock.advance(1_001)
    young = q.reserve("w1", count=3)
    q.ack_many([(j, None) for j in young])
    assert [q.get(j.id) for j in old] == [None] * 3
    assert set(r.zrange(q.keys.done, 0, -1)) == {j.id for j in young}


def test_reserve_returns_what_it_stored(q, clock):
    job_id = q.enqueue("t", {"a": 1}, idempotency_key="k", visibility_timeout_s=20)
    q.redis.hset(q.keys.job(job_id), mapping={"epoch": "4", "deliveries": "2"})
    [job] = q.reserve("w1")
    stored = q.get(job_id)
    assert (job.epoch, job.deliveries, job.state, job.deadline, job.worker_id) == (
        5, 3, "inflight", clock() + 20_000, "w1")
    assert (stored.epoch, stored.deliveries, stored.state, stored.deadline, stored.worker_id,
            stored.reserved_at) == (job.epoch, job.deliveries, job.state, job.deadline,
                                    job.worker_id, job.reserved_at)


def test_reserve_takes_a_job_hash_without_any_known_field(q, clock):
    q.redis.hset(q.keys.job("odd"), "something", "else")  # not an orphan: the hash exists
    q.redis.lpush(q.keys.ready, "odd")
    [job] = q.reserve("w1")
    assert job.epoch == clock() + 1 and job.deliveries == 1 and job.deadline == clock() + 30_000
    assert "orphans" not in q.stats()


def test_a_new_job_is_stored_without_counters_and_every_reader_takes_them_as_zero(q, clock):
    """attempt, epoch and deliveries start at 0 and are not written for a new job (three
    fields fewer to store: bench/experiments/enqueue.md); a reserve counts from 0, a retry
    spends the first attempt, a job whose epoch is damaged still restarts from the clock."""
    ids = [q.enqueue("t", {}, idempotency_key="k1"),  # enqueue_one.lua
           *q.enqueue_many([JobSpec("t", {}, "k2")]),  # enqueue.lua, the standard fields
           q.enqueue("t", {}, idempotency_key="k3", unique=True),  # enqueue.lua, named fields
           q.enqueue("t", {}, idempotency_key="k4", job_id="mine")]
    for job_id in ids:
        assert not {"attempt", "epoch", "deliveries"} & set(q.redis.hgetall(q.keys.job(job_id)))
        job = q.get(job_id)
        assert (job.attempt, job.epoch, job.deliveries, job.state) == (0, 0, 0, "ready")
    jobs = {j.id: j for j in q.reserve("w1", count=4)}
    assert sorted((j.attempt, j.epoch, j.deliveries) for j in jobs.values()) == [(0, 1, 1)] * 4
    q.retry(jobs[ids[0]], delay_ms=0, error="boom")
    again = q.get(ids[0])
    assert (again.attempt, again.epoch, again.deliveries, again.state) == (1, 1, 1, "ready")
    [job] = q.reserve("w1")
    assert (job.attempt, job.epoch, job.deliveries) == (1, 2, 2)
    q.redis.hset(q.keys.job("mine"), "epoch", "garbage")  # damaged: from the clock, as before
    q.redis.hset(q.keys.job("mine"), "state", "ready")
    q.redis.lpush(q.keys.ready, "mine")
    [mine] = q.reserve("w2")
    assert mine.id == "mine" and mine.epoch == clock() + 1


def test_done_jobs_are_trimmed(r, clock):
    q = Queue(r, "jobs", clock=clock, done_max=5)
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(12)])
    for job in q.reserve("w1", count=12):
        q.ack(job)
    assert r.zcard(q.keys.done) <= 6
    assert q.stats()["acked"] == 12


def test_every_job_is_in_exactly_one_place_through_a_lifecycle(q, clock):
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}", visibility_timeout_s=5,
                                  max_deliveries=2) for i in range(20)])
    jobs = q.reserve("w1", count=20)
    for i, job in enumerate(jobs):
        [lambda: q.ack(job), lambda: q.retry(job, delay_ms=1000, error="e"),
         lambda: q.bury(job, reason="r"), lambda: None][i % 4]()
    clock.advance(6000)
    q.sweep()
    q.promote()
    for job_id in ids:
        assert len(q.where(job_id)) == 1, job_id


def test_checkpoint_survives_a_retry_and_is_fenced(q, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=5)
    job = one(q)
    q.checkpoint(job, {"page": 3})
    q.retry(job, delay_ms=0, error="e")
    again = one(q)
    assert again.checkpoint == {"page": 3}
    with pytest.raises(LeaseLost):
        q.checkpoint(job, {"page": 99})
    assert q.get(job_id).checkpoint == {"page": 3}


def test_heartbeat_extension_never_undoes_an_operator_extension(q, clock):
    q.enqueue("t", {}, idempotency_key="k", visibility_timeout_s=30)
    job = one(q)
    extended = q.extend(job.id, job.epoch, 600_000, mode="add")  # the operator's button
    clock.advance(1000)
    assert q.extend(job.id, job.epoch, 30_000, mode="at_least") == extended  # heartbeat
    clock.advance(600_000)
    assert q.extend(job.id, job.epoch, 30_000, mode="at_least") == clock() + 30_000
    cap = clock() + 10_000
    assert q.extend(job.id, job.epoch, 30_000, mode="at_least", cap_ms=cap) == clock() + 30_000


def test_a_corrupted_epoch_restarts_above_every_old_lease(q, clock):
    q.enqueue("t", {}, idempotency_key="k")
    old = one(q)
    q.hand_back(old)
    q.redis.hset(q.keys.job(old.id), "epoch", "garbage")
    new = one(q)
    assert new.epoch > clock() > old.epoch
    with pytest.raises(LeaseLost):
        q.ack(old)
