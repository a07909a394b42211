"""The audit log: every change made from the dashboard, CLI or API - who, what, why, when, outcome."""

from __future__ import annotations

import builtins
import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVarTuple, cast

from sqlalchemy import Select, Table, func, select
from sqlalchemy.orm import Session, sessionmaker

from .clock import system_ms
from .sql import AUDIT_OUTCOMES, AuditEntry, ms_to_datetime

__all__ = ["CSV_COLUMNS", "AuditLog", "AuditRow"]

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


def _csv_safe(value: str) -> str:
    """Neutralise spreadsheet formula injection (OWASP): a cell starting with = + - @ TAB CR
    gets a leading apostrophe. The JSON export keeps values verbatim."""
    if value and value[0] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


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
        """Append one entry (its own transaction, committed at once); returns its id."""
        if outcome not in AUDIT_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(AUDIT_OUTCOMES)}, not {outcome!r}")
        with self._sf() as s, s.begin():
            return int(
                s.execute(
                    _T.insert()
                    .values(
                        at=ms_to_datetime(self.clock()),
                        user=user,
                        role=role,
                        action=action,
                        target=target,
                        reason=reason,
                        outcome=outcome,
                        detail=detail,
                        remote_addr=remote_addr,
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
        since_ms: int | None = None, until_ms: int | None = None,
    ) -> Select[*_Ts]:
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
    ) -> list[AuditRow]:
        """Newest first; ``since_ms`` inclusive, ``until_ms`` exclusive."""
        q = self._filtered(select(_T), action, user, since_ms, until_ms).order_by(
            _C.at.desc(), _C.id.desc())
        q = q.limit(max(0, int(limit))).offset(max(0, int(offset)))
        with self._sf() as s:
            return [_row(r) for r in s.execute(q)]

    def count(self, action: str | None = None, user: str | None = None,
              since_ms: int | None = None, until_ms: int | None = None) -> int:
        q = self._filtered(select(func.count()).select_from(_T), action, user, since_ms, until_ms)
        with self._sf() as s:
            return int(s.execute(q).scalar_one())

    def actions(self) -> builtins.list[str]:
        """Distinct actions recorded (for a filter drop-down)."""
        with self._sf() as s:
            return list(s.execute(select(_C.action).distinct().order_by(_C.action)).scalars())

    def _all(self, action: str | None, user: str | None, since_ms: int | None = None,
             until_ms: int | None = None) -> builtins.list[AuditRow]:
        q = self._filtered(select(_T), action, user, since_ms, until_ms).order_by(_C.id)
        with self._sf() as s:
            return [_row(r) for r in s.execute(q)]

    def export_csv(self, action: str | None = None, user: str | None = None,
                   since_ms: int | None = None, until_ms: int | None = None) -> str:
        """All (matching) entries, oldest first, as CSV with a header row; ``detail`` as JSON."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for r in self._all(action, user, since_ms, until_ms):
            d = r.to_dict()
            cells = []
            for k in CSV_COLUMNS:
                v = d[k]
                if k == "detail":
                    cells.append(
                        "" if v is None else json.dumps(v, sort_keys=True, ensure_ascii=False)
                    )
                elif v is None:
                    cells.append("")
                elif isinstance(v, str):
                    cells.append(_csv_safe(v))
                else:
                    cells.append(v)
            w.writerow(cells)
        return buf.getvalue()

    def export_json(
        self, action: str | None = None, user: str | None = None,
        since_ms: int | None = None, until_ms: int | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """All (matching) entries, oldest first, as JSON-ready dicts."""
        return [r.to_dict() for r in self._all(action, user, since_ms, until_ms)]
