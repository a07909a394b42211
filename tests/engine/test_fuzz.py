"""Fuzzing the edges where untrusted data enters: ``Queue.enqueue`` arguments, and job hashes
found corrupted in Redis (garbage written into fields, fields missing).

* ``enqueue`` either raises ``InvalidJob`` with a message, or stores the job and reads it back
  identical (its JSON round trip).
* A corrupted envelope never makes ``reserve`` / ``from_fields`` crash, and never makes a job
  disappear: every job whose hash exists is still in exactly one place.
* The worker buries corrupted jobs with a reason and keeps processing the good ones after.

The tests on non-finite options, deep nesting, lone surrogates, bad headers, overflowing
numbers, empty payloads and corrupted counters pin core bugs this file found (since fixed).
"""

from __future__ import annotations

import json
import math

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from antre import InvalidJob, LeaseLost
from antre.engine.envelope import RESERVE_FIELDS, _json, from_fields, from_row
from antre.engine.queue import JobSpec, Queue

LIMIT = 2_000  # a small payload limit so sizes around it are cheap to generate
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@pytest.fixture
def q(r):
    return Queue(r, "fuzz", max_payload_bytes=LIMIT)


# -- enqueue arguments ---------------------------------------------------------------------------

# text without lone surrogates (those have their own test below)
odd_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", " ", "\x00", "a\x00b", "{", "}", "{x}", "\n", "é", "🦊", "a" * 101, "a" * 501,
     "::", "-", "ok.name_1:2-3", "\u202e", "null", "0"])
scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True,
           allow_infinity=True) | odd_text | st.binary(max_size=8))
json_ish = st.recursive(
    scalars,
    lambda children: (st.lists(children, max_size=5) | st.tuples(children, children)
                      | st.dictionaries(odd_text, children, max_size=5)
                      | st.dictionaries(st.integers(), children, max_size=2)
                      | st.frozensets(st.integers(), max_size=3)),
    max_leaves=25)
# strings whose JSON encoding is just under, at and over the limit
sized = st.integers(LIMIT - 4, LIMIT + 2).map(lambda n: "x" * (n - 2))


def _json_roundtrip(value):
    return json.loads(json.dumps(value, allow_nan=False, sort_keys=True))


def _assert_stored_or_refused(q: Queue, call, payload):
    try:
        job_id = call()
    except InvalidJob as exc:
        assert str(exc).strip(), "InvalidJob without a message"
        return
    job = q.get(job_id)
    assert job is not None and job.payload_error == ""
    assert job.payload == _json_roundtrip(payload)
    assert q.where(job_id) in (["ready"], ["scheduled"])


@FUZZ
@given(payload=json_ish | sized)
@example(payload=float("nan"))
@example(payload={"a": float("inf")})
@example(payload=b"bytes")
@example(payload={"x": "y" * (LIMIT - 8)})
def test_enqueue_payload_is_stored_identical_or_refused(q, payload):
    q.redis.flushall()
    _assert_stored_or_refused(
        q, lambda: q.enqueue("t", payload, idempotency_key="k"), payload)


@FUZZ
@given(size=st.integers(LIMIT - 3, LIMIT + 3))
def test_payload_size_limit_is_exact(q, size):
    q.redis.flushall()
    payload = "x" * (size - 2)  # JSON adds the two quotes
    if size <= LIMIT:
        assert q.get(q.enqueue("t", payload, idempotency_key="k")).payload == payload
    else:
        with pytest.raises(InvalidJob, match="over the limit"):
            q.enqueue("t", payload, idempotency_key="k")


@pytest.mark.parametrize("field, value", [
    ("job_type", None), ("job_type", b"t"), ("job_type", 7), ("idempotency_key", None),
    ("idempotency_key", 7), ("lock_key", 5), ("lock_key", b"l")])
def test_a_name_that_is_not_a_string_is_refused_with_invalidjob(r, field, value):
    spec = {"job_type": "t", "idempotency_key": "k", "lock_key": None, field: value}
    q = Queue(r, "q")
    with pytest.raises(InvalidJob):
        q.enqueue(spec["job_type"], {}, idempotency_key=spec["idempotency_key"],
                  lock_key=spec["lock_key"])
    with pytest.raises(InvalidJob):  # in a batch too: nothing of the batch is stored
        q.enqueue_many([JobSpec("ok", {}, "k0"),
                        JobSpec(spec["job_type"], {}, spec["idempotency_key"],
                                lock_key=spec["lock_key"])])
    assert r.dbsize() == 0


@pytest.mark.parametrize("name", [None, b"q", 3.5])
def test_a_queue_name_that_is_not_a_string_is_refused_with_invalidjob(r, name):
    with pytest.raises(InvalidJob):
        Queue(r, name)


@FUZZ
@given(job_type=odd_text, idem=odd_text, lock=st.none() | odd_text,
       headers=st.dictionaries(odd_text, odd_text, max_size=3),
       job_id=st.none() | odd_text, trace=st.none() | odd_text)
def test_enqueue_names_are_stored_identical_or_refused(q, job_type, idem, lock, headers, job_id,
                                                        trace):
    q.redis.flushall()
    try:
        got = q.enqueue(job_type, {"v": 1}, idempotency_key=idem, lock_key=lock, headers=headers,
                        job_id=job_id, trace_id=trace)
    except InvalidJob as exc:
        assert str(exc).strip()
        return
    job = q.get(got)
    assert (job.type, job.idempotency_key, job.lock_key, job.headers) == (
        job_type, idem, lock or "", headers)
    if job_id:
        assert job.id == job_id
    if trace:
        assert job.trace_id == trace


numbers = (st.integers(-3, 5) | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from([0, 0.0, -0.0, 1e-9, 1e300]))


@FUZZ
@given(max_attempts=st.integers(-2, 5), max_deliveries=st.integers(-2, 5),
       timeout_s=st.floats(0.001, 1e6), vt_s=st.floats(0.001, 1e6), delay_s=st.floats(0, 1e6))
def test_enqueue_finite_options_are_stored_or_refused(q, max_attempts, max_deliveries, timeout_s,
                                                      vt_s, delay_s):
    q.redis.flushall()
    try:
        job_id = q.enqueue("t", {}, idempotency_key="k", max_attempts=max_attempts,
                           max_deliveries=max_deliveries, timeout_s=timeout_s,
                           visibility_timeout_s=vt_s, delay_s=delay_s)
    except InvalidJob as exc:
        assert str(exc).strip()
        return
    job = q.get(job_id)
    assert (job.max_attempts, job.max_deliveries) == (max_attempts, max_deliveries)
    assert job.timeout_s == timeout_s


@FUZZ
@given(timeout_s=numbers, vt_s=numbers, delay_s=numbers)
@example(timeout_s=float("nan"), vt_s=1.0, delay_s=0.0)
@example(timeout_s=1.0, vt_s=float("nan"), delay_s=0.0)
@example(timeout_s=1.0, vt_s=1.0, delay_s=float("inf"))
def test_enqueue_nonfinite_options_are_refused_with_invalidjob(q, timeout_s, vt_s, delay_s):
    q.redis.flushall()
    try:
        job_id = q.enqueue("t", {}, idempotency_key="k", timeout_s=timeout_s,
                           visibility_timeout_s=vt_s, delay_s=delay_s)
    except InvalidJob as exc:
        assert str(exc).strip()
        return
    job = q.get(job_id)
    assert math.isfinite(job.timeout_s) and job.timeout_s > 0


def test_enqueue_deeply_nested_payload_is_refused_with_invalidjob(q):
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(InvalidJob):
        q.enqueue("t", deep, idempotency_key="k")


@pytest.mark.parametrize("where", ["idempotency_key", "lock_key", "trace_id"])
def test_enqueue_lone_surrogate_is_refused_with_invalidjob(q, where):
    kwargs = {"idempotency_key": "k", where: "a\ud800b"}
    with pytest.raises(InvalidJob):
        q.enqueue("t", {}, **kwargs)


@pytest.mark.parametrize("kwargs", [
    {"job_type": "t\n"}, {"job_id": "j1\n"},
    {"trace_id": "00-" + "a" * 32 + "-" + "b" * 16 + "-01\n"},
])
def test_a_name_or_traceparent_ending_in_a_newline_is_refused(q, kwargs):
    """The patterns end with \\Z: a regex "$" also matches before a final newline."""
    job_type = kwargs.pop("job_type", "t")
    with pytest.raises(InvalidJob):
        q.enqueue(job_type, {}, idempotency_key="k", **kwargs)


@pytest.mark.parametrize("headers", [{"a": 1}, {"a": object()}, [("a", "b")], {1: "x"}])
def test_enqueue_bad_headers_are_refused_with_invalidjob(q, headers):
    with pytest.raises(InvalidJob):
        q.enqueue("t", {}, idempotency_key="k", headers=headers)


# -- corrupted envelopes in Redis ----------------------------------------------------------------



def _finite_or_not_a_number(text: str) -> bool:
    try:
        return not math.isinf(float(text))
    except ValueError:
        return True


garbage = (st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
           | st.sampled_from(["", "x", "-1", "nan", "9" * 30, "{", "[]", "null",
                              "{\"a\":", "1.5", "0x10", " 7 ", "\x00"])
           ).filter(_finite_or_not_a_number)  # overflowing numbers: their own test below
TEXT_FIELDS = ["payload", "headers", "errors", "result", "timeout_s", "created_at", "visible_at",
               "max_attempts", "max_deliveries", "type", "idem_key", "lock_key", "trace_id",
               "queue"]
# fields the Lua scripts do arithmetic on: garbage there breaks a script half-way (see below)
ARITH_FIELDS = ["attempt", "epoch", "deliveries", "vt_ms"]
MISSING_OK = ["payload", "headers", "errors", "attempt", "timeout_s", "created_at", "visible_at",
              "max_attempts", "max_deliveries", "type", "idem_key", "lock_key", "trace_id",
              "queue", "epoch", "deliveries"]


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(TEXT_FIELDS + ARITH_FIELDS + ["state", "id"]),
                              garbage, max_size=6))
def test_from_fields_never_crashes(fields):
    job = from_fields(fields)
    assert isinstance(job.attempt, int) and isinstance(job.headers, dict)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                max_size=3), max_leaves=8)
blank = st.sampled_from(["", " ", "\n", "\t ", "\ufeff"])


def _refuse_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _finite_float_or_refuse(text):
    value = float(text)
    if math.isinf(value) or math.isnan(value):
        raise ValueError(f"{text} is not a finite number")
    return value


@FUZZ
@example(text="Infinity")
@example(text="[NaN]")
@example(text="1e999")
@given(text=garbage | st.builds(lambda a, v, b: a + json.dumps(v) + b, blank, json_values,
                                blank | st.sampled_from(["x", "1", "]", "}"])))
@example(text=" 7 ")
@example(text="[1] [2]")
@example(text=b'{"a": [1, 2.5]}')  # a client that does not decode replies gives bytes
def test_a_stored_json_field_is_read_as_json_loads_reads_it(text):
    # as strict JSON reads it: NaN, Infinity and numbers overflowing a float are refused (a
    # stored field never holds them; a damaged one holding them is a payload error, not inf)
    try:
        want, error = json.loads(text, parse_constant=_refuse_constant,
                                 parse_float=_finite_float_or_refuse), False
    except ValueError:
        want, error = None, True
    got, problem = _json(text, None)
    assert bool(problem) == (error and text != "")
    if not error:
        assert json.dumps(got) == json.dumps(want)  # (NaN != NaN: compared as text)


@pytest.mark.parametrize("name", ["created_at", "attempt", "vt_ms", "epoch", "deadline"])
@pytest.mark.parametrize("value", ["1e999", "inf", "-Infinity"])
def test_from_fields_survives_overflowing_numbers(name, value):
    assert isinstance(from_fields({name: value}).attempt, int)


def test_empty_stored_payload_is_a_payload_error():
    assert from_fields({"payload": ""}).payload_error


def _corrupt_then_reserve(q: Queue, field_values: dict[str, str], missing: list[str]):
    """Three jobs; the middle one corrupted; reserve all, then settle each one. Every job whose
    hash exists must stay in exactly one place throughout."""
    r = q.redis
    r.flushall()
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}") for i in range(3)])
    bad = q.keys.job(ids[1])
    if field_values:
        r.hset(bad, mapping=field_values)
    if missing:
        r.hdel(bad, *missing)

    def check():
        for job_id in ids:
            if r.exists(q.keys.job(job_id)):
                assert len(q.where(job_id)) == 1, (job_id, q.where(job_id), r.hgetall(
                    q.keys.job(job_id)))

    got = q.reserve("w", count=3)
    check()
    for n, job in enumerate(got):
        try:
            if n % 3 == 0:
                q.ack(job)
            elif n % 3 == 1:
                q.retry(job, delay_ms=0, error="e")
            else:
                q.bury(job, reason="fuzz")
        except LeaseLost:
            pass
        check()
    q.sweep()
    check()


@FUZZ
@given(values=st.dictionaries(st.sampled_from(TEXT_FIELDS), garbage, min_size=1, max_size=4),
       missing=st.lists(st.sampled_from(MISSING_OK), max_size=3, unique=True))
def test_reserve_and_settle_survive_garbage_in_text_fields(q, values, missing):
    missing = [m for m in missing if m not in values]
    _corrupt_then_reserve(q, values, missing)


@pytest.mark.parametrize("field,value", [("epoch", "x"), ("deliveries", "x"), ("attempt", "x"),
                                         ("vt_ms", "1e999"), ("epoch", "1.5")])
def test_reserve_and_settle_survive_garbage_in_counters(q, field, value):
    _corrupt_then_reserve(q, {field: value}, [])


def test_reserve_survives_missing_vt_ms(q):
    _corrupt_then_reserve(q, {}, ["vt_ms"])


# -- the worker buries corrupted jobs and goes on --------------------------------------------------

def _worker_process():
    try:
        from antre_worker.runner import WorkerProcess
    except ImportError:  # worker/ not there yet
        pytest.skip("worker/antre_worker/runner.py is not available")
    return WorkerProcess


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(corruptions=st.lists(st.tuples(st.sampled_from(["payload", "headers", "errors", "type",
                                                       "timeout_s", "created_at", "trace_id"]),
                                      garbage), min_size=1, max_size=4))
@example(corruptions=[("payload", "{")])
@example(corruptions=[("type", "no_such_type")])
def test_worker_buries_corrupted_jobs_and_keeps_processing(redis_url, corruptions):
    WorkerProcess = _worker_process()
    from antre import Antre

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushall()
    app = Antre(redis_url=redis_url)
    seen: list[int] = []

    @app.handler("t", timeout_s=5, visibility_timeout_s=5)
    def handle(ctx, payload):
        seen.append(payload["i"] if isinstance(payload, dict) else None)

    q = app.queue()
    first = q.enqueue_many([JobSpec("t", {"i": i}, f"good{i}") for i in range(3)])
    bad = q.enqueue_many([JobSpec("t", {"i": 100 + i}, f"bad{i}") for i in range(len(corruptions))])
    last = q.enqueue_many([JobSpec("t", {"i": 10 + i}, f"late{i}") for i in range(3)])
    for job_id, (name, value) in zip(bad, corruptions):
        client.hset(q.keys.job(job_id), name, value)

    counts = WorkerProcess(app, queues=[q.name], threads=1, heartbeat_s=0.2,
                           stop_grace_s=5).run_burst()
    try:
        for job_id in first + last:
            assert q.where(job_id) == ["done"], (job_id, q.get(job_id), counts)
        for job_id in bad:
            job = q.get(job_id)
            place = q.where(job_id)
            assert place in (["done"], ["dead"]), (job_id, place, job)
            if place == ["dead"]:
                assert job.reason.strip(), job
            if job.payload_error or not job.type or job.type != "t":
                assert place == ["dead"], (job_id, job)
    finally:
        client.close()


row_values = st.none() | odd_text | st.sampled_from(
    ["", "0", "7", "-3", "1.5", "1e3", "nan", "inf", "{}", "[]", '{"a":1}', "ready", "30.0"])


@given(row=st.lists(row_values, min_size=len(RESERVE_FIELDS), max_size=len(RESERVE_FIELDS)))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_from_row_reads_a_reserved_row_as_from_fields_reads_the_hash(row):
    """``from_row`` decodes by position; it must make of any row what ``from_fields`` makes of
    the same values as a hash (missing = None), garbage included."""
    as_hash = {n: v for n, v in zip(RESERVE_FIELDS, row) if v is not None}
    assert _same(from_row(row), from_fields(as_hash))


def _same(a, b) -> bool:
    # NaN-free comparison of every field (a payload may hold NaN: compare its JSON text)
    return json.dumps(vars(a), sort_keys=True, default=str) == json.dumps(
        vars(b), sort_keys=True, default=str)
