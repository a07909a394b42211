"""An idempotency record stuck in ``processing`` after Redis lost its data (its owner's lease
expired, no job with its key anywhere): ``app.result`` says "abandoned since ..." instead of
"pending" for ever, and an operator resolves it (``antre.control.abandoned``) — real Redis
(FLUSHALL is the data loss), real SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest
from helpers import burst

from antre import Antre
from antre.control.abandoned import AbandonedRecords, ResolveError


@pytest.fixture
def dbapp(redis_url, clock, db_url):
    return Antre(redis_url=redis_url, database_url=db_url, clock=clock)


def stuck(app: Antre, key: str = "order:9"):
    """A delivery began its effect (the record is ``processing`` under its lease), then Redis
    lost everything: the job is in no list, the record stays."""
    app.enqueue("charge", {"order": 9}, idempotency_key=key)
    (job,) = app.queue().reserve("w1")
    assert app.idempotency.begin(key, "fp", "charge", job.id, job.epoch, "w1",
                                 job.deadline).should_run
    app.redis.flushall()
    return job


def resolver(app: Antre) -> AbandonedRecords:
    return AbandonedRecords(app.finder, app.idempotency)


@pytest.mark.parametrize("db_url", ["sqlite", "pg"], indirect=True)
def test_a_stuck_record_is_reported_abandoned_once_its_lease_expired(dbapp, clock):
    job = stuck(dbapp)
    assert dbapp.result("order:9").status == "pending"  # its owner may still be running it
    clock.advance(job.deadline - clock() + 1)
    answer = dbapp.result("order:9")
    assert (answer.status, answer.job_id, answer.abandoned_since_ms) == (
        "abandoned", job.id, job.deadline)
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(job.deadline / 1000))
    assert answer.error.startswith(f"abandoned since {at}: the owner lease of job {job.id}")
    assert "Resend the job" in answer.error


def test_a_record_whose_job_still_exists_is_not_abandoned(redis_url, clock, sqlite_url):
    """Past its lease but the job is still in flight: the sweeper brings it back; pending."""
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    app.enqueue("charge", {}, idempotency_key="order:1")
    (job,) = app.queue().reserve("w1")
    app.idempotency.begin("order:1", "fp", "charge", job.id, job.epoch, "w1", job.deadline)
    clock.advance(job.deadline - clock() + 1)
    assert app.result("order:1").status == "pending"
    with pytest.raises(ResolveError, match="not abandoned"):
        resolver(app).resolve("order:1", "failed", by="alice")


@pytest.mark.parametrize("db_url", ["sqlite", "pg"], indirect=True)
def test_marking_it_failed_is_what_result_answers_then(dbapp, clock):
    job = stuck(dbapp)
    with pytest.raises(ResolveError, match="not abandoned"):  # its lease still runs
        resolver(dbapp).resolve("order:9", "failed", by="alice")
    clock.advance(job.deadline - clock() + 1)
    with pytest.raises(ResolveError, match="one of failed, reset"):
        resolver(dbapp).resolve("order:9", "gone", by="alice")
    resolver(dbapp).resolve("order:9", "failed", by="alice", reason="card was never charged")
    answer = dbapp.result("order:9")
    assert answer.status == "failed"
    assert answer.error.endswith("marked failed by alice: card was never charged")
    with pytest.raises(ResolveError):
        resolver(dbapp).resolve("order:9", "reset", by="alice")


def test_reset_forgets_it_and_a_resend_runs_afresh(redis_url, clock, sqlite_url):
    app = Antre(redis_url=redis_url, database_url=sqlite_url, clock=clock)
    runs = []

    @app.handler("charge")
    def charge(ctx, payload):
        runs.append(ctx.job.id)
        return "charged"

    job = stuck(app)
    clock.advance(job.deadline - clock() + 1)
    resolver(app).resolve("order:9", "reset", by="alice")
    assert app.idempotency.lookup("order:9") is None
    assert app.result("order:9").status == "unknown"
    again = app.enqueue("charge", {"order": 9}, idempotency_key="order:9")
    burst(app, clock)
    assert runs == [again] and app.result("order:9").status == "completed"
