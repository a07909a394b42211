"""Job timelines written by the transition scripts, the idempotency-key index, the finder (by
id, by key, by payload field) and the producer's view (``Antre.job`` / ``Antre.result``), on a
real Redis (and SQL where a result is stored), with the clock injected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


from antre import Antre, Permanent, Retryable
from antre.observe.finder import CHUNK, TIMELINE_CAP, BadQuery, Finder, parse_fields
from antre.engine.queue import Queue
from antre_worker.runner import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def q(r, clock):
    return Queue(r, "jobs", clock=clock)


@pytest.fixture
def finder(r, clock):
    return Finder(r, clock)


def kinds(finder, queue, job_id):
    return [(e.kind, e.actor) for e in finder.timeline(queue, job_id).events]


def one(q, worker="host:123:ab"):
    jobs = q.reserve(worker)
    assert len(jobs) == 1
    return jobs[0]


# -- keys and scripts agree ------------------------------------------------------------------
def test_lua_derives_the_same_timeline_and_index_keys_as_keys_py(q):
    k = q.keys
    assert k.job_prefix[:-4] + "tl:" == k.timeline_prefix
    assert k.job_prefix[:-4] + "idem" == k.idem_index
    lib = (ROOT / "antre/engine/lua/_timeline.lua").read_text()
    assert "tag_of(job_prefix) .. K.timeline" in lib
    assert f"local TL_CAP = {TIMELINE_CAP}" in lib


# -- every event kind, in order, with its actor -------------------------------------------------
def test_success_path_reserved_extended_checkpoint_completed(q, finder, clock):
    job_id = q.enqueue("t", {"a": 1}, idempotency_key="k1")
    job = one(q)
    clock.advance(1_000)
    q.extend(job.id, job.epoch, 30_000, mode="at_least")  # heartbeat
    clock.advance(1_000)
    q.extend(job.id, job.epoch, 30_000, mode="at_least")  # heartbeat again: one event
    q.checkpoint(job, {"page": 3})
    q.extend(job.id, job.epoch, 10_000, mode="add", actor="alice")
    clock.advance(500)
    q.ack(job, {"sent": True}, note={"fence": 7})
    tl = finder.timeline("jobs", job_id)
    assert [(e.kind, e.actor) for e in tl.events] == [
        ("enqueued", "producer"), ("reserved", "host:123:ab"), ("extended", "host:123:ab"),
        ("checkpoint", "host:123:ab"), ("extended", "alice"), ("completed", "host:123:ab")]
    ev = {e.kind + e.actor: e for e in tl.events}
    assert ev["reservedhost:123:ab"].details["epoch"] == 1
    beat = tl.events[2]
    assert beat.details["by"] == "heartbeat" and beat.count == 2
    assert beat.last_ms == beat.at_ms + 1_000
    assert tl.events[3].details["preview"] == '{"page":3}'
    assert tl.events[4].details["by"] == "operator"
    done = tl.events[5]
    assert done.details["result"] == '{"sent":true}' and done.details["fence"] == 7
    assert done.details["since_reserved_ms"] == 2_500
    assert [e.at_ms for e in tl.events] == sorted(e.at_ms for e in tl.events)
    assert tl.trace_id.startswith("00-")


def test_failure_snooze_hand_back_bury_replay_run_now_due(q, finder, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k2", delay_s=5)
    clock.advance(5_000)
    assert q.promote() == 1
    job = one(q)
    q.retry(job, delay_ms=1_000, error="boom", kind="retryable", traceback="Traceback: x")
    assert q.run_now(job_id, actor="bob", note={"reason": "now"})
    job = one(q)
    q.snooze(job, 2_000, "lock_busy", note={"lock": "user:1", "fence": 4})
    clock.advance(2_000)
    q.promote()
    job = one(q)
    q.hand_back(job)
    job = one(q)
    q.bury(job, reason="bad input", error="ValueError: x", kind="permanent")
    assert q.replay(job_id, actor="carol", note={"bulk_task": "t1"})
    got = kinds(finder, "jobs", job_id)
    assert got == [("enqueued", "producer"), ("due", "promoter"), ("reserved", "host:123:ab"),
                   ("failed", "host:123:ab"), ("run_now", "bob"), ("reserved", "host:123:ab"),
                   ("snoozed", "host:123:ab"), ("due", "promoter"),
                   ("reserved", "host:123:ab"), ("handed_back", "host:123:ab"),
                   ("reserved", "host:123:ab"), ("buried", "host:123:ab"),
                   ("replayed", "carol")]
    events = finder.timeline("jobs", job_id).events
    assert events[0].details["delay_ms"] == 5_000
    failed = events[3].details
    assert (failed["error"], failed["traceback"], failed["attempt"]) == (
        "boom", "Traceback: x", 1)
    assert events[6].details == {"why": "lock_busy", "counter": "snoozed",
                                 "until_ms": clock() - 2_000 + 2_000, "lock": "user:1",
                                 "fence": 4}
    assert events[11].details["reason"] == "bad input"
    assert events[12].details["bulk_task"] == "t1"


def test_deduplicated_ack_and_handler_extension(q, finder, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k7")
    job = one(q)
    q.extend(job.id, job.epoch, 5_000)  # ctx.extend_lease: mode from_now
    q.ack(job, {"stored": 1}, counter="deduplicated")
    events = finder.timeline("jobs", job_id).events
    assert [(e.kind, e.actor) for e in events][2:] == [("extended", "host:123:ab"),
                                                       ("deduplicated", "host:123:ab")]
    assert events[2].details["by"] == "handler"


def test_sweeper_events_and_poison_bury(q, finder, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k3", max_deliveries=2,
                       visibility_timeout_s=1)
    one(q, "w-a:1:x")
    clock.advance(2_000)
    q.sweep()
    one(q, "w-b:2:y")
    clock.advance(2_000)
    q.sweep()
    got = kinds(finder, "jobs", job_id)
    assert got == [("enqueued", "producer"), ("reserved", "w-a:1:x"), ("swept", "sweeper"),
                   ("reserved", "w-b:2:y"), ("swept", "sweeper"), ("buried", "sweeper")]
    events = finder.timeline("jobs", job_id).events
    assert events[2].details == {"worker": "w-a:1:x", "delivery": 1, "outcome": "ready"}
    assert events[4].details["outcome"] == "dead"
    assert "poison" in events[5].details["kind"]


def test_discard_keeps_the_timeline_and_forgets_the_key(q, finder, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k4")
    q.bury(one(q), reason="no")
    assert finder.by_key("k4").job_id == job_id
    assert q.discard(job_id, actor="dave", note={"reason": "spam"})
    assert q.get(job_id) is None
    assert finder.by_key("k4") is None
    found = finder.locate(job_id)
    assert (found.queue, found.state) == ("jobs", "gone")
    tl = finder.timeline("jobs", job_id)
    assert not tl.job_exists
    assert [(e.kind, e.actor) for e in tl.events][-1] == ("discarded", "dave")
    assert 0 < q.redis.pttl(q.keys.timeline(job_id)) <= 7 * 86_400_000


def test_timeline_is_capped(q, finder, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k5")
    for _ in range(TIMELINE_CAP):
        job = one(q)
        q.snooze(job, 0, "rate_limited")
    tl = finder.timeline("jobs", job_id)
    assert tl.capped and len(tl.events) == TIMELINE_CAP + 1  # + the enqueued event read from the hash
    assert tl.events[0].kind == "enqueued"
    assert tl.events[1].kind == "reserved"  # the first reserve stays (tests/observe/test_timeline_coalesce.py)


def test_trimmed_done_job_takes_timeline_and_index_entry_along(r, clock, finder):
    q = Queue(r, "small", clock=clock, done_max=1)
    first = q.enqueue("t", {}, idempotency_key="a")
    q.ack(one(q))
    clock.advance(1)  # the older done job is the one trimmed
    second = q.enqueue("t", {}, idempotency_key="b")
    q.ack(one(q))
    assert q.get(first) is None and not r.exists(q.keys.timeline(first))
    assert r.hget(q.keys.idem_index, "a") is None
    assert r.hget(q.keys.idem_index, "b") == second


def test_lost_lease_writes_no_event(q, finder, clock):
    job_id = q.enqueue("t", {}, idempotency_key="k6")
    job = one(q)
    job.epoch = 99
    with pytest.raises(Exception):
        q.ack(job)
    assert [k for k, _ in kinds(finder, "jobs", job_id)] == ["enqueued", "reserved"]


# -- the finder ----------------------------------------------------------------------------------
def _one_in_each_state(q, clock):
    ids = {}
    ids["done"] = q.enqueue("order", {"order_id": 1, "c": {"id": "x"}}, idempotency_key="o:1")
    q.ack(one(q))
    ids["dead"] = q.enqueue("order", {"order_id": 2, "c": {"id": "x"}}, idempotency_key="o:2")
    q.bury(one(q), reason="no")
    ids["inflight"] = q.enqueue("order", {"order_id": 3, "c": {"id": "x"}},
                                idempotency_key="o:3")
    one(q)
    ids["scheduled"] = q.enqueue("order", {"order_id": 4, "c": {"id": "x"}},
                                 idempotency_key="o:4", delay_s=60)
    ids["ready"] = q.enqueue("order", {"order_id": 5, "c": {"id": "x"}, "items": [{"sku": "A"}]},
                             idempotency_key="o:5")
    return ids


def test_find_by_id_and_key_in_each_state(q, finder, clock):
    ids = _one_in_each_state(q, clock)
    for n, (state, job_id) in enumerate(sorted(ids.items(), key=lambda kv: kv[1])):
        assert finder.locate(job_id).state == state
    for i, state in enumerate(["done", "dead", "inflight", "scheduled", "ready"], start=1):
        found = finder.by_key(f"o:{i}")
        assert (found.job_id, found.state, found.queue) == (ids[state], state, "jobs")
        assert finder.resolve(f"  o:{i} ").job_id == ids[state]
        assert finder.resolve(ids[state]).state == state
    assert finder.locate("no-such-job") is None
    assert finder.by_key("no-such-key") is None
    assert finder.locate("bad id with spaces") is None


def test_find_by_payload_field_in_each_state_and_across_all(q, finder, clock):
    ids = _one_in_each_state(q, clock)
    for i, state in enumerate(["done", "dead", "inflight", "scheduled", "ready"], start=1):
        step = finder.search(f"order_id={i}", queue="jobs", state=state)
        assert [(h.job_id, h.state) for h in step.hits] == [(ids[state], state)]
        assert step.done
        assert finder.search(f"order_id={i}", queue="jobs",
                             state="ready" if state != "ready" else "dead").hits == []
    everywhere = finder.search("c.id=x")
    assert {h.job_id for h in everywhere.hits} == set(ids.values())
    assert everywhere.scanned == everywhere.total == 5
    assert [h.job_id for h in finder.search("items.0.sku=A").hits] == [ids["ready"]]
    assert [h.matched for h in finder.search("order_id=5&c.id=x").hits] == [
        {"order_id": 5, "c.id": "x"}]
    assert finder.search("order_id=99").hits == []


def test_payload_search_goes_in_bounded_steps_with_a_cursor(q, finder):
    from antre.engine.queue import JobSpec
    n = CHUNK * 2 + 7
    q.enqueue_many([JobSpec("t", {"order_id": i % 100}, f"k{i}") for i in range(n)])
    seen, cursor, steps = [], None, 0
    while True:
        step = finder.search("order_id=42", queue="jobs", cursor=cursor, budget_ms=0)
        seen += step.hits
        steps += 1
        assert step.scanned <= step.total == n
        if step.done:
            break
        cursor = step.cursor
    assert steps >= 3  # budget 0: one chunk of CHUNK ids per step
    assert len(seen) == len({h.job_id for h in seen}) == len(range(42, n, 100))


@pytest.mark.parametrize("expr", ["", "order_id", "=3", "a..b=1", "a b=1", "{x}=1"])
def test_malformed_field_expressions_are_refused_with_a_hint(finder, expr):
    with pytest.raises(BadQuery) as info:
        parse_fields(expr)
    assert "=" in str(info.value)


def test_bad_cursor_and_state_are_refused(finder):
    with pytest.raises(BadQuery):
        finder.search("a=1", cursor="nonsense")
    with pytest.raises(BadQuery):
        finder.search("a=1", state="lost")


def test_value_matching_rules():
    (f,) = parse_fields("v=1")
    assert f.value_in({"v": 1})[0] and f.value_in({"v": "1"})[0] and f.value_in({"v": 1.0})[0]
    assert not f.value_in({"v": 2})[0] and not f.value_in({"w": 1})[0]
    (t,) = parse_fields("flag=true")
    assert t.value_in({"flag": True})[0] and not t.value_in({"flag": False})[0]
    (s,) = parse_fields('name="Ann"')
    assert s.value_in({"name": "Ann"})[0]


# -- the producer's view -------------------------------------------------------------------------
def test_app_job_reports_state_attempts_and_result(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock)
    q = app.queue("default")
    job_id = app.enqueue("t", {}, idempotency_key="p:1")
    assert (app.job(job_id).state, app.job(job_id).attempts) == ("ready", 0)
    job = one(q)
    q.retry(job, delay_ms=0, error="x")
    q.ack(one(q), {"ok": 1})
    status = app.job(job_id)
    assert (status.state, status.attempts, status.result, status.queue) == (
        "done", 1, {"ok": 1}, "default")
    assert app.job("nope").state == "unknown"


def test_app_result_completed_pending_failed_unknown(redis_url, sqlite_url, clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)

    @app.handler("ok")
    def ok(ctx, payload):
        return {"n": payload["n"]}

    @app.handler("bad", max_attempts=1)
    def bad(ctx, payload):
        raise Permanent("card declined")

    @app.handler("later")
    def later(ctx, payload):
        raise Retryable("busy")

    app.enqueue("ok", {"n": 7}, idempotency_key="r:done")
    app.enqueue("bad", {}, idempotency_key="r:failed")
    app.enqueue("later", {}, idempotency_key="r:pending-retry")
    app.enqueue("ok", {"n": 1}, idempotency_key="r:queued", delay_s=60)
    WorkerProcess(app, queues=["default"], worker_id="w:1:a", clock=clock,
                  heartbeat_s=60, stop_grace_s=2).run_burst()
    done = app.result("r:done")
    assert (done.status, done.result, done.source) == ("completed", {"n": 7}, "sql")
    failed = app.result("r:failed")
    assert failed.status == "failed" and "card declined" in failed.error
    assert app.result("r:pending-retry").status == "pending"
    assert app.result("r:queued").status == "pending"
    assert app.result("r:never").status == "unknown"
    app.engine.dispose()


def test_worker_events_carry_the_worker_id_with_its_pid(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock)

    @app.handler("flaky", max_attempts=2)
    def flaky(ctx, payload):
        ctx.checkpoint({"step": 1})
        if ctx.attempt == 1:
            raise Retryable("try again")
        return "fine"

    job_id = app.enqueue("flaky", {}, idempotency_key="w:1")
    w = WorkerProcess(app, queues=["default"], clock=clock, heartbeat_s=60, stop_grace_s=2)
    w.run_burst()
    clock.advance(120_000)
    app.queue().promote()
    w.run_burst()
    events = app.finder.timeline("default", job_id).events
    assert [e.kind for e in events] == ["enqueued", "reserved", "checkpoint", "failed", "due",
                                        "reserved", "checkpoint", "completed"]
    import os
    assert all(f":{os.getpid()}:" in e.actor for e in events
               if e.kind in ("reserved", "checkpoint", "failed", "completed"))
    assert json.loads(events[-1].details["result"]) == "fine"


# -- what the worker's pipeline adds to the events (its settle step passes it to the scripts) ----
def test_worker_notes_lock_busy_with_fence_then_completion_with_fences(redis_url, sqlite_url,
                                                                       clock):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    seen = {}

    @app.handler("locked")
    def locked(ctx, payload):
        seen["held"] = {h.key: h for h in app.locks.held()}
        return "posted"

    other = app.locks.acquire("acct:1", 60_000, owner="other:9:zz")
    job_id = app.enqueue("locked", {}, idempotency_key="l:1", lock_key="acct:1")
    w = WorkerProcess(app, queues=["default"], clock=clock, heartbeat_s=60, stop_grace_s=2)
    w.run_burst()
    snoozed = app.finder.timeline("default", job_id).events[-1]
    assert snoozed.kind == "snoozed" and snoozed.actor == w.worker_id
    assert (snoozed.details["why"], snoozed.details["lock"], snoozed.details["holder_fence"],
            snoozed.details["holder"]) == ("lock_busy", "acct:1", other.fence, other.token)
    assert "lock busy" in snoozed.details["note"]
    app.locks.release(other)
    clock.advance(5_000)
    w.run_burst()
    events = app.finder.timeline("default", job_id).events
    done = events[-1]
    assert [e.kind for e in events][-3:] == ["due", "reserved", "completed"]
    assert done.details["lock"] == "acct:1" and done.details["lock_fence"] == other.fence + 1
    assert done.details["idempotency_fence"] == 2  # the lease epoch of the delivery that ran
    assert done.details["ran_ms"] >= 0 and done.actor == w.worker_id
    assert seen["held"]["acct:1"].holder_job == f"default/{job_id}"
    app.engine.dispose()


def test_worker_hand_back_on_shutdown_says_why(redis_url, clock):
    import threading
    app = Antre(redis_url=redis_url, clock=clock)
    started, release = threading.Event(), threading.Event()

    @app.handler("hang")
    def hang(ctx, payload):
        started.set()
        release.wait(10)

    job_id = app.enqueue("hang", {}, idempotency_key="h:1")
    w = WorkerProcess(app, queues=["default"], clock=clock, heartbeat_s=60, stop_grace_s=0.3)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert started.wait(5)
        w.stop()
        t.join(5)
    finally:
        release.set()
    last = app.finder.timeline("default", job_id).events[-1]
    assert (last.kind, last.actor) == ("handed_back", w.worker_id)
    assert "shutting down" in last.details["why"]


def test_bulk_replay_and_bulk_discard_name_the_operator_and_the_task(q, finder, clock):
    from antre.control.bulk import BulkReplays
    from antre.observe.readmodels import DeadFilter
    ids = []
    for i in range(3):
        ids.append(q.enqueue("t", {}, idempotency_key=f"b{i}"))
        q.bury(one(q), reason="no")
        clock.advance(10)
    bulk = BulkReplays(q.redis, clock)
    task = bulk.start("jobs", DeadFilter(), 100.0, 2, "erin", "upstream back")
    clock.advance(1_000)
    bulk.step("jobs", task.id)
    replayed = [finder.timeline("jobs", j).events[-1] for j in ids[:2]]
    assert [(e.kind, e.actor, e.details["bulk_task"]) for e in replayed] == [
        ("replayed", "erin", task.id)] * 2
    assert replayed[0].details["reason"] == "upstream back"
    out = bulk.discard_filtered("jobs", DeadFilter(), 10, actor="frank")
    assert out.done == 1
    gone = finder.timeline("jobs", ids[2]).events[-1]
    assert (gone.kind, gone.actor, gone.details["bulk"]) == ("discarded", "frank", "discard [all]")
