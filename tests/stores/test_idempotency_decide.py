"""The at-most-once decision table of ``IdempotencyStore.begin``, as the pure ``decide()``:
every row of the table, without a database."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from antre.stores.idempotency import (ACQUIRED, BUSY, COMPLETED, FAILED, MISMATCH, TAKEN_OVER, Decision,
                               Record, decide)

NOW_MS = 1_700_000_000_000
FP = "fp-1"
T0 = datetime(2023, 11, 14, tzinfo=UTC)

OWNED = Record(key="k", status="processing", fingerprint=FP, job_type="t", job_id="job-a",
               result=None, last_error=None, fence=2, lock_fence=None, owner="w1",
               lease_deadline_ms=NOW_MS + 30_000, created_at=T0, updated_at=T0, expires_at=T0)

# (name, the row as read, the delivery's job_id and fence, the decision)
TABLE = [
    ("row gone: insert again", None, "job-a", 2, Decision(None)),
    ("other fingerprint", replace(OWNED, fingerprint="fp-2"), "job-b", 1, Decision(MISMATCH)),
    ("other fingerprint beats completed", replace(OWNED, fingerprint="fp-2", status="completed"),
     "job-b", 1, Decision(MISMATCH)),
    ("completed", replace(OWNED, status="completed"), "job-b", 1, Decision(COMPLETED)),
    ("completed, same job", replace(OWNED, status="completed"), "job-a", 3, Decision(COMPLETED)),
    ("failed", replace(OWNED, status="failed"), "job-b", 1, Decision(FAILED)),
    ("same delivery re-enters", OWNED, "job-a", 2, Decision(ACQUIRED, claim=True)),
    ("stale delivery of the same job", OWNED, "job-a", 1, Decision(BUSY)),
    ("newer delivery of the same job, owner still live", OWNED, "job-a", 3,
     Decision(TAKEN_OVER, claim=True)),
    ("newer delivery of the same job, row released", replace(OWNED, lease_deadline_ms=0),
     "job-a", 3, Decision(ACQUIRED, claim=True)),
    ("stale delivery, row released", replace(OWNED, lease_deadline_ms=0), "job-a", 1,
     Decision(BUSY)),
    ("another job, owner live", OWNED, "job-b", 1, Decision(BUSY)),
    ("another job, owner live, higher fence", OWNED, "job-b", 9, Decision(BUSY)),
    ("another job, owner's lease passed", replace(OWNED, lease_deadline_ms=NOW_MS - 1),
     "job-b", 1, Decision(TAKEN_OVER, claim=True)),
    ("another job, owner's lease ends now", replace(OWNED, lease_deadline_ms=NOW_MS),
     "job-b", 1, Decision(TAKEN_OVER, claim=True)),
    ("another job, row released by a retryable failure", replace(OWNED, lease_deadline_ms=0),
     "job-b", 1, Decision(ACQUIRED, claim=True)),
]


@pytest.mark.parametrize(("existing", "job_id", "fence", "expected"),
                         [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_decide(existing, job_id, fence, expected):
    assert decide(existing, FP, job_id, fence, NOW_MS) == expected
