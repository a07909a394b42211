"""A job's own log: the lines its handler wrote while it ran (``ctx.log(...)`` and the standard
``logging`` records emitted on the handler's thread or task), kept with the job.

``JobLog`` collects one delivery's lines, bounded (``ANTRE_JOB_LOG_LINES`` lines, 200 by
default, and ``ANTRE_JOB_LOG_BYTES`` bytes, 32 KiB; each line cut at ``MAX_LINE_CHARS``; what
is left out is counted and said by one last marker line) and redacted as they come (every
URL's password and secret-looking query values blanked, ``antre.observe.redact.scrub``, and
``name=value`` pairs whose name looks like a secret). The worker sends them with the job's
settle, in the same Lua call: ``JobLog.encode``'s text goes in the settle's timeline note
under ``LOG_NOTE``; ``Queue`` sends it after the note's JSON, past a NUL (which JSON text never
holds: ``engine.queue.LOG_SEP``), and the settling script (``note_log`` in ``lua/_timeline.lua``)
appends it to the job's log key (``keys.QueueKeys.job_log``, a STRING of JSON lines), after
the lines of the job's earlier deliveries while the whole stays under ``KEEP_BYTES`` (else
this delivery's alone). A handler that logs nothing sends nothing and the job has no log key.
The key goes with the job (``forget_job``: retention, purge, the done-trim; a discard).

``capturing(log)`` makes ``log`` the current job's log (a context variable: each thread, and
each asyncio task, has its own); ``CaptureHandler``, installed once on the root logger by
``install()``, adds every record emitted while one is current (the worker's own ``antre.*``
records excepted: they have their own place).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import antre.settings as settings
from antre.observe.redact import MASK, scrub

__all__ = ["CaptureHandler", "JobLog", "LogLine", "MAX_BYTES", "MAX_LINES", "MAX_LINE_CHARS",
           "KEEP_BYTES", "LOG_NOTE", "capturing", "decode", "install", "redact_line"]

MAX_LINES = settings.JOB_LOG_LINES.default  # lines kept of one delivery (ANTRE_JOB_LOG_LINES)
MAX_BYTES = settings.JOB_LOG_BYTES.default  # bytes kept of one delivery (each line's JSON)
MAX_LINE_CHARS = 2000  # a longer line is cut, ending with "…"
KEEP_BYTES = 96 * 1024  # a job's log over all its deliveries: past this, older deliveries go

LOG_NOTE = "log"  # the field of a settle's note holding its job's log (engine.queue._note)
_CURRENT: contextvars.ContextVar[JobLog | None] = contextvars.ContextVar("antre_job_log",
                                                                          default=None)
_SECRET_PAIR = re.compile(
    r"(?i)\b([\w.-]*(?:pass|pwd|secret|token|api_?key|auth|credential|signature)[\w.-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)")


def redact_line(text: str) -> str:
    """``text`` with its URLs' secrets and its ``secret=value`` pairs blanked."""
    out = scrub(text) if "://" in text else text
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", out)


@dataclass(frozen=True)
class LogLine:
    """One line of a job's log: when (ms), its level's name, the text, the attempt (1-based)
    and the logger's name ('' for ``ctx.log``)."""

    at_ms: int
    level: str
    text: str
    attempt: int = 0
    logger: str = ""
    marker: bool = False  # the line saying what was left out


class JobLog:
    """One delivery's lines, bounded and redacted as they are added (thread-safe enough: a
    list append per line under the GIL; the worker reads it once the handler ended)."""

    __slots__ = ("attempt", "clock", "lines", "size", "dropped", "dropped_bytes", "max_lines",
                 "max_bytes")

    def __init__(self, attempt: int, clock: Callable[[], int], max_lines: int = MAX_LINES,
                 max_bytes: int = MAX_BYTES) -> None:
        self.attempt = attempt
        self.max_lines = max_lines  # (the worker passes ANTRE_JOB_LOG_LINES / _BYTES)
        self.max_bytes = max_bytes
        self.clock = clock  # ms (antre.clock.Clock)
        self.lines: list[str] = []  # each line's JSON
        self.size = 0
        self.dropped = 0
        self.dropped_bytes = 0

    def add(self, level: int | str, text: str, logger: str = "") -> None:
        text = str(text)
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS - 1] + "…"
        name = level if isinstance(level, str) else logging.getLevelName(level)
        row = {"t": int(self.clock()), "l": name, "m": redact_line(text),
               "a": self.attempt}
        if logger:
            row["n"] = logger
        line = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        size = len(line.encode("utf-8", "replace")) + 1
        if len(self.lines) >= self.max_lines or self.size + size > self.max_bytes:
            self.dropped += 1
            self.dropped_bytes += size
            return
        self.lines.append(line)
        self.size += size

    def __bool__(self) -> bool:
        return bool(self.lines) or bool(self.dropped)

    def encode(self) -> str:
        """The delivery's lines as JSON lines (each ending in a newline), with the marker line
        when some were left out; '' when the handler logged nothing."""
        if not self:
            return ""
        lines = list(self.lines)
        if self.dropped:
            lines.append(json.dumps(
                {"t": int(self.clock()), "l": "WARNING", "a": self.attempt,
                 "m": f"… {self.dropped} more line(s) ({self.dropped_bytes} bytes) not kept: "
                      f"a delivery keeps at most {self.max_lines} lines and "
                      f"{self.max_bytes} bytes",
                 "x": 1}, separators=(",", ":")))
        return "\n".join(lines) + "\n"


def decode(text: str | bytes | None) -> list[LogLine]:
    """A job's log key as lines, oldest first (a line that is not JSON shown as it is)."""
    if not text:
        return []
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out: list[LogLine] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
            out.append(LogLine(int(row.get("t", 0)), str(row.get("l", "")), str(row.get("m", "")),
                               int(row.get("a", 0)), str(row.get("n", "")),
                               bool(row.get("x"))))
        except (ValueError, TypeError, AttributeError):
            out.append(LogLine(0, "", raw))
    return out


@contextlib.contextmanager
def capturing(log: JobLog | None) -> Iterator[None]:
    """``log`` is the current job's log in this thread (or task) while the block runs."""
    token = _CURRENT.set(log)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> JobLog | None:
    return _CURRENT.get()


def enter(log: JobLog | None) -> contextvars.Token[JobLog | None]:
    """``capturing`` without the context manager, for the worker's hot path: ``leave`` with
    the token."""
    return _CURRENT.set(log)


def leave(token: contextvars.Token[JobLog | None]) -> None:
    _CURRENT.reset(token)


class CaptureHandler(logging.Handler):
    """Adds each record emitted while a job's log is current to it (not the worker's own
    ``antre`` records). ``handle`` is the whole of it: no lock, no filter, one context-variable
    read for a record emitted outside a job (the worker's own lines, one per job)."""

    def handle(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            _last_resort(record, self)
        log = _CURRENT.get()
        if log is None:
            return False
        name = record.name
        if name == "antre" or name.startswith("antre."):
            return False
        try:
            text = record.getMessage()
        except Exception:  # a bad format: the raw message, never a lost job
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text = f"{text}: {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        log.add(record.levelno, text, name)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


def _last_resort(record: logging.LogRecord, capture: logging.Handler) -> None:
    """What Python does for a record no handler takes (``logging.lastResort``: a warning or
    worse to stderr), which the capture handler on the root logger would otherwise silence in
    a process that configured no logging of its own."""
    last = logging.lastResort
    if last is None or record.levelno < last.level:
        return
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(h is not capture for h in logger.handlers):
            return  # somebody else's handler has it
        logger = logger.parent if logger.propagate else None
    last.handle(record)


_INSTALLED: list[CaptureHandler] = []


def install() -> CaptureHandler:
    """The root logger's ``CaptureHandler``, added once per process."""
    if not _INSTALLED:
        handler = CaptureHandler(logging.DEBUG)
        logging.getLogger().addHandler(handler)
        _INSTALLED.append(handler)
    return _INSTALLED[0]
