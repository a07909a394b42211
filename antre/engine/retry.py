"""Retry policy and error classification. Pure functions, tested without Redis."""

from __future__ import annotations

import linecache
import random
import re
import traceback as tb_module
from dataclasses import dataclass
from typing import Literal

from antre.errors import LeaseLost, Permanent, RateLimited, Retryable, VersionConflict


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter and a cap.

    The n-th retry waits ``d = min(cap_ms, base_ms * factor ** (n - 1))`` scaled into
    ``[d * (1 - jitter), d]``: jitter spreads retries so failed jobs do not come back together.
    """

    base_ms: int = 1_000
    factor: float = 2.0
    cap_ms: int = 300_000
    jitter: float = 0.5

    def bounds_ms(self, attempt: int) -> tuple[int, int]:
        d = min(float(self.cap_ms), self.base_ms * self.factor ** max(0, attempt - 1))
        return int(d * (1 - self.jitter)), int(d)

    def backoff_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        low, high = self.bounds_ms(attempt)
        return int((rng or random).uniform(low, high))

    def horizon_ms(self, max_attempts: int) -> int:
        """The longest a job can keep retrying before it is dead-lettered."""
        return sum(self.bounds_ms(n)[1] for n in range(1, max_attempts))


Action = Literal["retry", "dead", "snooze"]


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_ms: int
    spend_attempt: bool
    kind: str
    reason: str


def classify(exc: BaseException, attempt: int, max_attempts: int, policy: RetryPolicy,
             rng: random.Random | None = None) -> Decision:
    """What to do with a job whose handler raised ``exc`` on attempt ``attempt`` (1-based).

    Permanent → dead. RateLimited → snooze without spending an attempt; VersionConflict too
    (a short one; the worker puts the job behind its lock_key's next job). Anything else is
    retryable until ``max_attempts`` attempts are spent, then dead.
    """
    if isinstance(exc, RateLimited):
        return Decision("snooze", int(exc.retry_after_s * 1000), False, "rate_limited", str(exc))
    if isinstance(exc, VersionConflict):  # re-read and try again, behind its key's next job
        return Decision("snooze", (rng or random).randint(10, 200), False, "version_conflict",
                        describe(exc))
    if isinstance(exc, LeaseLost):
        raise ValueError("LeaseLost is not a handler outcome")
    if isinstance(exc, Permanent):
        return Decision("dead", 0, True, "permanent", f"permanent error: {describe(exc)}")
    kind = "timeout" if type(exc).__name__ == "JobTimeout" else (
        "retryable" if isinstance(exc, Retryable) else "error")
    if attempt >= max_attempts:
        return Decision("dead", 0, True, kind,
                        f"attempts exhausted ({attempt}/{max_attempts}); last error: {describe(exc)}")
    delay = policy.backoff_ms(attempt, rng)
    after = getattr(exc, "retry_after_s", None)
    if after is not None:
        delay = max(delay, int(after * 1000))
    return Decision("retry", delay, True, kind, describe(exc))


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def format_traceback(exc: BaseException) -> str:
    """The text ``traceback.format_exception`` gives (chained exceptions included), its last
    8,000 characters, without the ``^^^^`` position lines. Python 3.11+ finds those by parsing
    each frame's source line and stats every file for each traceback: together most of a
    failed job's worker CPU. Exception groups keep the standard format."""
    if isinstance(exc, BaseExceptionGroup):
        return "".join(tb_module.format_exception(type(exc), exc, exc.__traceback__))[-8000:]
    parts: list[str] = []
    _chain(exc, parts, set())
    return "".join(parts)[-8000:]


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _chain(exc: BaseException, out: list[str], seen: set[int]) -> None:
    seen.add(id(exc))
    cause, context = exc.__cause__, exc.__context__
    if cause is not None and id(cause) not in seen:
        _chain(cause, out, seen)
        out.append(_CAUSE)
    elif context is not None and not exc.__suppress_context__ and id(context) not in seen:
        _chain(context, out, seen)
        out.append(_CONTEXT)
    if exc.__traceback__ is not None:
        out.append("Traceback (most recent call last):\n")
        for frame, lineno in tb_module.walk_tb(exc.__traceback__):
            code = frame.f_code
            out.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
            line = linecache.getline(code.co_filename, lineno or 0, frame.f_globals).strip()
            if line:
                out.append(f"    {line}\n")
    out += _last_line(exc)


def _last_line(exc: BaseException) -> list[str]:
    """``traceback.format_exception_only(type(exc), exc)``: made here for the common exception
    (no ``SyntaxError``, no ``__notes__``), the same text without the ``TracebackException``
    the standard function builds for it (half of a failure's traceback CPU); the standard
    function for the rest."""
    t = type(exc)
    if issubclass(t, SyntaxError) or getattr(exc, "__notes__", None) is not None:
        return tb_module.format_exception_only(t, exc)
    name, module = t.__qualname__, t.__module__
    if module not in ("__main__", "builtins"):
        name = f"{module if isinstance(module, str) else '<unknown>'}.{name}"
    try:
        text = str(exc)
    except Exception:
        text = "<exception str() failed>"
    return [f"{name}: {text}\n" if text else f"{name}\n"]


_UUID = re.compile(r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b(?:0x)?[0-9a-fA-F]{10,}\b")
# a token of 6+ hex characters mixing digits and letters ('895ec436'): an id, not a word
_MIXED_HEX = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{6,}"
                        r"(?![0-9A-Za-z])")
# each of the three above needs a run of 6+ hex characters (UUID 8, HEX 10, MIXED_HEX 6): a
# message without one (most) skips them, with the same result
_HEX_RUN = re.compile(r"[0-9a-fA-F]{6}")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUM = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def group_signature(kind: str, message: str) -> str:
    """The signature of a dead job's error group (the dashboard's): ``'<kind>: <normalised
    message>'``; the group's id is the first 12 hex characters of its SHA-1."""
    return f"{kind}: {error_signature(message)}"


def error_signature(message: str) -> str:
    """Normalise an error message into a group signature: ids, quoted values and numbers become
    placeholders so 'order 42 timed out' and 'order 43 timed out' group together."""
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    s = first
    if _HEX_RUN.search(s):
        s = _UUID.sub("<id>", s)
        s = _HEX.sub("<id>", s)
        s = _MIXED_HEX.sub("<id>", s)
    s = _QUOTED.sub("<str>", s)
    s = _NUM.sub("<n>", s)
    return _SPACE.sub(" ", s)[:200]
