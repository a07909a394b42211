"""The job envelope and its codec, both ways, with its validation. Pure: no I/O.

- producing: a ``JobSpec`` (what a producer asks for) is validated and encoded by
  ``encode_new`` into the values of a new job hash, in ``NEW_FIELDS`` order; ``pack_new``
  turns them into the one argument per job that ``enqueue.lua`` reads;
- consuming: ``from_fields`` decodes a job hash (or ``from_row`` a reserved job's
  ``RESERVE_FIELDS``) into a ``Job``, never raising on bad content.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import orjson

import antre.settings as settings
from antre.errors import InvalidJob
from antre.engine.keys import valid_job_id, valid_name
from antre.engine.progress import Progress, decode as decode_progress
from antre.engine import states

DEFAULT_MAX_PAYLOAD_BYTES = settings.MAX_PAYLOAD_BYTES.default
MAX_SECONDS = 366 * 86_400  # the longest delay or timeout a job may carry
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z")

# waiting: behind the head of its lock_key in its queue, made ready when its turn comes;
# held: a job of a flow whose parents have not all settled, placed when they have
STATES = states.JOB_STATES
# where a cancelled job goes (a job's cancel, a flow's cancel): the DLQ with the reason, or gone
CANCEL_TO = ("dlq", "discard")


def new_job_id() -> str:
    """128 random bits as hex (a version-less UUID; cheaper than ``uuid.uuid4``)."""
    return os.urandom(16).hex()


def new_traceparent() -> str:
    """A W3C traceparent for a job enqueued outside any trace."""
    raw = os.urandom(24).hex()
    return f"00-{raw[:32]}-{raw[32:]}-01"


_HEX_ID = re.compile(r"[0-9a-f]{32}")


def job_traceparent(job_id: str) -> str:
    """The W3C traceparent of a job whose id was made at enqueue and that came with no trace
    of its own: made from the id's 128 random bits (trace id: the 32 hex digits, parent id:
    the last 16 of them), so it is not stored (one field less per job). '' for an
    id that is not such a one (a job with the caller's id stores a trace made for it)."""
    if _HEX_ID.match(job_id) is None:
        return ""
    return f"00-{job_id[:32]}-{job_id[16:32]}-01"


MAX_PAYLOAD_DEPTH = 100


def _too_deep(payload: Any, limit: int = MAX_PAYLOAD_DEPTH) -> bool:
    """Nesting deeper than ``limit``, found level by level without recursion (json.dumps would
    hit the interpreter's recursion limit, and a RecursionError there can leave CPython 3.11
    unsteady). A container that holds itself counts as too deep."""
    level = [payload] if isinstance(payload, _CONTAINERS) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        children: list[Any] = []
        for obj in level:
            children.extend(obj.values() if isinstance(obj, dict) else obj)
        level = [child for child in children if isinstance(child, _CONTAINERS)]
        depth += 1
    return False


_CONTAINERS = (dict, list, tuple)
# built once: json.dumps with keyword arguments builds a new encoder on every call (~5 µs)
_encode_payload_json = json.JSONEncoder(separators=(",", ":"), sort_keys=True,
                                        allow_nan=False).encode
_encode_compact_json = json.JSONEncoder(separators=(",", ":")).encode


# orjson writes the very text of the stdlib encoder above for most payloads, 5-10x faster, but
# not for all: floats ("1e16" for "1e+16"; NaN and infinities as null), non-ASCII text (UTF-8
# for \u escapes), DEL (raw for \u007f), ints past 64 bits and non-str keys (refused),
# enums and UUIDs (written, where the stdlib refuses them). Its text is used only when none of
# that can be in it (``_orjson_payload``); any other payload goes the stdlib's way, so the
# stored text, and each refusal with its message, stay what the stdlib makes of them.
_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS
                   | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS)
_orjson_dumps, _orjson_loads = orjson.dumps, orjson.loads
# orjson's text through this table: digits as '0', '.' and 'E' as 'e' (every float orjson
# writes then shows '0e'; so may a string), DEL and non-ASCII bytes as DEL (the stdlib escapes
# those)
_MARKS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x65 if b in (0x2E, 0x45) else 0x7F if b >= 0x7F
               else b for b in range(256))


def _orjson_payload(payload: Any) -> bytes | None:
    """orjson's text of ``payload`` when it is provably the stdlib encoder's (the same bytes);
    else b"" when orjson wrote it no deeper than ``MAX_PAYLOAD_DEPTH`` (so ``_too_deep`` need
    not look), or None. Checks: orjson wrote it (it refuses big ints, non-str keys,
    subclasses, dates, dataclasses and cycles); at most ``MAX_PAYLOAD_DEPTH`` brackets, so no
    deeper nesting; pure ASCII without DEL (the stdlib escapes the rest) and no float (no
    digit followed by '.', 'e' or 'E' outside strings; with such a string, a text with a
    backslash is not looked into); and the text reads back equal to the payload (a NaN or an
    infinity written as null, an enum or a UUID written as its value, a tuple as a list do
    not). About 1 µs for a small payload, against ~2.5 µs for ``_too_deep`` and the stdlib
    encoder."""
    try:
        out = _orjson_dumps(payload, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is one
        return None
    # nesting deeper than MAX_PAYLOAD_DEPTH takes more brackets, and twice as many bytes
    if len(out) > 2 * MAX_PAYLOAD_DEPTH and out.count(b"[") + out.count(b"{") > MAX_PAYLOAD_DEPTH:
        return None
    marks = out.translate(_MARKS)
    if b"\x7f" in marks:
        return b""
    if b"0e" in marks and (b"\\" in out or b"0e" in b"".join(marks.split(b'"')[::2])):
        return b""  # a float, or one in the strings (outside them: even pieces, no escapes)
    try:
        if _orjson_loads(out) == payload:
            return out
    except Exception:  # an odd __eq__: the stdlib decides
        pass
    return b""


def encode_payload(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    out = _orjson_payload(payload)
    if out:
        _check_size(len(out), max_bytes)
        return out.decode("ascii")
    return _encode_payload_stdlib(payload, max_bytes, check_depth=out is None)


def _encode_payload_stdlib(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                           check_depth: bool = True) -> str:
    """``encode_payload`` by the stdlib encoder, with its refusals: every payload orjson's
    text is not provably right for. ``check_depth`` False: orjson found it no deeper than
    ``MAX_PAYLOAD_DEPTH`` already."""
    if check_depth and _too_deep(payload):
        raise InvalidJob(f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels; flatten it")
    try:
        text = _encode_payload_json(payload)
    except RecursionError:
        raise InvalidJob("payload is nested too deeply to store; flatten it") from None
    except (TypeError, ValueError) as exc:
        raise InvalidJob(
            f"payload is not JSON-serialisable ({exc}); pass dicts, lists, strings, numbers, "
            "booleans and None, and convert dates, decimals and objects first"
        ) from None
    _check_size(len(text) if text.isascii() else len(text.encode()), max_bytes)
    if "\\ud" in text:  # (the stdlib writes every surrogate as an escape, lower case)
        _check_surrogates(text)
    return text


def _check_surrogates(text: str) -> None:
    """Refuse a payload holding a lone surrogate (a str that is not text: no UTF-8 encoding,
    so no fingerprint and no database can take it). ``text`` is its stored JSON, whose
    escapes ``\\udxxx`` may also be proper pairs (non-BMP characters) or literal text."""
    level: list[Any] = [[json.loads(text)]]
    while level:  # no recursion: at most MAX_PAYLOAD_DEPTH levels
        children: list[Any] = []
        for obj in level:
            items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
            for item in items:
                if isinstance(item, str):
                    if not item.isascii():
                        _utf8("a string of the payload", item)
                elif isinstance(item, (dict, list)):
                    children.append(item)
        level = children


def _check_size(size: int, max_bytes: int) -> None:
    """Refuse a payload of ``size`` bytes (its encoded text) over ``max_bytes``."""
    if size > max_bytes:
        raise InvalidJob(
            f"payload is {size} bytes, over the limit of {max_bytes} bytes; store large data "
            "elsewhere and enqueue a reference, or raise ANTRE_MAX_PAYLOAD_BYTES"
        )


@dataclass
class Job:
    """One job as stored in Redis. Times are epoch milliseconds."""

    id: str
    type: str
    queue: str
    idempotency_key: str
    payload: Any
    attempt: int = 0
    max_attempts: int = 5
    visible_at: int = 0
    created_at: int = 0
    trace_id: str = ""
    lock_key: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    visibility_timeout_ms: int = 30_000
    epoch: int = 0
    deliveries: int = 0
    max_deliveries: int = 10
    state: str = states.READY
    deadline: int = 0
    reserved_at: int = 0
    worker_id: str = ""
    last_error: str = ""
    error_kind: str = ""
    traceback: str = ""
    first_failed_at: int = 0
    last_failed_at: int = 0
    reason: str = ""
    finished_at: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None
    checkpoint: Any = None
    replayed_at: int = 0  # when an operator last replayed it from the dead-letter queue
    payload_error: str = ""  # set when the stored payload could not be decoded
    snoozes: int = 0  # times held back without spending an attempt (lock busy, flow, ...)
    cancel: str = ""  # an operator's cancel request (JSON), set while it is pending
    group: str = ""  # its fair-share group (stored as 'fgroup', not read at reserve)
    waits_on: str = ""  # while waiting: 'lock' (behind its key's head), 'group' (a slot) or
    # 'limit' (a slot of its type's or downstream's concurrency limit: ``gate``)
    gate: str = ""  # the limit it waits for ('type:<t>' or 'ds:<name>'), waiting or scheduled
    group_rate: str = ""  # its group's rate as given ('10/s'; stored as 'grate' '10/1000')
    rate_due: int = 0  # the start its group's rate gave it, when later than it was due (ms)
    progress: Progress | None = None  # its handler's last ctx.progress
    flow: str = ""  # the id of the flow it belongs to, '' for none
    flow_inputs: int = 0  # how many parents in its flow give it their results ('fin')

    # True on a job reserve read as plain (PLAIN_FIELDS and its state, nothing else: from_row
    # sets it; not a field of the record): its ack skips the lookups of the optional fields
    # such a job cannot have (ack_many.lua). A copy (dataclasses.replace) is acked the full way.
    _plain = False

    @property
    def waits_for_rate(self) -> bool:
        """Scheduled only because its group's rate gives it a later start."""
        return (self.state == states.SCHEDULED and self.rate_due > 0
                and self.rate_due == self.visible_at)

    @property
    def lease(self) -> tuple[str, int]:
        return (self.id, self.epoch)


def _int(fields: Mapping[str, str], name: str, default: int = 0) -> int:
    return _num(fields.get(name), default)


def _num(raw: str | None, default: int = 0) -> int:
    if not raw:
        return default
    try:
        return int(raw)  # what the scripts write: digits (the float parse below is slower)
    except ValueError:
        pass
    try:
        return int(float(raw))
    except (ValueError, OverflowError):  # garbage, NaN, infinities
        return default


def _no_constant(name: str) -> Any:
    """NaN and the infinities are not JSON: no store (PostgreSQL, the fingerprint) keeps them,
    so a stored payload holding one is refused when read, not run and then never stored."""
    raise ValueError(f"{name} is not valid JSON (only finite numbers are)")


def _finite_float(text: str) -> float:
    """A JSON number as a float, refused when it overflows to an infinity (``1e999``), which
    no store keeps either (see ``_no_constant``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a float (only finite numbers are stored)")
    return value


_decoder = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
# the stdlib decoder's own C scanner: what json.loads runs, without its wrappers, for text
# that is one JSON value with nothing around it (anything else: the decoder's decode decides)
_scan_json: Callable[[str, int], tuple[Any, int]] = (
    _decoder.scan_once)  # type: ignore[attr-defined]


def _json(text: str | None, default: Any) -> tuple[Any, str]:
    if text is None or text == "":
        return default, ""
    if text == "{}":
        return {}, ""  # most headers and many payloads: a fresh dict, without the parser
    try:
        value, end = _scan_json(text, 0)
        if end == len(text):
            return value, ""
    except (StopIteration, ValueError, TypeError, RecursionError):  # (TypeError: bytes)
        pass
    try:
        return _decoder.decode(text), ""
    except ValueError as exc:
        return default, f"cannot decode JSON: {exc}"
    except RecursionError:
        return default, f"cannot decode JSON: nested deeper than this process can read " \
                        f"(stored payloads are at most {MAX_PAYLOAD_DEPTH} levels deep)"
    except TypeError:  # bytes, from a client that does not decode
        raw: Any = text
        return _json(bytes(raw).decode("utf-8", "replace"), default)


def _last_traceback(errors: Any, fields: Mapping[str, str]) -> str:
    """The latest failure's traceback: its entry's in ``errors`` (append_error in _base.lua
    keeps no second copy; an older record without entries has its field)."""
    if isinstance(errors, list) and errors and isinstance(errors[-1], dict):
        tb = errors[-1].get("traceback")
        return tb if isinstance(tb, str) else ""
    return fields.get("traceback", "")


def _stored_payload(raw: str | None) -> tuple[Any, str]:
    """A job hash's payload decoded, and '' or what is wrong with it (the worker buries the
    job with that reason)."""
    if not raw:
        return None, "the stored payload is missing or empty"
    return _json(raw, None)


def decode_stored(text: str) -> tuple[Any, str]:
    """A payload's stored JSON text decoded, and '' or what is wrong with it."""
    return _stored_payload(text)


def from_fields(fields: Mapping[str, str], queue: str = "", job_id: str = "") -> Job:
    """Decode a job hash. Never raises on bad content: a payload that cannot be decoded is
    reported in ``payload_error`` so the worker can bury the job with that reason. ``queue``,
    ``job_id``: the queue whose key holds the hash and the id it is stored under, for a job
    whose hash does not name them (the standard enqueue stores neither 'queue' nor 'id': the
    key says both)."""
    job_id = fields.get("id") or job_id
    payload, payload_error = _stored_payload(fields.get("payload"))
    headers, _ = _json(fields.get("headers"), {})
    errors, _ = _json(fields.get("errors"), [])
    result, _ = _json(fields.get("result"), None)
    checkpoint, _ = _json(fields.get("checkpoint"), None)
    try:
        timeout_s = float(fields.get("timeout_s") or 30.0)
    except ValueError:
        timeout_s = 30.0
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        timeout_s = 30.0
    return Job(
        id=job_id,
        type=fields.get("type", ""),
        queue=fields.get("queue") or queue,
        idempotency_key=fields.get("idem_key", ""),
        payload=payload,
        attempt=_int(fields, "attempt"),
        max_attempts=_int(fields, "max_attempts", 5),
        visible_at=_int(fields, "visible_at") or _int(fields, "created_at"),
        created_at=_int(fields, "created_at"),
        trace_id=fields.get("trace_id") or job_traceparent(job_id),
        lock_key=fields.get("lock_key", ""),
        headers=headers if isinstance(headers, dict) else {},
        timeout_s=timeout_s,
        visibility_timeout_ms=_int(fields, "vt_ms", 30_000),
        epoch=_int(fields, "epoch"),
        deliveries=_int(fields, "deliveries"),
        max_deliveries=_int(fields, "max_deliveries", 10),
        state=fields.get("state", states.READY),
        deadline=_int(fields, "deadline"),
        reserved_at=_int(fields, "reserved_at"),
        worker_id=fields.get("worker_id", ""),
        last_error=fields.get("last_error", ""),
        error_kind=fields.get("error_kind", ""),
        traceback=_last_traceback(errors, fields),
        first_failed_at=_int(fields, "first_failed_at"),
        last_failed_at=_int(fields, "last_failed_at"),
        reason=fields.get("reason", ""),
        finished_at=_int(fields, "finished_at"),
        errors=errors if isinstance(errors, list) else [],
        result=result,
        checkpoint=checkpoint,
        replayed_at=_int(fields, "replayed_at"),
        payload_error=payload_error,
        snoozes=_int(fields, "snoozes"),
        cancel=fields.get("cancel", ""),
        group=fields.get("fgroup", ""),
        waits_on=fields.get("waits_on", ""),
        gate=fields.get("gate", ""),
        group_rate=format_rate(fields.get("grate", "")) if fields.get("grate") else "",
        rate_due=_int(fields, "rate_due"),
        progress=decode_progress(fields.get("progress")),
        flow=fields.get("flow", ""),
        flow_inputs=_int(fields, "fin"),
    )


def _utf8(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(f"{name} is not valid text (it contains a lone surrogate); "
                         "pass a proper str") from None


def check_headers(headers: Any) -> None:
    if type(headers) is dict and not headers:
        return  # no headers: the common case
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidJob("headers must be a dict of str to str, e.g. {'tenant': 'acme'}")
    for k, v in headers.items():
        _utf8("a header", k + v)


_KNOWN_NAMES: set[str] = set()  # queue names and job types already found valid (a few)


def _known_name(name: Any) -> bool:
    """``valid_name`` of a queue name or job type, remembered: a producer uses a few of them
    over and over (the set is emptied past 4,096 names)."""
    if type(name) is str and name in _KNOWN_NAMES:
        return True
    if not valid_name(name):
        return False
    if len(_KNOWN_NAMES) >= 4096:
        _KNOWN_NAMES.clear()
    _KNOWN_NAMES.add(name)
    return True


def check_names(queue: str, job_type: str, idempotency_key: str, lock_key: str | None) -> None:
    if not _known_name(queue):
        raise InvalidJob(f"bad queue name {queue!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    if not _known_name(job_type):
        raise InvalidJob(f"bad job type {job_type!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    if not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > 500:
        raise InvalidJob(
            "idempotency_key must name the business operation (1-500 characters), "
            "e.g. 'email:welcome:42'; it must not be the job id"
        )
    if lock_key is not None and (not isinstance(lock_key, str) or not lock_key
                                 or len(lock_key) > 200 or "{" in lock_key or "}" in lock_key):
        raise InvalidJob(f"bad lock_key {lock_key!r}: a string of 1-200 characters, no braces")
    if "\x00" in idempotency_key or (lock_key and "\x00" in lock_key):
        raise InvalidJob("idempotency_key and lock_key must not contain NUL characters ('\\x00'), "
                         "which PostgreSQL cannot store; pass printable text")
    if not idempotency_key.isascii():  # ASCII is valid UTF-8: the common case costs one test
        _utf8("idempotency_key", idempotency_key)
    if lock_key:
        _utf8("lock_key", lock_key)


# -- producing: a new job -------------------------------------------------------------------

@dataclass
class JobSpec:
    """One job to enqueue (see ``Queue.enqueue`` for the meaning of each field)."""

    job_type: str
    payload: Any
    idempotency_key: str
    lock_key: str | None = None
    delay_s: float = 0.0
    max_attempts: int = 5
    timeout_s: float = 30.0
    visibility_timeout_s: float = 30.0
    max_deliveries: int = 10
    headers: dict[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    job_id: str | None = None
    unique: bool = False  # while a job holds this idempotency key, enqueue returns its id
    unique_for_s: float = 0.0  # unique: after it completes, refuse the key this long
    group: str | None = None  # fair shares: a tenant, a customer, ...
    group_concurrency: int | None = None  # the group's slots (ready or running at once)
    group_rate: str | None = None  # at most this many of the group's starts: '10/s', '600/m'


# the fields of a new job hash; enqueue.lua reads id, type, visible_at by position: first
# A new job's counters (attempt, epoch, deliveries) are not among them: each starts at 0, and
# every reader of a job hash reads a missing counter as 0 (``_int``, ``num_of`` / ``num_field``
# in the scripts; the scripts that move one write it). Three fields fewer make storing a new
# job ~11% cheaper for Redis (bench/experiments/enqueue.md).
NEW_FIELDS = ("id", "type", "visible_at", "queue", "idem_key", "payload", "max_attempts",
              "created_at", "trace_id", "lock_key", "headers", "timeout_s", "vt_ms",
              "max_deliveries")


def check_spec(spec: JobSpec, queue: str) -> None:
    """Raise ``InvalidJob`` (saying what to pass instead) unless ``spec`` can be stored."""
    if _plain_spec(spec, queue):
        return
    check_names(queue, spec.job_type, spec.idempotency_key, spec.lock_key)
    check_headers(spec.headers)
    if spec.trace_id is not None and not TRACEPARENT.match(str(spec.trace_id)):
        raise InvalidJob(f"trace_id {spec.trace_id!r} is not a W3C traceparent "
                         "(00-<32 hex>-<16 hex>-<2 hex>)")
    _check_count("max_attempts", spec.max_attempts)
    _check_count("max_deliveries", spec.max_deliveries)
    _check_seconds("timeout_s", spec.timeout_s, 0.001)
    _check_seconds("visibility_timeout_s", spec.visibility_timeout_s, 0.001)
    _check_seconds("delay_s", spec.delay_s, 0)
    if spec.unique is not False:  # unique jobs: the common case costs one test
        _check_unique(spec)
    if (spec.group is not None or spec.group_concurrency is not None
            or spec.group_rate is not None):
        check_group(spec.group, spec.group_concurrency, spec.group_rate)
    if spec.job_id and not valid_job_id(spec.job_id):  # '' or None: a new id is made
        raise InvalidJob(f"bad job id {spec.job_id!r}: use 1-100 of A-Z a-z 0-9 _ . : - "
                         "(a partition's suffix ~<n> may follow)")


def _plain_spec(spec: JobSpec, queue: str) -> bool:
    """The common spec, found valid in one test: names already known valid, an ASCII
    idempotency key, no lock key, headers, trace id, job id or uniqueness, counts and seconds
    in range (``int`` or ``float``: a NaN fails the range test). Anything else: False, and
    ``check_spec`` runs every check in its order (so the same one raises)."""
    idem, max_attempts = spec.idempotency_key, spec.max_attempts
    max_deliveries = spec.max_deliveries
    timeout, visibility, delay = spec.timeout_s, spec.visibility_timeout_s, spec.delay_s
    return (type(queue) is str and queue in _KNOWN_NAMES
            and type(spec.job_type) is str and spec.job_type in _KNOWN_NAMES
            and type(idem) is str and 0 < len(idem) <= 500 and idem.isascii()
            and "\x00" not in idem
            and spec.lock_key is None and type(spec.headers) is dict and not spec.headers
            and spec.trace_id is None and spec.unique is False and not spec.job_id
            and spec.group is None and spec.group_concurrency is None
            and spec.group_rate is None
            and type(max_attempts) is int and 1 <= max_attempts <= 10_000
            and type(max_deliveries) is int and 1 <= max_deliveries <= 10_000
            and (type(timeout) is float or type(timeout) is int)
            and 0.001 <= timeout <= MAX_SECONDS
            and (type(visibility) is float or type(visibility) is int)
            and 0.001 <= visibility <= MAX_SECONDS
            and (type(delay) is float or type(delay) is int) and 0 <= delay <= MAX_SECONDS)


MAX_GROUP_CONCURRENCY = 100_000


def check_group(group: Any, concurrency: Any, rate: Any = None) -> None:
    """A fair-share group's name, slots and rate, as ``enqueue(group=...,
    group_concurrency=..., group_rate=...)`` takes them; ``InvalidJob`` saying what to pass."""
    if group is None:
        what = "group_concurrency" if concurrency is not None else "group_rate"
        raise InvalidJob(f"{what} needs a group: pass group='tenant:7' as well")
    if not valid_name(group):
        raise InvalidJob(f"bad group {group!r}: use 1-100 of A-Z a-z 0-9 _ . : - "
                         "(e.g. 'tenant:7')")
    if concurrency is not None and (type(concurrency) is not int
                                    or not 1 <= concurrency <= MAX_GROUP_CONCURRENCY):
        raise InvalidJob(f"bad group_concurrency {concurrency!r}: an int from 1 to "
                         f"{MAX_GROUP_CONCURRENCY} (how many of the group's jobs may be ready "
                         "or running at once)")
    if rate is not None:
        parse_rate(rate)


MAX_GROUP_RATE = 10_000  # starts per window (the script keeps the newest n starts)
RATE_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# at most 12 digits each: int() of thousands of digits is refused (ValueError), and no bound
# needs more
_RATE = re.compile(r"^\s*([0-9]{1,12})\s*/\s*([0-9]{0,12})\s*([smhd])\s*$")


def parse_rate(rate: Any) -> tuple[int, int]:
    """A group rate as ``group_rate`` takes it ('10/s', '600/m', '1/h', '5/10s', '100/d') ->
    (starts, window ms); ``InvalidJob`` saying what to pass."""
    m = _RATE.match(rate) if isinstance(rate, str) else None
    count = int(m.group(1)) if m else 0
    per = int(m.group(2) or 1) if m else 0
    if not m or not 1 <= count <= MAX_GROUP_RATE or not 1 <= per <= 1000:
        shown = repr(rate) if len(repr(rate)) <= 60 else repr(rate)[:57] + "..."
        raise InvalidJob(f"bad group_rate {shown}: pass how many of the group's jobs may start "
                         f"per second, minute, hour or day as text, e.g. '10/s', '600/m', "
                         f"'1/h' or '5/10s' (1 to {MAX_GROUP_RATE} per window)")
    return count, per * RATE_UNITS[m.group(3)]


def rate_field(rate: str) -> str:
    """The job hash's 'grate' value of a checked rate: '<starts>/<window ms>'."""
    count, window = parse_rate(rate)
    return f"{count}/{window}"


def format_rate(field_value: str) -> str:
    """A stored 'grate' ('10/1000') as it was given ('10/s'); '' when not a rate."""
    try:
        count, window = (int(x) for x in field_value.split("/"))
    except ValueError:
        return ""
    for unit, ms in reversed(list(RATE_UNITS.items())):
        if window % ms == 0:
            per = window // ms
            return f"{count}/{'' if per == 1 else per}{unit}"
    return f"{count}/{window}ms"


def _check_unique(spec: JobSpec) -> None:
    if not isinstance(spec.unique, bool):
        raise InvalidJob(f"unique must be True or False, not {spec.unique!r}")
    _check_seconds("unique_for_s", spec.unique_for_s, 0)


def _check_count(name: str, value: Any) -> None:
    if type(value) is int and 1 <= value <= 10_000:
        return  # the common case, without the isinstance chain
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise InvalidJob(f"{name} must be a whole number from 1 to 10000, not {value!r}")


def _check_seconds(name: str, value: Any, low: float) -> None:
    kind = type(value)
    if (kind is float or kind is int) and low <= value <= MAX_SECONDS:
        return  # the common case (a NaN or an infinity fails the range test)
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not low <= value <= MAX_SECONDS):
        raise InvalidJob(f"{name} must be a finite number of seconds from {low} to "
                         f"{MAX_SECONDS}, not {value!r}")


ENTROPY_HEX = 80  # a new job's random hex digits: 32 for its id, 48 for its traceparent


def new_entropy(jobs: int = 1) -> str:
    """Random hex for ``jobs`` new jobs (``ENTROPY_HEX`` each), from one ``os.urandom``."""
    return os.urandom(jobs * ENTROPY_HEX // 2).hex()


def encode_new(spec: JobSpec, queue: str, now_ms: int,
               max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
               entropy: str | None = None, now_text: str | None = None) -> list[str]:
    """Validate ``spec`` and return the values of the new job's hash, in ``NEW_FIELDS`` order
    (raises ``InvalidJob``). A missing job id or trace id is made here, from ``entropy``
    (``ENTROPY_HEX`` random hex digits: ``new_entropy``; one ``os.urandom`` for both, or for a
    whole batch) or, without it, from a new one. ``now_text``: ``str(now_ms)``, when the
    caller has it (a batch makes it once)."""
    return new_values(spec, queue, now_ms, checked_payload(spec, queue, max_payload_bytes),
                      entropy, now_text)


def checked_payload(spec: JobSpec, queue: str,
                    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Validate ``spec`` and return its payload's stored text: every ``InvalidJob`` a new job
    can raise is raised here (``new_values`` then makes the rest of its hash)."""
    check_spec(spec, queue)
    return encode_payload(spec.payload, max_payload_bytes)


def new_values(spec: JobSpec, queue: str, now_ms: int, payload: str,
               entropy: str | None = None, now_text: str | None = None) -> list[str]:
    """``encode_new`` for a spec that ``checked_payload`` passed, given its payload text."""
    job_id, trace_id = spec.job_id, spec.trace_id
    if not job_id:
        # 128 random bits, as new_job_id; without a trace of its own the job's traceparent is
        # made from them (job_traceparent) and not stored: its trace_id value is ''
        job_id = (entropy or new_entropy())[:32]
        trace_id = trace_id or ""
    elif not trace_id:
        raw = entropy or new_entropy()
        trace_id = f"00-{raw[32:64]}-{raw[64:80]}-01"  # as new_traceparent
    if now_text is None:
        now_text = str(now_ms)
    delay_s = spec.delay_s
    return [
        job_id,
        spec.job_type,
        str(now_ms + int(delay_s * 1000)) if delay_s else now_text,
        queue,
        spec.idempotency_key,
        payload,
        str(spec.max_attempts),
        now_text,
        trace_id,
        spec.lock_key or "",
        _encode_compact_json(spec.headers) if spec.headers else "{}",
        repr(float(spec.timeout_s)),
        str(int(spec.visibility_timeout_s * 1000)),
        str(spec.max_deliveries),
    ]


def pack_new(values: Sequence[str]) -> bytes:
    """One new job as ``enqueue.lua`` reads it: a JSON array of its ``NEW_FIELDS`` values
    (orjson: every value is valid text by now, see ``check_spec``; 1 µs instead of 4)."""
    return orjson.dumps(values)


def pack_chunk(jobs: Sequence[Sequence[str]]) -> bytes:
    """Many new jobs as one argument of ``enqueue.lua``: a JSON array of ``pack_new``'s
    arrays (one orjson call, and one argument for the client to pack and Redis to read)."""
    return orjson.dumps(jobs)


# NEW_FIELDS' last five values when they are empty or JobSpec's defaults (no lock key, no
# headers, a 30 s timeout and lease, 10 deliveries): enqueue.lua stores none of them
# (_base.lua's at_defaults)
_DEFAULT_TAIL = ["", "{}", "30.0", "30000", "10"]
_PLAIN_VALUES = len(NEW_FIELDS) - len(_DEFAULT_TAIL)


def pack_standard(jobs: Sequence[list[str]]) -> bytes:
    """``pack_chunk`` of jobs with the standard ``NEW_FIELDS``, each without its last five
    values when they are the defaults (``enqueue.lua`` reads a job of nine values as one at
    the defaults): five strings fewer per job for the server to decode."""
    return orjson.dumps([v[:_PLAIN_VALUES] if v[_PLAIN_VALUES:] == _DEFAULT_TAIL else v
                         for v in jobs])


# -- consuming: a reserved job --------------------------------------------------------------

# What a worker needs of a job it reserves (errors, traceback and result stay in Redis; no
# 'queue': the caller knows the queue it reserves from, from_row's ``queue``), as reserve.lua
# returns it per job, in this order: first the fields every job has (a standard enqueue
# without options, its id made by the client and its trace made from the id, stores exactly
# PLAIN_FIELDS and its state, visible_at only when it is not created_at: enqueue.lua's store;
# a test ties the two), then the id (the one the job was popped by: the key says it, the hash
# does not hold it), those reserve writes (the new lease), then the optional ones. A job whose
# hash holds nothing else is reserved "plain": its row stops after the id and reserved_at
# (PLAIN_ROW values; the client makes the lease's other values and reads the rest as absent)
# and its ack skips the lookups of what such a job cannot have ("What reserve returns per
# job" in _reserve.lua).
PLAIN_FIELDS = ("type", "idem_key", "payload", "max_attempts", "visible_at", "created_at")
RESERVE_FIELDS = (*PLAIN_FIELDS, "id",
                  "epoch", "deliveries", "state", "deadline", "reserved_at", "worker_id",
                  "trace_id", "lock_key", "headers", "timeout_s", "vt_ms", "max_deliveries",
                  "flow", "fin", "cancel", "attempt", "checkpoint", "first_failed_at",
                  "replayed_at", "snoozes")
# a plain job's row: PLAIN_FIELDS, its id and reserved_at (its lease is the first, with the
# default 30 s: from_row makes the other written values); one the fast path did not take (a
# hash without its type): PLAIN_FIELDS, the id and the written fields
PLAIN_ROW = len(PLAIN_FIELDS) + 2
FIRST_LEASE_MS = 30_000  # a plain job's lease: JobSpec's default (reserve.lua's plain_deadline)
ROW_ID = len(PLAIN_FIELDS)  # where a row (short or whole) holds the job's id
_WRITTEN_ROW = len(PLAIN_FIELDS) + 7
_ROW_PAD = (None,) * (len(RESERVE_FIELDS) - _WRITTEN_ROW)


def text_row(row: Sequence[bytes | None]) -> tuple[list[str | None], str]:
    """A reserved job's values as ``reserve`` reads them (bytes: the reply is read undecoded,
    so one job's bad bytes cannot fail the whole batch's reply) as text, and '' or the name of
    the first field that is not UTF-8 (then read with replacement characters)."""
    try:
        return [None if v is None else v.decode() for v in row], ""
    except UnicodeDecodeError:
        pass
    out: list[str | None] = []
    bad = ""
    names = RESERVE_FIELDS if len(row) != PLAIN_ROW else (*PLAIN_FIELDS, "id", "reserved_at")
    for name, v in zip(names, row):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(v.decode())
        except UnicodeDecodeError:
            out.append(v.decode("utf-8", "replace"))
            bad = bad or name
    return out, bad


def from_raw_row(row: Sequence[bytes | None], queue: str = "", worker_id: str = "") -> Job:
    """``from_row`` of a row read undecoded: a job holding bytes that are not UTF-8 is decoded
    with replacement characters and its ``payload_error`` says which field (the worker buries
    it with that reason; its batch-mates are untouched)."""
    values, bad = text_row(row)
    job = from_row(values, queue, worker_id)
    if bad:
        job.payload_error = (f"the stored job's field {bad!r} is not valid UTF-8 text; "
                             "enqueue text (str) values only")
    return job


def from_row(row: Sequence[str | None], queue: str = "", worker_id: str = "") -> Job:
    """Decode the ``RESERVE_FIELDS`` values ``reserve.lua`` returns for one job: what
    ``from_fields`` makes of them (tests/test_fuzz.py compares the two), read by position (a
    reserved job is decoded once per delivery: no dict of the row, no lookups of the fields a
    reserve never returns). ``worker_id``: the reserving worker's (a plain job's short row
    leaves out what the caller knows)."""
    plain = True
    if len(row) == PLAIN_ROW:  # a plain job's first lease (reserve.lua's fast path)
        job = _first_lease(row, queue, worker_id)
        if job is not None:
            return job
        at = row[PLAIN_ROW - 1]  # (a damaged value: the careful way, below)
        row = (*row[:PLAIN_ROW - 1], "1", "1", states.INFLIGHT,
               str(int(at) + FIRST_LEASE_MS) if at and at.isdigit() else None, at, worker_id,
               *_ROW_PAD)
    elif len(row) == _WRITTEN_ROW:  # a job reserved plain: no optional field
        row = (*row, *_ROW_PAD)
    elif len(row) == len(RESERVE_FIELDS):
        plain = False
    else:
        return from_fields({n: v for n, v in zip(RESERVE_FIELDS, row) if v is not None}, queue)
    (type_, idem_key, raw_payload, max_attempts, visible_at, created_at, id_,
     epoch, deliveries, state, deadline, reserved_at, row_worker, trace_id, lock_key, raw_headers,
     raw_timeout, vt_ms, max_deliveries, flow, fin, cancel, attempt, raw_checkpoint,
     first_failed_at, replayed_at, snoozes) = row
    payload, payload_error = _stored_payload(raw_payload)
    headers, _ = _json(raw_headers, {})
    checkpoint, _ = _json(raw_checkpoint, None)
    try:
        timeout_s = float(raw_timeout or 30.0)
    except ValueError:
        timeout_s = 30.0
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        timeout_s = 30.0
    raws = (attempt, max_attempts, visible_at, created_at, vt_ms, epoch, deliveries,
            max_deliveries, deadline, reserved_at, first_failed_at, replayed_at, snoozes)
    try:  # what the scripts write: digits, read in one pass
        nums = [int(raw) if raw else default for raw, default in zip(raws, _ROW_DEFAULTS)]
    except ValueError:  # a damaged counter somewhere: each read the careful way
        nums = [_num(raw, default) for raw, default in zip(raws, _ROW_DEFAULTS)]
    (n_attempt, n_max_attempts, n_visible_at, n_created_at, n_vt_ms, n_epoch, n_deliveries,
     n_max_deliveries, n_deadline, n_reserved_at, n_first_failed_at, n_replayed_at,
     n_snoozes) = nums
    if not n_visible_at:  # a job visible at once stores none: its created_at
        n_visible_at = n_created_at
    job = _job_of(dict(
        id=id_ or "", type=type_ or "", queue=queue, idempotency_key=idem_key or "",
        payload=payload, attempt=n_attempt, max_attempts=n_max_attempts,
        visible_at=n_visible_at, created_at=n_created_at,
        trace_id=trace_id or job_traceparent(id_ or ""),
        lock_key=lock_key or "", headers=headers if isinstance(headers, dict) else {},
        timeout_s=timeout_s, visibility_timeout_ms=n_vt_ms, epoch=n_epoch,
        deliveries=n_deliveries, max_deliveries=n_max_deliveries,
        state=state if state is not None else states.READY, deadline=n_deadline,
        reserved_at=n_reserved_at, worker_id=row_worker or "", checkpoint=checkpoint,
        first_failed_at=n_first_failed_at, replayed_at=n_replayed_at,
        payload_error=payload_error, snoozes=n_snoozes, cancel=cancel or "", errors=[]))
    if flow or fin:  # a job of a flow: the only jobs with these fields
        job.__dict__.update(flow=flow or "", flow_inputs=_num(fin))
    if plain:
        job.__dict__["_plain"] = True
    return job


def _job_of(values: dict[str, Any]) -> Job:
    """What ``Job(**values)`` makes, its other fields at their defaults, without its
    ``__init__`` (thirty-five assignments by keyword were a third of a row's decoding)."""
    job = _new_job(Job)
    fields = job.__dict__
    fields.update(_JOB_DEFAULTS)
    fields.update(values)
    return job


def _first_lease(row: Sequence[str | None], queue: str, worker_id: str) -> Job | None:
    """``from_row`` of a plain job's short row (PLAIN_FIELDS and reserved_at: its first lease,
    epoch and delivery 1, the default 30 s), the common case, without the padding and the
    careful reads: None when a value is not the digits reserve and enqueue write."""
    type_, idem_key, raw_payload, max_attempts, visible_at, created_at, id_, at = row
    try:
        n_max_attempts, n_created_at = int(max_attempts), int(created_at)  # type: ignore[arg-type]
        n_at = int(at)  # type: ignore[arg-type]
        # (a job visible at once stores no visible_at: its created_at)
        n_visible_at = int(visible_at) if visible_at is not None else n_created_at
    except (TypeError, ValueError):
        return None
    payload, payload_error = _stored_payload(raw_payload)
    return _job_of(dict(
        id=id_ or "", type=type_ or "", queue=queue, idempotency_key=idem_key or "",
        payload=payload, max_attempts=n_max_attempts, visible_at=n_visible_at,
        created_at=n_created_at, trace_id=job_traceparent(id_ or ""), headers={}, epoch=1,
        deliveries=1, state=states.INFLIGHT, deadline=n_at + FIRST_LEASE_MS, reserved_at=n_at,
        worker_id=worker_id, payload_error=payload_error, errors=[], _plain=True))


_new_job = object.__new__
# every field of Job in its order (so a decoded job's attributes are in the order its __init__
# sets them), at its plain default (those without one are all given by from_row)
_JOB_DEFAULTS = {f.name: None if f.default is dataclasses.MISSING else f.default
                 for f in dataclasses.fields(Job)}


# the defaults of from_row's integer fields, in its order (attempt, max_attempts, visible_at,
# created_at, vt_ms, epoch, deliveries, max_deliveries, deadline, reserved_at,
# first_failed_at, replayed_at, snoozes)
_ROW_DEFAULTS = (0, 5, 0, 0, 30_000, 0, 0, 10, 0, 0, 0, 0, 0)
