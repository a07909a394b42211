"""A prefetched batch's retries and burials are settled together (one
``fail_many.lua`` call, the acks in one ``ack_many.lua`` call), each job still fenced on its own
lease: a batch mixing successes, retries, burials, a job whose lease changed and a job whose
record broke while it ran ends each job right and loses none."""

from __future__ import annotations

from helpers import make_worker

from antre import Permanent, Retryable


def _batch(app, clock, q, types: list[str]):
    ids = [app.enqueue(t, {"i": i}, idempotency_key=f"{t}:{i}") for i, t in enumerate(types)]
    w = make_worker(app, clock)
    calls: list[int] = []
    fail_many = w.queues[0].fail_many

    def counted(failures):  # the real call, counted
        calls.append(len(failures))
        return fail_many(failures)
    w.queues[0].fail_many = counted  # type: ignore[method-assign]
    held = w._hold(w.queues[0], w.queues[0].reserve(w.worker_id, count=len(types)))
    assert len(held) == len(types)
    w._work(held)
    return ids, w, calls


def _handlers(app, r, q):
    @app.handler("ok")
    def ok(ctx, payload):
        return {"n": payload["i"]}

    @app.handler("retry", max_attempts=3)
    def retry(ctx, payload):
        raise Retryable(f"upstream 503 for {payload['i']}")

    @app.handler("perm")
    def perm(ctx, payload):
        raise Permanent(f"card declined for {payload['i']}")

    @app.handler("stale", max_attempts=3)
    def stale(ctx, payload):  # another delivery took the job meanwhile
        r.hincrby(q.keys.job(ctx.job.id), "epoch", 1)
        raise Retryable("too late")

    @app.handler("broken")
    def broken(ctx, payload):  # the record was overwritten while the job ran
        r.delete(q.keys.job(ctx.job.id))
        r.set(q.keys.job(ctx.job.id), "garbage")
        raise Permanent("never recorded")


def test_a_mixed_batch_ends_each_job_right(app, clock, q, r):
    _handlers(app, r, q)
    types = ["ok", "perm", "retry", "ok", "stale", "retry", "broken", "perm", "ok"]
    ids, w, calls = _batch(app, clock, q, types)
    assert calls == [6]  # every failure of the batch in one call
    got = {t: [] for t in types}
    for job_id, t in zip(ids, types):
        if t != "broken":
            got[t].append(q.get(job_id))
    assert [(j.state, j.result) for j in got["ok"]] == [("done", {"n": 0}), ("done", {"n": 3}),
                                                        ("done", {"n": 8})]
    for job in got["retry"]:
        assert (job.state, job.attempt, job.error_kind) == ("scheduled", 1, "retryable")
        assert "Retryable: upstream 503" in job.errors[-1]["traceback"]
        assert q.where(job.id) == ["scheduled"]
    for job in got["perm"]:
        assert job.state == "dead" and "card declined" in job.reason
        assert "Permanent: card declined" in job.errors[-1]["traceback"]
        group = r.hget(q.keys.job(job.id), "group")  # its error group
        assert q.redis.zscore(q.keys.dead_by_group(group), job.id) is not None
    (stale,) = got["stale"]
    assert stale.state == "inflight" and q.where(stale.id) == ["inflight"]  # its lease's holder
    broken = ids[types.index("broken")]
    assert q.where(broken) == ["inflight"]  # the sweeper buries it as corrupt
    assert w.counts["lease_lost"] == 2 and w.counts["buried"] == 2 and w.counts["retried"] == 2
    clock.advance(31_000)
    assert q.sweep().buried >= 1 and q.get(broken).state == "dead"
    assert sum(len(q.where(i)) == 1 for i in ids) == len(ids)  # each in exactly one place


def test_the_timeline_keeps_the_failure_event_with_its_traceback(app, clock, q, r):
    _handlers(app, r, q)
    ids, _, _ = _batch(app, clock, q, ["retry", "perm"])
    from antre.observe.finder import Finder
    for job_id, kind in zip(ids, ("failed", "buried")):
        events = Finder(r, clock).timeline("default", job_id).events
        last = events[-1]
        assert last.kind == kind and last.actor == "w1"
        assert "Traceback (most recent call last)" in last.details["traceback"]
        assert "ran_ms" in last.details or "ran_ms" in (last.extra or {})
