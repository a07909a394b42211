"""A running job's progress (``ctx.progress(0.4, "rows 4,000/10,000")``): its value, its
checks and its codec (the job hash's field 'progress', written by ``progress.lua``). Pure."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE = 200  # characters of a progress message kept (the rest is cut, with '…')


@dataclass(frozen=True)
class Progress:
    """How far a handler says it got: ``fraction`` 0..1, a short ``message`` (plain text, at
    most ``MAX_MESSAGE`` characters) and when it said so (``at_ms``, the worker's clock)."""

    fraction: float
    message: str = ""
    at_ms: int = 0

    @property
    def percent(self) -> int:
        """The fraction as a whole percentage, 0..100 (rounded down: 99.9% is not done)."""
        return max(0, min(100, int(self.fraction * 100)))


def checked(fraction: Any, message: Any = "") -> tuple[float, str]:
    """``fraction`` as a float in 0..1 and ``message`` as bounded text, or ``ValueError``
    saying what to pass."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ValueError(f"progress fraction must be a number from 0 to 1 (e.g. 0.4 for 40%), "
                         f"not {type(fraction).__name__} {fraction!r}")
    value = float(fraction)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"progress fraction must be from 0 to 1 (e.g. 0.4 for 40%), "
                         f"not {fraction!r}")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise ValueError(f"progress message must be text (str), not {type(message).__name__}")
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 1] + "…"
    return value, message


def encode(fraction: float, message: str, at_ms: int) -> str:
    """The 'progress' field of a job hash (values already ``checked``)."""
    return json.dumps({"f": fraction, "m": message, "t": int(at_ms)}, ensure_ascii=False,
                      separators=(",", ":"))


def decode(raw: Any) -> Progress | None:
    """A job hash's 'progress' field as a ``Progress``; None when absent or unreadable (a
    damaged field never fails a read)."""
    if not raw or not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
        fraction = float(value["f"])
        message = value.get("m", "")
        at_ms = int(value.get("t", 0))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not math.isfinite(fraction):
        return None
    return Progress(max(0.0, min(1.0, fraction)), str(message)[:MAX_MESSAGE], at_ms)
