"""Random job records of a batch are corrupted (every type Redis has
in place of the hash, or one field missing, of another kind, not UTF-8, an absurd number,
nested past any limit); a real in-process worker then runs the queue dry. Every healthy job
runs exactly once; every broken record ends in the DLQ with its reason, or in the quarantine
(a record that is missing); a damaged field either does no harm (the job runs once) or sends
its job to the DLQ with a reason; no job id is left in no list."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import make_worker

from antre import Antre
from antre.engine.envelope import RESERVE_FIELDS

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

RECORD_TYPES = ("string", "list", "set", "zset", "stream", "missing")
NOT_UTF8 = b"\xff\xfe\xc3("
FIELD_VALUES = st.sampled_from([
    None,  # the field is missing
    NOT_UTF8,
    b'{"i":"' + NOT_UTF8 + b'"}',
    "1e999", "-1e999", "NaN", "99999999999999999999999999", "-7", "0", "",
    "[" * 5_000 + "]" * 5_000,  # deep nesting (the decoder's limit is far below)
    '{"x": NaN}',
    "not json {",
])
# fields whose damage must send the job to the DLQ (the others may be harmless: a payload of
# -7 is a payload)
FATAL = {"payload": {None, NOT_UTF8, b'{"i":"' + NOT_UTF8 + b'"}', "1e999", "-1e999", "NaN", "",
                     "[" * 5_000 + "]" * 5_000, '{"x": NaN}', "not json {"},
         "type": {None, NOT_UTF8, "1e999", "-1e999", "NaN", "99999999999999999999999999", "-7",
                  "0", "", "[" * 5_000 + "]" * 5_000, '{"x": NaN}', "not json {",
                  b'{"i":"' + NOT_UTF8 + b'"}'}}
FIELDS = [f for f in RESERVE_FIELDS if f not in ("id", "cancel")]
# reserve.lua overwrites these before the job reaches a worker (their damage is harmless)
WRITTEN_BY_RESERVE = {"epoch", "deliveries", "state", "deadline", "reserved_at", "worker_id"}

damage = st.one_of(
    st.tuples(st.just("record"), st.sampled_from(RECORD_TYPES), st.none()),
    st.tuples(st.just("field"), st.sampled_from(FIELDS), FIELD_VALUES),
)

def bounded_burst(app: Antre, clock, bound_s: float = 10) -> dict[str, int]:
    """``helpers.burst``, stopped (and failed) if the worker has not run the queue dry after
    ``bound_s``: code that loops on an error fails the test instead of hanging it."""
    worker = make_worker(app, clock)
    counts: dict[str, int] = {}
    thread = threading.Thread(target=lambda: counts.update(worker.run_burst()), daemon=True)
    thread.start()
    thread.join(bound_s)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        pytest.fail(f"the worker did not run the queue dry within {bound_s} s")
    return counts



def write(r, key: str, kind: str, what: str, value) -> None:
    if kind == "record":
        r.delete(key)
        {"string": lambda: r.set(key, "x" * 40),
         "list": lambda: r.rpush(key, "a"),
         "set": lambda: r.sadd(key, "a"),
         "zset": lambda: r.zadd(key, {"a": 1}),
         "stream": lambda: r.xadd(key, {"a": "1"}),
         "missing": lambda: None}[what]()
    elif value is None:
        r.hdel(key, what)
    else:
        r.hset(key, what, value)


@PROPERTY
@given(healthy=st.integers(1, 8), damaged=st.lists(damage, min_size=1, max_size=4),
       positions=st.randoms(use_true_random=False))
def test_broken_records_poison_only_themselves(redis_url, r, clock, healthy, damaged,
                                               positions):
    r.flushall()
    app = Antre(redis_url=redis_url, clock=clock)
    runs: list[str] = []

    @app.handler("t")
    def handle(ctx, payload):
        runs.append(ctx.job.id)

    q = app.queue()
    ids = [app.enqueue("t", {"i": i}, idempotency_key=f"k{i}")
           for i in range(healthy + len(damaged))]
    bad = dict(zip(positions.sample(ids, len(damaged)), damaged))
    for job_id, (kind, what, value) in bad.items():
        write(r, q.keys.job(job_id), kind, what, value)

    bounded_burst(app, clock)

    quarantined = {e["id"] for e in q.quarantined(1000)}
    for job_id in ids:
        where = q.where(job_id)
        if job_id not in bad:
            assert runs.count(job_id) == 1, (job_id, runs)
            assert where == ["done"]
            continue
        kind, what, value = bad[job_id]
        assert runs.count(job_id) <= 1
        if kind == "record" and what == "missing":
            assert where == [] and job_id in quarantined
        elif kind == "record":
            assert where == ["dead"] and runs.count(job_id) == 0
            assert f"job record is a {what}, not a hash" in q.get(job_id).reason
        else:
            assert len(where) == 1 and where[0] in ("done", "dead"), (bad[job_id], where)
            job = q.get(job_id)
            if where == ["dead"]:
                assert job.reason and runs.count(job_id) == 0, (bad[job_id], job.reason)
            else:
                assert runs.count(job_id) == 1
            if what in FATAL and value in FATAL[what]:
                assert where == ["dead"], (bad[job_id], job.state)
            if isinstance(value, bytes) and what not in WRITTEN_BY_RESERVE:
                assert where == ["dead"] and "not valid UTF-8" in job.reason, bad[job_id]
    assert r.llen(q.keys.ready) == 0 and r.zcard(q.keys.inflight) == 0
