"""The payload's stored text: ``encode_payload`` takes orjson's text only where it is provably
the stdlib encoder's, so every payload is stored (or refused, with the same message) exactly as
the stdlib encoder alone did it. ``_stdlib`` below is that encoder's path
(``envelope._encode_payload_stdlib``, what ``encode_payload`` falls back to).

Also the rule of ``enqueue_many`` that goes with it: every spec is validated (its payload
encoded) before anything is sent, though the rest of the encoding is done chunk by chunk."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from antre import InvalidJob
from antre.engine.envelope import (DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH, NEW_FIELDS,
                            _encode_payload_json, _encode_payload_stdlib, _orjson_payload,
                            encode_new, encode_payload, pack_new)
from antre.engine.queue import JobSpec, Queue

FUZZ = settings(max_examples=600, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


# what encode_payload made before orjson, and makes of any payload orjson's text is not
# provably right for: the stdlib encoder, with its refusals
_stdlib = _encode_payload_stdlib


def _outcome(encode: Any, payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> tuple:
    try:
        text = encode(payload, max_bytes)
    except InvalidJob as exc:
        return ("refused", str(exc))
    assert type(text) is str
    return ("stored", text)


def _same(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
    assert _outcome(encode_payload, payload, max_bytes) == _outcome(_stdlib, payload, max_bytes)


class Colour(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 3


class Level(str, enum.Enum):
    HIGH = "high"


class LooseEnum(enum.Enum):  # an enum that says it equals its value
    A = "a"

    def __eq__(self, other: object) -> bool:
        return other == self.value or other is self

    __hash__ = enum.Enum.__hash__


class Angry:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")


@dataclasses.dataclass
class Point:
    x: int


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _cycle() -> Any:
    a: list = []
    a.append(a)
    return a


EDGES = [
    {"i": 1}, {}, [], None, True, False, 0, -1, "", "plain", {"b": 1, "a": [1, 2, {"z": None}]},
    # floats: the exponent forms differ between the encoders; non-finite numbers are refused
    1.0, -0.0, 0.1, 1e16, 1e15, 1e-5, 1e-4, 123456789.123456789, 1.5e300, 5e-324, 2.0 ** 70,
    {"f": 12.5}, [1, 2.0], float("nan"), float("inf"), {"x": -math.inf}, [float("nan")],
    # ints: orjson stops at 64 bits, the stdlib does not
    2 ** 63 - 1, -(2 ** 63), 2 ** 63, 2 ** 64 - 1, 2 ** 64, -(2 ** 63) - 1, 10 ** 40,
    {"n": 2 ** 64}, [-(2 ** 64)],
    # text: non-ASCII, escapes, DEL, control characters, lone surrogates, quotes, backslashes
    "é", "🦊", {"é": 1}, {"k": "\u2028"}, "\x7f", {"\x7f": 1}, "\x00\x01\x1f", "a\"b\\c",
    "\ud800", {"k": "a\ud800"}, "/</script>", "\\u00e9", '"1.5"', "1e5", {"v": "3e8f", "n": 1},
    {"s": "1.5", "t": "x\\"}, {"s": "a\\\"1.5", "n": 2}, {"ip": "10.0.0.1", "ok": True},
    # keys: the stdlib writes int, float, bool and None keys as strings; orjson refuses them
    {1: "a"}, {1.5: "a"}, {True: 1}, {None: 1}, {"a": 1, 2: 3}, {(1, 2): 3},
    # containers and types orjson writes natively that the stdlib refuses, or writes otherwise
    (1, 2), {"t": (1, [2])}, OrderedDict([("b", 1), ("a", 2)]), Colour.RED, [Colour.RED],
    Size.BIG, Level.HIGH, {"l": Level.HIGH}, uuid.UUID(int=1), datetime.date(2020, 1, 1),
    datetime.datetime(2020, 1, 1, 1, 2, 3), Point(1), decimal.Decimal("1.5"), {1, 2},
    frozenset(), b"bytes", bytearray(b"x"), object(), LooseEnum.A, [Angry()], {"a": Angry()},
    # nesting at and past the limit, and a list holding itself
    _nested(MAX_PAYLOAD_DEPTH - 1), _nested(MAX_PAYLOAD_DEPTH), _nested(MAX_PAYLOAD_DEPTH + 1),
    _nested(300), _cycle(), {"a": [[[[[[{"b": [[]]}]]]]]]},
    # sizes around the limit (and many brackets that are not nesting)
    "x" * (DEFAULT_MAX_PAYLOAD_BYTES - 2), "x" * (DEFAULT_MAX_PAYLOAD_BYTES - 1),
    [[]] * 200, [{}] * 1000, {"a": "[" * 500},
]


@pytest.mark.parametrize("payload", EDGES, ids=lambda p: repr(p)[:40])
def test_payload_text_and_refusals_are_the_stdlib_encoders(payload):
    if isinstance(payload, LooseEnum):
        # the one known gap: an enum whose __eq__ says it equals its value reads back equal
        assert encode_payload(payload) == '"a"'
        with pytest.raises(InvalidJob):
            _stdlib(payload)
        return
    _same(payload)


@pytest.mark.parametrize("size", range(28, 36))
def test_payload_size_limit_is_exact_on_both_paths(size):
    for payload in ("x" * (size - 2), {"a": "x" * (size - 8)}, {"f": 1.5, "a": "x" * (size - 17)}):
        _same(payload, 30)


def test_plain_payloads_take_orjson_and_floats_do_not():
    assert _orjson_payload({"i": 1}) == b'{"i":1}'
    assert _orjson_payload({"b": [1, "x"], "a": None}) == b'{"a":null,"b":[1,"x"]}'
    assert _orjson_payload({"ref": "3e8f", "v": "1.5"}) is not None  # float-like strings
    for payload in ({"f": 1.5}, {"k": "é"}, {1: 2}, float("nan"), {"s": "a\\", "v": 1e5},
                    (1, 2), Colour.RED, _nested(MAX_PAYLOAD_DEPTH + 1), _cycle()):
        assert not _orjson_payload(payload)
    assert _orjson_payload({"f": 1.5}) == b""  # written, shallow: no _too_deep to run
    assert _orjson_payload(_nested(MAX_PAYLOAD_DEPTH + 1)) is None


text = st.text(max_size=12) | st.sampled_from(
    ["", "é", "🦊", "\x7f", "\x00", "\\", '"', "1.5", "1e5", "3e8f", "\ud800", "a\\\"1.5"])
scalars = (st.none() | st.booleans() | st.integers() | st.integers(-2 ** 66, 2 ** 66)
           | st.floats(allow_nan=True, allow_infinity=True) | text)
payloads = st.recursive(
    scalars,
    lambda children: (st.lists(children, max_size=5) | st.tuples(children, children)
                      | st.dictionaries(text, children, max_size=5)
                      | st.dictionaries(st.integers() | st.booleans() | st.none() | st.floats(
                          allow_nan=False), children, max_size=2)),
    max_leaves=30)


@FUZZ
@given(payload=payloads)
@example(payload={"a": 1e16})
@example(payload={"a": [1, "x\\", 1.0]})
def test_fuzzed_payload_text_is_the_stdlib_encoders(payload):
    _same(payload)
    _same(payload, 64)


@FUZZ
@given(payload=payloads)
def test_fuzzed_payload_text_reads_back_as_the_stdlib_would(payload):
    try:
        stored = encode_payload(payload)
    except InvalidJob:
        return
    assert json.loads(stored) == json.loads(_encode_payload_json(payload))


# -- enqueue_many: validation first, encoding chunk by chunk ------------------------------------

def test_enqueue_many_stores_nothing_when_a_late_spec_is_bad(r):
    q = Queue(r, "many")
    q.enqueue("t", {}, idempotency_key="warm")
    before = r.dbsize()
    for bad in ({"x": float("nan")}, _nested(MAX_PAYLOAD_DEPTH + 1), {"d": object()}):
        specs = [JobSpec("t", {"i": i}, f"k{i}") for i in range(1000)]
        specs[990] = JobSpec("t", bad, "bad")
        with pytest.raises(InvalidJob, match="payload"):
            q.enqueue_many(specs, chunk=100)
        assert r.dbsize() == before and r.llen(q.keys.ready) == 1
    specs = [JobSpec("t", {"i": i}, f"k{i}") for i in range(300)] + [JobSpec("t\n", {}, "x")]
    with pytest.raises(InvalidJob, match="bad job type"):
        q.enqueue_many(specs, chunk=100)
    assert r.dbsize() == before


def test_enqueue_many_stores_what_encode_new_makes(r):
    """A chunk of jobs in one argument of enqueue.lua (``pack_chunk``: enqueue_many, store)
    stores the hashes that one argument per job (``pack_new``: a single enqueue's) stores."""
    now = 1_700_000_000_000
    q = Queue(r, "many", clock=lambda: now)
    specs = [JobSpec("t", {"i": i, "f": i / 3, "s": "é"}, f"k{i}", delay_s=i % 3,
                     headers={"h": str(i)} if i % 2 else {}, timeout_s=i + 1,
                     unique=i % 4 == 0) for i in range(25)]
    ids = q.enqueue_many(specs, chunk=4)
    assert len(set(ids)) == 25
    fields = [r.hgetall(q.keys.job_prefix + job_id) for job_id in ids]
    r.flushdb()
    for spec, job_id, got in zip(specs, ids, fields):
        # (a job whose id enqueue made has no trace stored, or '' on the named path: its
        # trace is made from the id, envelope.job_traceparent; the slot is given as stored)
        trace, at = got.get("trace_id", ""), NEW_FIELDS.index("trace_id")
        spec.job_id, spec.trace_id = job_id, trace or None
        names, values = q.encode(spec, now)
        single = encode_new(spec, q.name, now)
        values[at] = single[at] = trace
        assert values[:len(NEW_FIELDS)] == single
        expected = dict(zip(names, values))
        if "trace_id" not in got:
            del expected["trace_id"]
        defaulted = {"lock_key": "", "headers": "{}", "timeout_s": "30.0", "vt_ms": "30000",
                     "max_deliveries": "10"}
        if names == NEW_FIELDS:  # (the standard path never stores the queue's name or the id)
            del expected["queue"], expected["id"]
            assert "queue" not in got and "id" not in got
        if names == NEW_FIELDS and all(expected[k] == v for k, v in defaulted.items()):
            # (the standard path stores none of these when all are empty / JobSpec's)
            for k in defaulted:
                del expected[k]
                assert k not in got
        assert {k: got[k] for k in expected} == expected
        reply = q.scripts.enqueue(keys=q._enqueue_keys, args=[
            q.keys.job_prefix, now, "" if names == NEW_FIELDS else json.dumps(names),
            pack_new(values)])
        assert reply == [1]
        assert r.hgetall(q.keys.job_prefix + job_id) == got


# -- check_spec's one-test path for the common spec ---------------------------------------------

numbers = (st.integers(-5, 20_000) | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from([True, False, None, "1", 0.0005, 0.001, 366 * 86_400, 366 * 86_400 + 1]))


@FUZZ
@given(queue=st.sampled_from(["jobs", "bad queue", "", "q" * 101]),
       job_type=st.sampled_from(["t", "t\n", "", None, "x" * 101]),
       idem=st.sampled_from(["k", "", "é", "x" * 500, "x" * 501, 5, "a\ud800"]),
       lock=st.sampled_from([None, "", "l", "{l}"]),
       headers=st.sampled_from([{}, {"a": "b"}, [], None, {"a": 1}]),
       trace=st.sampled_from([None, "", "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "x"]),
       job_id=st.sampled_from([None, "", "mine", "bad id"]),
       unique=st.sampled_from([False, True, 0, None]),
       max_attempts=numbers, max_deliveries=numbers, timeout=numbers, visibility=numbers,
       delay=numbers)
def test_check_spec_is_the_same_with_and_without_its_one_test_path(
        monkeypatch, queue, job_type, idem, lock, headers, trace, job_id, unique, max_attempts,
        max_deliveries, timeout, visibility, delay):
    from antre.engine import envelope
    spec = JobSpec(job_type, {}, idem, lock_key=lock, headers=headers, trace_id=trace,
                   job_id=job_id, unique=unique, max_attempts=max_attempts,
                   max_deliveries=max_deliveries, timeout_s=timeout,
                   visibility_timeout_s=visibility, delay_s=delay)

    def outcome() -> str:
        try:
            envelope.check_spec(spec, queue)
        except Exception as exc:  # (a job type of None raises TypeError on both paths)
            return f"{type(exc).__name__}: {exc}"
        return "ok"

    envelope._known_name("jobs"), envelope._known_name("t")  # as after a first use
    fast = outcome()
    with monkeypatch.context() as m:
        m.setattr(envelope, "_plain_spec", lambda spec, queue: False)
        assert outcome() == fast
