"""Structured logging for every Antre process (worker, web, CLI): one switch between JSON lines
(production) and readable text (``antre demo``).

``configure()`` reads ``ANTRE_LOG_FORMAT`` (``json`` | ``text``, default json),
``ANTRE_LOG_LEVEL`` (default INFO) and ``ANTRE_LOG_FLUSH_MS`` (default 200) and installs one
handler on the ``antre`` logger (every module logs under ``antre.*``); APScheduler's loggers
go through the same handler, at WARNING or worse.

Lines to stderr are written in batches (``BufferedHandler``): a worker logs a line per job, and
one write system call per line cost more than the line itself. A line waits at most
``ANTRE_LOG_FLUSH_MS`` (0: every line written at once, as a plain ``StreamHandler``); a
WARNING or worse goes out at once with everything before it; the buffer is written when it
passes 64 KiB, and at a normal exit (``logging.shutdown``, which the worker runs after a
SIGTERM/SIGINT stop). A process killed with SIGKILL (or dying in C) loses the INFO lines of its
last ``ANTRE_LOG_FLUSH_MS`` at most: its outcomes are in Redis (counters, job timelines), only
their log lines are missing. A job event is one record whose ``extra`` is ``job_fields(job,
event, ...)``: the formatters put ``job_id, job_type, idempotency_key, attempt, lock_key,
lock_fence`` (the fencing token of the lock the job held), ``trace_id, duration_ms, error_kind`` (and queue, worker_id) on the line when present.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from typing import IO, Any, Callable

import orjson

import antre.settings as settings
from antre.engine.envelope import Job
from antre.observe.redact import redact_url

JOB_FIELDS = ("job_id", "job_type", "idempotency_key", "attempt", "lock_key", "lock_fence",
              "trace_id",
              "duration_ms", "error_kind")
CONTEXT_FIELDS = ("queue", "worker_id")
FIELDS = ("event", *JOB_FIELDS, *CONTEXT_FIELDS)
# what each field of a line means (the documentation's log reference is made from it)
FIELD_HELP = {
    "event": "what happened, one name per kind of line (`log` for a line that names none)",
    "job_id": "the job's id",
    "job_type": "the job's type (its handler's name)",
    "idempotency_key": "the key naming the job's effect",
    "attempt": "the attempt this delivery runs, from 1",
    "lock_key": "the business lock the job runs under, when it has one",
    "lock_fence": "the fencing token of that lock, as the job held it",
    "trace_id": "the W3C trace id the job carries from its producer",
    "duration_ms": "how long the handler ran, in milliseconds",
    "error_kind": "why the job did not complete: the failure's kind (retryable, permanent, "
                  "timeout, ...), a snooze's reason, lease_lost, cancelled, expired",
    "queue": "the job's queue",
    "worker_id": "the worker process, as host:pid:nonce",
}
FORMATS = ("json", "text")
# attributes every LogRecord has; anything else on a record came from ``extra``
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def job_fields(job: Job, event: str, **more: Any) -> dict[str, Any]:
    """The ``extra=`` of a log record about ``job`` (``attempt`` counts from 1)."""
    return {"event": event, "job_id": job.id, "job_type": job.type,
            "idempotency_key": job.idempotency_key, "attempt": job.attempt + 1,
            "lock_key": job.lock_key, "trace_id": job.trace_id, "queue": job.queue, **more}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The known fields first (in ``FIELDS`` order), then any other ``extra``; empty ones
    (None, '') are left out."""
    attrs = vars(record)
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = attrs.get(name)
        if value is not None and value != "":
            out[name] = value
    if attrs.keys() - _KNOWN:  # other extra (rare): one more pass, in the record's order
        for name, value in attrs.items():
            if name not in _KNOWN and not name.startswith("_") and value is not None \
                    and value != "":
                out[name] = value
    return out


_KNOWN = _STANDARD | set(FIELDS)
# the stdlib's, built once, for what orjson refuses (integers past 64 bits, deep nesting)
_encode_line_stdlib = json.JSONEncoder(separators=(",", ":"), default=str).encode


def _encode_line(out: dict[str, Any]) -> str:
    """orjson: a fifth of the stdlib encoder's time, about 4 µs less per line."""
    try:
        return orjson.dumps(out, default=str).decode()
    except orjson.JSONEncodeError:
        return _encode_line_stdlib(out)


class _SecondCache:
    """``created`` as ``<fmt>.mmm``, the date and time of the last whole second seen kept
    formatted: a line formats only its milliseconds (the cache is one tuple swapped whole, so
    threads may share it). Rounded to the microsecond first, as ``datetime`` does."""

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self.fmt, self.convert = fmt, convert
        self.last: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        micros = round(created * 1_000_000)
        second, text = self.last
        if micros // 1_000_000 != second:
            second = micros // 1_000_000
            text = time.strftime(self.fmt, self.convert(second))
            self.last = (second, text)
        return f"{text}.{micros // 1000 % 1000:03d}"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, the ``FIELDS`` that have a value,
    any other ``extra``, pid, exc."""

    def __init__(self) -> None:
        super().__init__()
        self._utc_second = _SecondCache("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self._utc_second(record.created) + "Z",
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        out.update(record_fields(record))
        if "event" not in out:
            out["event"] = "log"
        out["pid"] = record.process
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _encode_line(out)

    def line(self, created: float, level: int, name: str, message: str,
             extra: dict[str, Any]) -> str:
        """What ``format`` makes of a record of ``extra`` without an exception, from the parts
        (``job_line``: no ``LogRecord``)."""
        out: dict[str, Any] = {"ts": self._utc_second(created) + "Z",
                               "level": logging.getLevelName(level), "logger": name,
                               "message": message}
        for field in FIELDS:
            value = extra.get(field)
            if value is not None and value != "":
                out[field] = value
        if extra.keys() - _FIELD_SET:  # other extra, in its order
            for field, value in extra.items():
                if field not in _FIELD_SET and not field.startswith("_") \
                        and value is not None and value != "":
                    out[field] = value
        if "event" not in out:
            out["event"] = "log"
        out["pid"] = _pid[0]
        return _encode_line(out)


_FIELD_SET = frozenset(FIELDS)


def job_line(log: logging.Logger, level: int, msg: str, args: tuple[Any, ...],
             extra: dict[str, Any]) -> None:
    """``log.log(level, msg, *args, extra=extra)`` for a line per job, the caller having
    checked ``log.isEnabledFor(level)``. When the logger is as ``configure()`` leaves it (its one
    handler a JSON ``BufferedHandler`` on the ``antre`` logger, no filters anywhere), the line
    is made straight from the parts, the same as the formatter makes it from a record (a
    record and the handler chain were half the line's cost); otherwise (another handler,
    format or filter: e.g. a test's capture) a record through the logger's handlers. A write
    error on this path drops the lines, as the flusher thread does."""
    handler = _plain_json_handler(log)
    if handler is None or level < handler.level:
        # the record made here, not by log.log: that one walks the stack for the caller
        log.handle(log.makeRecord(log.name, level, "", 0, msg, args, None, None, extra))
        return
    formatter = handler.formatter
    assert isinstance(formatter, JsonFormatter)
    line = formatter.line(time.time(), level, log.name, msg % args, extra)
    handler.acquire()
    try:
        handler.add_line(line, level)
    finally:
        handler.release()


# what a name (keys.valid_name) or a traceparent is made of: nothing a JSON string escapes
_PLAIN = re.compile(r"[A-Za-z0-9_.:\-]*")


def succeeded_line(log: logging.Logger, job: Job, duration_ms: int | None,
                   lock_fence: int | None = None) -> None:
    """The INFO line of a job that succeeded, the caller having checked
    ``log.isEnabledFor(logging.INFO)``: the line ``job_line`` makes of ``("%s job %s%s",
    ("succeeded", job.id, ""), job_fields(job, "succeeded", duration_ms=duration_ms,
    error_kind="", lock_fence=lock_fence))``, filled into its JSON by hand when the logger is as ``configure()`` leaves
    it and the job's names need no escaping (what the queue stores: names are checked at
    enqueue); the formatter's way otherwise. The line of every ordinary job."""
    handler = _plain_json_handler(log)
    if (handler is None or logging.INFO < handler.level or type(job.attempt) is not int
            or (duration_ms is not None and type(duration_ms) is not int)
            or (lock_fence is not None and type(lock_fence) is not int)
            or not _PLAIN.fullmatch("".join((log.name, job.id, job.type, job.idempotency_key,
                                             job.lock_key, job.trace_id, job.queue)))):
        job_line(log, logging.INFO, "%s job %s%s", ("succeeded", job.id, ""),
                 job_fields(job, "succeeded", duration_ms=duration_ms, error_kind="",
                            lock_fence=lock_fence))
        return
    formatter = handler.formatter
    assert isinstance(formatter, JsonFormatter)
    line = (f'{{"ts":"{formatter._utc_second(time.time())}Z","level":"INFO",'
            f'"logger":"{log.name}","message":"succeeded job {job.id}","event":"succeeded"')
    if job.id:
        line += f',"job_id":"{job.id}"'
    if job.type:
        line += f',"job_type":"{job.type}"'
    if job.idempotency_key:
        line += f',"idempotency_key":"{job.idempotency_key}"'
    line += f',"attempt":{job.attempt + 1}'
    if job.lock_key:
        line += f',"lock_key":"{job.lock_key}"'
    if lock_fence is not None:
        line += f',"lock_fence":{lock_fence}'
    if job.trace_id:
        line += f',"trace_id":"{job.trace_id}"'
    if duration_ms is not None:
        line += f',"duration_ms":{duration_ms}'
    if job.queue:
        line += f',"queue":"{job.queue}"'
    line += f',"pid":{_pid[0]}}}'
    handler.acquire()
    try:
        handler.add_line(line, logging.INFO)
    finally:
        handler.release()


def _plain_json_handler(log: logging.Logger) -> "BufferedHandler | None":
    if log.filters or log.handlers or not log.propagate:
        return None
    parent = log.parent
    if parent is None or parent.name != "antre" or parent.filters or len(parent.handlers) != 1:
        return None
    handler = parent.handlers[0]
    if type(handler) is not BufferedHandler or handler.filters \
            or type(handler.formatter) is not JsonFormatter:
        return None
    return handler


class TextFormatter(logging.Formatter):
    """``12:00:01.234 INFO  antre.worker  started job 3f2a  [started] job_type=send_email ...``"""

    def __init__(self) -> None:
        super().__init__()
        self._local_second = _SecondCache("%H:%M:%S", time.localtime)

    def format(self, record: logging.LogRecord) -> str:
        ts = self._local_second(record.created)
        fields = record_fields(record)
        event = fields.pop("event", "")
        fields.pop("trace_id", None)  # long and unreadable; the JSON format keeps it
        line = f"{ts} {record.levelname:<5} {record.name:<20} {record.getMessage()}"
        if event:
            line += f"  [{event}]"
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, not {fmt!r}")
    return JsonFormatter() if fmt == "json" else TextFormatter()


_pid = [os.getpid()]  # this process's id, kept (a system call per job line otherwise)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))

FLUSH_MS = settings.LOG_FLUSH_MS.default  # the longest a buffered INFO line waits
BUFFER_BYTES = 64 * 1024  # a buffer this big is written at once
PIPE_BUF = 4096  # POSIX: a pipe write this small is atomic (counted in characters here)


class BufferedHandler(logging.Handler):
    """Formats each record at once and writes the lines in batches: every ``interval_s`` (a
    daemon thread), as soon as ``max_bytes`` are waiting, at once (with what waits before it)
    for a record of ``flush_level`` or worse, and on ``flush()`` / ``close()`` (both run by
    ``logging.shutdown`` at a normal exit). SIGKILL loses at most ``interval_s`` of lines.

    A forked child writes only the lines it logs itself: what the parent had buffered at the
    fork is the parent's to write (and is dropped from the child's copy at its first line or
    flush), and the child starts its own flusher thread at its first line.

    ``interval_s`` 0: every line is written at once (no thread). ``stream`` None: ``sys.stderr``
    as it is at each write (a handler never keeps a stream that was swapped out and closed,
    e.g. by a test's capture, which printed "--- Logging error --- ... closed file")."""

    def __init__(self, stream: IO[str] | None = None, interval_s: float = FLUSH_MS / 1000,
                 max_bytes: int = BUFFER_BYTES, flush_level: int = logging.WARNING) -> None:
        super().__init__()
        self._stream = stream
        self.interval_s, self.max_bytes, self.flush_level = interval_s, max_bytes, flush_level
        self._lines: list[str] = []
        self._size = 0
        self._pid = -1  # the process whose flusher thread runs
        self._stop_flusher = threading.Event()

    @property
    def stream(self) -> IO[str]:
        return self._stream if self._stream is not None else sys.stderr

    def emit(self, record: logging.LogRecord) -> None:  # called under self.lock
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.add_line(line, record.levelno, record)

    def add_line(self, line: str, levelno: int, record: logging.LogRecord | None = None
                 ) -> None:
        """A formatted line into the buffer (called under self.lock)."""
        if self._pid != _pid[0] or self._stop_flusher.is_set():
            # the first line (or the first of a forked child: lines from before the fork are
            # the parent's to write; or of a handler closed and used again): start the flusher
            self._lines, self._size = [], 0
            self._start_flusher()
        self._lines.append(line)
        self._size += len(line)
        if levelno >= self.flush_level or self._size >= self.max_bytes or self.interval_s <= 0:
            try:
                self._write()
            except Exception:
                if record is not None:
                    self.handleError(record)

    def _start_flusher(self) -> None:
        self._pid = _pid[0]
        self._stop_flusher = threading.Event()  # a thread stopped by close() keeps its own
        if self.interval_s > 0:
            threading.Thread(target=self._flush_loop, daemon=True, name="antre-log-flush").start()

    def _flush_loop(self) -> None:
        stop = self._stop_flusher
        while not stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:  # a closed or broken stream: the lines are dropped
                pass

    def _write(self) -> None:
        """The waiting lines, in writes of at most ``PIPE_BUF`` characters of whole lines: a
        write that small to a pipe is never interleaved with another process's (the pool's
        processes share stderr), as a line written alone never was (a longer line still goes
        alone)."""
        lines = self._lines
        if not lines:
            return
        self._lines, self._size = [], 0
        stream = self.stream
        chunk: list[str] = []
        size = 0
        for line in lines:
            if chunk and size + len(line) + 1 > PIPE_BUF:
                stream.write("\n".join(chunk) + "\n")
                stream.flush()
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        stream.write("\n".join(chunk) + "\n")
        stream.flush()

    def flush(self) -> None:
        self.acquire()
        try:
            if self._pid != _pid[0]:
                # a forked child that has logged nothing yet (e.g. at its exit): the lines it
                # holds are its copy of the parent's buffer, which the parent writes
                self._lines, self._size = [], 0
            self._write()
        finally:
            self.release()

    def close(self) -> None:
        try:
            self.flush()
        except Exception:
            pass
        finally:
            self._stop_flusher.set()
            super().close()


def configure(fmt: str | None = None, level: str | int | None = None,
              stream: IO[str] | None = None, logger: str = "antre",
              flush_ms: int | None = None) -> logging.Handler:
    """Install one handler on ``logger`` (replacing the previous ones, which are closed);
    returns it. Without ``stream`` (stderr) lines are buffered up to ``flush_ms``
    (``ANTRE_LOG_FLUSH_MS``, default 200; 0: each line written at once); to a given ``stream``
    each line is written at once unless ``flush_ms`` says otherwise."""
    fmt = (fmt or settings.LOG_FORMAT.get()).lower()
    if flush_ms is None:
        flush_ms = settings.LOG_FLUSH_MS.get() if stream is None else 0
    handler = BufferedHandler(stream, interval_s=flush_ms / 1000)
    handler.setFormatter(formatter(fmt))
    target = logging.getLogger(logger)
    for old in target.handlers:
        try:
            old.close()  # a buffered one writes what it still holds
        except Exception:
            pass
    target.handlers[:] = [handler]
    lvl = level or settings.LOG_LEVEL.get()
    target.setLevel(lvl.upper() if isinstance(lvl, str) else lvl)
    target.propagate = False
    if logger == "antre":
        _route_third_party(handler)
    return handler


# loggers of libraries Antre runs (APScheduler, in the pool's supervisor): their lines come out
# through Antre's handler, in its format, at WARNING or worse only ("Running job ..." at INFO
# for every tick of every duty would drown the job lines)
THIRD_PARTY_LOGGERS = ("apscheduler",)


def _route_third_party(handler: logging.Handler) -> None:
    for name in THIRD_PARTY_LOGGERS:
        lib = logging.getLogger(name)
        lib.handlers[:] = [handler]
        lib.setLevel(logging.WARNING)
        lib.propagate = False


def safe_url(url: str) -> str:
    """The URL without its secrets, for log lines (``antre.observe.redact.redact_url``)."""
    return redact_url(url)
