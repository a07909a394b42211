"""Structured (JSON, one object a line) logging for worker processes."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

FIELDS = ("event", "job_id", "job_type", "idempotency_key", "attempt", "lock_key", "trace_id",
          "duration_ms", "error_kind", "queue", "worker_id")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname,
                               "logger": record.name, "msg": record.getMessage(),
                               "pid": record.process}
        for name in FIELDS:
            value = getattr(record, name, None)
            if value not in (None, ""):
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


def configure(level: str | None = None) -> None:
    """JSON lines on stderr for the ``antre`` loggers (``ANTRE_LOG_LEVEL``, default INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("antre")
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("ANTRE_LOG_LEVEL") or "INFO").upper())
    root.propagate = False


def safe_url(url: str) -> str:
    """The URL without its password, for log lines."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
