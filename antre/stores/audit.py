"""The audit log: every change made from the dashboard, CLI or API - who, what, why, when, outcome.

An operator's change writes its entry first (``start``: outcome ``started``) and its outcome
after (``finish``), so no change runs unrecorded: an entry that cannot be written
(``AuditUnwritable``) stops the change. What is stored is made storable first (``storable``: a
NUL or a lone surrogate, which PostgreSQL or SQLite refuse, becomes U+FFFD; a value JSON cannot
hold becomes its text), so odd input is still audited. Every field is cut to a bounded size when recorded (``LIMITS``; a ``detail`` whose JSON is
longer than ``MAX_DETAIL_CHARS`` is replaced by its truncated text), so no request can store
more than a few kilobytes. The exports are generators: rows are read in batches and written as
they come, never all held in memory.
"""

from __future__ import annotations

import builtins
import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVarTuple, cast

from sqlalchemy import Select, Table, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from antre.clock import system_ms
from antre.stores.sql import AUDIT_OUTCOMES, AuditEntry, ms_to_datetime, unreachable

__all__ = ["CSV_COLUMNS", "AuditLog", "AuditRow", "AuditUnwritable", "storable"]

_T = cast(Table, AuditEntry.__table__)  # declarative __table__ is typed as FromClause
_C = _T.c
_Ts = TypeVarTuple("_Ts")

CSV_COLUMNS = (
    "id",
    "at",
    "user",
    "role",
    "action",
    "target",
    "reason",
    "outcome",
    "detail",
    "remote_addr",
)


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: datetime
    user: str
    role: str | None
    action: str
    target: str | None
    reason: str | None
    outcome: str
    detail: Any
    remote_addr: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``at`` as ISO 8601 UTC."""
        d = {name: getattr(self, name) for name in CSV_COLUMNS}
        d["at"] = self.at.isoformat()
        return d


def _row(r: Any) -> AuditRow:
    return AuditRow(**{name: getattr(r, name) for name in CSV_COLUMNS})


LIMITS = {"user": 200, "role": 16, "action": 100, "target": 500, "reason": 2000,
          "remote_addr": 64}
MAX_DETAIL_CHARS = 4000
EXPORT_BATCH = 500
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


class AuditUnwritable(SQLAlchemyError):
    """An audit entry could not be written (``cause``); ``unreachable``: because the database
    cannot be reached (else it refused the statement). The change it was for is not made. A
    store error like the others (callers catching ``SQLAlchemyError`` catch it)."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        self.unreachable = unreachable(cause)
        super().__init__("the database is unreachable" if self.unreachable
                         else f"the database refused the entry ({type(cause).__name__})")


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, a surrogate with no pair


def storable(value: Any, _depth: int = 0) -> Any:
    """``value`` as every database stores it: in text (keys too) a NUL or a lone surrogate
    becomes U+FFFD, a float that is not finite and anything JSON cannot hold become their
    text, nesting past 20 levels its text."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth < 20 and isinstance(value, dict):
        return {storable(str(k)): storable(v, _depth + 1) for k, v in value.items()}
    if _depth < 20 and isinstance(value, (list, tuple)):
        return [storable(v, _depth + 1) for v in value]
    return storable(str(value))


def _cut(value: str | None, limit: int) -> str | None:
    value = None if value is None else _UNSTORABLE.sub("\ufffd", value)
    if value is None or len(value) <= limit:
        return value
    return value[: limit - 1] + "…"


def _bounded_detail(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    if detail is None:
        return None
    detail = storable(detail)
    text = json.dumps(detail, ensure_ascii=False, default=str)
    if len(text) <= MAX_DETAIL_CHARS:
        return detail
    return {"truncated": text[:MAX_DETAIL_CHARS]}


def _csv_safe(value: str) -> str:
    """Neutralise spreadsheet formula injection (OWASP): a cell whose first character, or first
    character after leading blanks and control characters, is = + - @ TAB CR LF gets a leading
    apostrophe (U+FFFD, a stored NUL, counts as a control character). The export also quotes every cell, so a ``;`` or ``,`` inside a value never
    starts a new cell in a spreadsheet that splits on it. The JSON export keeps values
    verbatim."""
    # U+FFFD: what a stored NUL became (``storable``)
    first = value.lstrip("".join(chr(c) for c in range(0x21)) + "\x7f\u00a0\ufffd")[:1]
    if value[:1] in _FORMULA_START or first in _FORMULA_START:
        return "'" + value
    return value


def _csv_cells(row: AuditRow) -> list[Any]:
    d = row.to_dict()
    cells: list[Any] = []
    for k in CSV_COLUMNS:
        v = d[k]
        if k == "detail":
            v = None if v is None else json.dumps(v, sort_keys=True, ensure_ascii=False)
        cells.append("" if v is None else _csv_safe(v) if isinstance(v, str) else v)
    return cells


class AuditLog:
    def __init__(
        self, session_factory: sessionmaker[Session], clock: Callable[[], int] = system_ms
    ) -> None:
        self._sf = session_factory
        self.clock = clock

    def record(
        self,
        user: str,
        role: str | None,
        action: str,
        target: str | None,
        reason: str | None,
        outcome: str,
        detail: dict[str, Any] | None = None,
        remote_addr: str | None = None,
    ) -> int:
        """Append one entry (its own transaction, committed at once); returns its id. Raises
        ``AuditUnwritable`` when the database does not take it."""
        if outcome not in AUDIT_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(AUDIT_OUTCOMES)}, not {outcome!r}")
        try:
            return self._insert(user, role, action, target, reason, outcome, detail, remote_addr)
        except Exception as exc:  # whatever it was, no entry: say so
            raise AuditUnwritable(exc) from exc

    def start(self, user: str, role: str | None, action: str, target: str | None,
              reason: str | None, remote_addr: str | None = None) -> int:
        """The entry of a change about to run (outcome ``started``); its id for ``finish``.
        ``AuditUnwritable``: the change must not run."""
        return self.record(user, role, action, target, reason, "started", None, remote_addr)

    def finish(self, entry_id: int, outcome: str, detail: dict[str, Any] | None) -> None:
        """The outcome and figures of the change ``start`` recorded. ``AuditUnwritable``: the
        entry keeps saying ``started``."""
        if outcome not in AUDIT_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(AUDIT_OUTCOMES)}, not {outcome!r}")
        try:
            with self._sf() as s, s.begin():
                s.execute(_T.update().where(_C.id == entry_id).values(
                    outcome=outcome, detail=_bounded_detail(detail)))
        except Exception as exc:  # whatever it was, the outcome is not written
            raise AuditUnwritable(exc) from exc

    def _insert(self, user: str, role: str | None, action: str, target: str | None,
                reason: str | None, outcome: str, detail: dict[str, Any] | None,
                remote_addr: str | None) -> int:
        with self._sf() as s, s.begin():
            return int(
                s.execute(
                    _T.insert()
                    .values(
                        at=ms_to_datetime(self.clock()),
                        user=_cut(user, LIMITS["user"]) or "",
                        role=_cut(role, LIMITS["role"]),
                        action=_cut(action, LIMITS["action"]) or "",
                        target=_cut(target, LIMITS["target"]),
                        reason=_cut(reason, LIMITS["reason"]),
                        outcome=outcome,
                        detail=_bounded_detail(detail),
                        remote_addr=_cut(remote_addr, LIMITS["remote_addr"]),
                    )
                    .returning(_C.id)
                ).scalar_one()
            )

    def prune(self, before_ms: int, *, batch: int = 5000) -> int:
        """Delete entries older than ``before_ms`` in batches (never one long transaction);
        returns how many."""
        cutoff = ms_to_datetime(before_ms)
        total = 0
        while True:
            with self._sf() as s, s.begin():
                ids = s.execute(select(_C.id).where(_C.at < cutoff).order_by(_C.id)
                                .limit(batch)).scalars().all()
                if ids:
                    s.execute(_T.delete().where(_C.id.in_(ids)))
            total += len(ids)
            if len(ids) < batch:
                return total

    def _filtered(
        self, q: Select[*_Ts], action: str | None, user: str | None,
        since_ms: int | None = None, until_ms: int | None = None, target: str | None = None,
    ) -> Select[*_Ts]:
        if target is not None:  # e.g. '<queue>/<job id>': the entries of one job
            q = q.where(_C.target == target)
        if action is not None:
            q = q.where(_C.action == action)
        if user is not None:
            q = q.where(_C.user == user)
        if since_ms is not None:
            q = q.where(_C.at >= ms_to_datetime(since_ms))
        if until_ms is not None:
            q = q.where(_C.at < ms_to_datetime(until_ms))
        return q

    def list(
        self, limit: int = 100, offset: int = 0, action: str | None = None,
        user: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
        target: str | None = None,
    ) -> list[AuditRow]:
        """Newest first; ``since_ms`` inclusive, ``until_ms`` exclusive."""
        q = self._filtered(select(_T), action, user, since_ms, until_ms, target).order_by(
            _C.at.desc(), _C.id.desc())
        q = q.limit(max(0, int(limit))).offset(max(0, int(offset)))
        with self._sf() as s:
            return [_row(r) for r in s.execute(q)]

    def count(self, action: str | None = None, user: str | None = None,
              since_ms: int | None = None, until_ms: int | None = None,
              target: str | None = None) -> int:
        q = self._filtered(select(func.count()).select_from(_T), action, user, since_ms, until_ms,
                           target)
        with self._sf() as s:
            return int(s.execute(q).scalar_one())

    def actions(self) -> builtins.list[str]:
        """Distinct actions recorded (for a filter drop-down)."""
        with self._sf() as s:
            return list(s.execute(select(_C.action).distinct().order_by(_C.action)).scalars())

    def iter_rows(self, action: str | None = None, user: str | None = None,
                  since_ms: int | None = None, until_ms: int | None = None,
                  batch: int = EXPORT_BATCH, target: str | None = None) -> Iterator[AuditRow]:
        """All (matching) entries, oldest first, read ``batch`` rows at a time (keyset paging
        on the id, one short transaction per batch)."""
        after = 0
        while True:
            q = self._filtered(select(_T), action, user, since_ms, until_ms, target).where(
                _C.id > after).order_by(_C.id).limit(batch)
            with self._sf() as s:
                rows = [_row(r) for r in s.execute(q)]
            yield from rows
            if len(rows) < batch:
                return
            after = rows[-1].id

    def stream_csv(self, action: str | None = None, user: str | None = None,
                   since_ms: int | None = None, until_ms: int | None = None,
                   target: str | None = None) -> Iterator[str]:
        """All (matching) entries, oldest first, as CSV with a header row, every cell quoted;
        ``detail`` as JSON. Yields a chunk per row."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
        w.writerow(CSV_COLUMNS)
        for r in self.iter_rows(action, user, since_ms, until_ms, target=target):
            w.writerow(_csv_cells(r))
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
        yield buf.getvalue()

    def export_csv(self, action: str | None = None, user: str | None = None,
                   since_ms: int | None = None, until_ms: int | None = None,
                   target: str | None = None) -> str:
        """``stream_csv`` as one string."""
        return "".join(self.stream_csv(action, user, since_ms, until_ms, target))

    def export_json(
        self, action: str | None = None, user: str | None = None,
        since_ms: int | None = None, until_ms: int | None = None, target: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """All (matching) entries, oldest first, as JSON-ready dicts."""
        return [r.to_dict() for r in self.iter_rows(action, user, since_ms, until_ms,
                                                    target=target)]

    def stream_json(
        self, action: str | None = None, user: str | None = None,
        since_ms: int | None = None, until_ms: int | None = None, target: str | None = None,
    ) -> Iterator[str]:
        """All (matching) entries, oldest first, as the text of one JSON array (chunks)."""
        yield "["
        for i, r in enumerate(self.iter_rows(action, user, since_ms, until_ms, target=target)):
            yield ("," if i else "") + json.dumps(r.to_dict(), ensure_ascii=False)
        yield "]"
