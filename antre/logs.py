"""Structured logging for every Antre process (worker, web, CLI): one switch between JSON lines
(production) and readable text (``antre demo``).

``configure()`` reads ``ANTRE_LOG_FORMAT`` (``json`` | ``text``, default json) and
``ANTRE_LOG_LEVEL`` (default INFO) and installs one handler on the ``antre`` logger (every
module logs under ``antre.*``). A job event is one record whose ``extra`` is ``job_fields(job,
event, ...)``: the formatters put ``job_id, job_type, idempotency_key, attempt, lock_key,
trace_id, duration_ms, error_kind`` (and queue, worker_id) on the line when present.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from .envelope import Job

JOB_FIELDS = ("job_id", "job_type", "idempotency_key", "attempt", "lock_key", "trace_id",
              "duration_ms", "error_kind")
CONTEXT_FIELDS = ("queue", "worker_id")
FIELDS = ("event", *JOB_FIELDS, *CONTEXT_FIELDS)
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
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(record, name, None)
        if value not in (None, ""):
            out[name] = value
    for name, value in vars(record).items():
        if name not in _STANDARD and name not in out and not name.startswith("_") \
                and value not in (None, ""):
            out[name] = value
    return out


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, event, the job fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": _iso(record.created), "level": record.levelname,
                               "logger": record.name, "message": record.getMessage()}
        out.update(record_fields(record))
        out.setdefault("event", "log")
        out["pid"] = record.process
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``12:00:01.234 INFO  antre.worker  started job 3f2a  [started] job_type=send_email ...``"""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        fields = record_fields(record)
        event = fields.pop("event", "")
        fields.pop("trace_id", None)  # long and unreadable; the JSON format keeps it
        tail = " ".join(f"{k}={v}" for k, v in fields.items())
        line = f"{ts} {record.levelname:<5} {record.name:<20} {record.getMessage()}"
        if event:
            line += f"  [{event}]"
        if tail:
            line += f" {tail}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, not {fmt!r}")
    return JsonFormatter() if fmt == "json" else TextFormatter()


def configure(fmt: str | None = None, level: str | int | None = None,
              stream: IO[str] | None = None, logger: str = "antre") -> logging.Handler:
    """Install one handler on ``logger`` (replacing the previous ones); returns it."""
    fmt = (fmt or os.environ.get("ANTRE_LOG_FORMAT") or "json").lower()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    target = logging.getLogger(logger)
    target.handlers[:] = [handler]
    lvl = level or os.environ.get("ANTRE_LOG_LEVEL") or "INFO"
    target.setLevel(lvl.upper() if isinstance(lvl, str) else lvl)
    target.propagate = False
    return handler


def safe_url(url: str) -> str:
    """The URL without its password, for log lines."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
