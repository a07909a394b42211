"""Log records carry the job fields; one switch between JSON and readable text."""

from __future__ import annotations

import io
import json
import logging

import pytest

from antre import Antre, Retryable, logs
from antre.clock import ManualClock
from antre.envelope import Job
from antre_worker.executor import WorkerProcess


@pytest.fixture
def job():
    return Job(id="j1", type="send_email", queue="mail", idempotency_key="email:welcome:42",
               payload={}, attempt=1, lock_key="user:42",
               trace_id="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


@pytest.fixture
def restore():
    log = logging.getLogger("antre")
    saved = (log.handlers[:], log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


def test_json_record_carries_the_job_fields(job, restore):
    out = io.StringIO()
    logs.configure("json", "DEBUG", stream=out)
    logging.getLogger("antre.worker").info(
        "succeeded job %s", job.id,
        extra=logs.job_fields(job, "succeeded", duration_ms=120, error_kind="", worker_id="w1"))
    rec = json.loads(out.getvalue())
    assert rec["level"] == "INFO" and rec["logger"] == "antre.worker"
    assert rec["message"] == "succeeded job j1" and rec["event"] == "succeeded"
    assert rec["ts"].endswith("Z")
    assert {k: rec[k] for k in ("job_id", "job_type", "idempotency_key", "attempt", "lock_key",
                                "trace_id", "duration_ms", "queue", "worker_id")} == {
        "job_id": "j1", "job_type": "send_email", "idempotency_key": "email:welcome:42",
        "attempt": 2, "lock_key": "user:42", "trace_id": job.trace_id, "duration_ms": 120,
        "queue": "mail", "worker_id": "w1"}
    assert "error_kind" not in rec  # empty fields are left out


def test_json_record_with_error_and_other_extra(job, restore):
    out = io.StringIO()
    logs.configure("json", stream=out)
    try:
        raise RuntimeError("smtp down")
    except RuntimeError:
        logging.getLogger("antre.worker").exception(
            "retrying", extra=logs.job_fields(job, "retried", error_kind="retryable", delay_ms=5))
    rec = json.loads(out.getvalue())
    assert rec["error_kind"] == "retryable" and rec["delay_ms"] == 5
    assert rec["level"] == "ERROR" and "RuntimeError: smtp down" in rec["exc"]


def test_plain_records_get_a_default_event(restore):
    out = io.StringIO()
    logs.configure("json", stream=out)
    logging.getLogger("antre.webapp").warning("hello %s", "there")
    rec = json.loads(out.getvalue())
    assert (rec["message"], rec["event"]) == ("hello there", "log")


def test_text_format_is_readable(job, restore, monkeypatch):
    monkeypatch.setenv("ANTRE_LOG_FORMAT", "text")
    out = io.StringIO()
    logs.configure(stream=out)
    logging.getLogger("antre.worker").info("started job %s", job.id,
                                           extra=logs.job_fields(job, "started"))
    line = out.getvalue().strip()
    assert "INFO" in line and "started job j1" in line and "[started]" in line
    assert "job_type=send_email" in line and "attempt=2" in line
    assert not line.startswith("{")


def test_level_and_bad_format(restore):
    out = io.StringIO()
    logs.configure("json", "WARNING", stream=out)
    logging.getLogger("antre.x").info("hidden")
    assert out.getvalue() == ""
    with pytest.raises(ValueError):
        logs.configure("xml")


def test_safe_url_hides_the_password():
    assert logs.safe_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert logs.safe_url("redis://host:6379/0") == "redis://host:6379/0"


def _record(created: float, **extra):
    record = logging.LogRecord("antre.worker", logging.INFO, __file__, 1, "msg %s", ("é",), None)
    record.created, record.msecs = created, int((created - int(created)) * 1000)
    record.__dict__.update(extra)
    return record


def test_json_timestamps_follow_the_record_across_seconds():
    from datetime import UTC, datetime
    fmt = logs.JsonFormatter()
    for created in (1_764_489_599.998, 1_764_489_600.001, 1_764_489_600.5, 1_764_489_661.25):
        rec = json.loads(fmt.format(_record(created)))
        expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
        assert rec["ts"] == expected.replace("+00:00", "Z")


def test_text_timestamps_are_local_time_with_milliseconds():
    from datetime import datetime
    fmt = logs.TextFormatter()
    for created in (1_764_489_599.998, 1_764_489_600.25):
        line = fmt.format(_record(created))
        assert line.startswith(datetime.fromtimestamp(created).strftime("%H:%M:%S.%f")[:-3] + " ")


def test_json_line_keeps_any_extra_in_order_even_what_the_fast_encoder_refuses():
    fmt = logs.JsonFormatter()
    rec = json.loads(fmt.format(_record(1_764_489_600.0, event="finished", job_id="j1",
                                        outcome="ack", big=2**70, empty="", when=object())))
    assert list(rec)[:6] == ["ts", "level", "logger", "message", "event", "job_id"]
    assert rec["big"] == 2**70 and rec["outcome"] == "ack" and "empty" not in rec
    assert rec["message"] == "msg é" and rec["when"].startswith("<object")
    assert list(rec)[-1] == "pid"


SEED_FIELDS = ("job_id", "job_type", "idempotency_key", "attempt", "lock_key", "trace_id",
               "duration_ms")


def _run_two_jobs(redis_url: str, level: str) -> tuple[dict[str, list[dict]], str, str]:
    """One job that succeeds and one that fails (retryable), run by a real worker with the
    ``antre`` logger at ``level``; the JSON lines of each job."""
    out = io.StringIO()
    logs.configure("json", level, stream=out)
    app = Antre(redis_url=redis_url, clock=ManualClock(1_700_000_000_000))

    @app.handler("send_email")
    def send_email(ctx, payload):
        return "sent"

    @app.handler("flaky")
    def flaky(ctx, payload):
        raise Retryable("smtp down")

    ok = app.enqueue("send_email", {"to": 42}, idempotency_key="email:welcome:42",
                     lock_key="user:42")
    bad = app.enqueue("flaky", {}, idempotency_key="flaky:1")
    WorkerProcess(app, queues=["default"], worker_id="w1", heartbeat_s=60).run_burst()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return {j: [x for x in lines if x.get("job_id") == j] for j in (ok, bad)}, ok, bad


def test_one_processed_job_is_one_line_at_info(redis_url, restore):
    per_job, ok, bad = _run_two_jobs(redis_url, "INFO")
    (done,) = per_job[ok]  # not received + started + finished: one line per outcome
    assert (done["event"], done["level"], done["message"]) == ("succeeded", "INFO",
                                                                f"succeeded job {ok}")
    assert {k: done[k] for k in SEED_FIELDS[:5]} == {
        "job_id": ok, "job_type": "send_email", "idempotency_key": "email:welcome:42",
        "attempt": 1, "lock_key": "user:42"}
    assert done["trace_id"].startswith("00-") and done["duration_ms"] >= 0
    (retried,) = per_job[bad]
    assert (retried["event"], retried["level"]) == ("retried", "WARNING")
    assert set(SEED_FIELDS) - {"lock_key"} <= set(retried) and retried["error_kind"]


def test_received_and_started_are_debug_lines(redis_url, restore):
    per_job, ok, _ = _run_two_jobs(redis_url, "DEBUG")
    events = [(x["event"], x["level"]) for x in per_job[ok] if x["event"] != "lease_extended"]
    assert events == [("received", "DEBUG"), ("started", "DEBUG"), ("succeeded", "INFO")]
