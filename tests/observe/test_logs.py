"""Log records carry the job fields; one switch between JSON and readable text."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import re
import select
import sys
import threading
import time
import traceback
import weakref

import pytest

from antre import Antre, Retryable
from antre.observe import logs
from antre.clock import ManualClock
from antre.engine.envelope import Job
from antre_worker.runner import WorkerProcess


@pytest.fixture
def job():
    return Job(id="j1", type="send_email", queue="mail", idempotency_key="email:welcome:42",
               payload={}, attempt=1, lock_key="user:42",
               trace_id="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def test_json_record_carries_the_job_fields(job, antre_logging):
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


def test_json_record_with_error_and_other_extra(job, antre_logging):
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


def test_plain_records_get_a_default_event(antre_logging):
    out = io.StringIO()
    logs.configure("json", stream=out)
    logging.getLogger("antre.webapp").warning("hello %s", "there")
    rec = json.loads(out.getvalue())
    assert (rec["message"], rec["event"]) == ("hello there", "log")


def test_text_format_is_readable(job, antre_logging, monkeypatch):
    monkeypatch.setenv("ANTRE_LOG_FORMAT", "text")
    out = io.StringIO()
    logs.configure(stream=out)
    logging.getLogger("antre.worker").info("started job %s", job.id,
                                           extra=logs.job_fields(job, "started"))
    line = out.getvalue().strip()
    assert "INFO" in line and "started job j1" in line and "[started]" in line
    assert "job_type=send_email" in line and "attempt=2" in line
    assert not line.startswith("{")


def test_level_and_bad_format(antre_logging):
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


def test_one_processed_job_is_one_line_at_info(redis_url, antre_logging):
    per_job, ok, bad = _run_two_jobs(redis_url, "INFO")
    (done,) = per_job[ok]  # not received + started + finished: one line per outcome
    assert (done["event"], done["level"], done["message"]) == ("succeeded", "INFO",
                                                                f"succeeded job {ok}")
    assert {k: done[k] for k in SEED_FIELDS[:5]} == {
        "job_id": ok, "job_type": "send_email", "idempotency_key": "email:welcome:42",
        "attempt": 1, "lock_key": "user:42"}
    assert done["trace_id"].startswith("00-") and done["duration_ms"] >= 0
    assert done["lock_fence"] == 1  # the fencing token of the lock it ran under
    (retried,) = per_job[bad]
    assert (retried["event"], retried["level"]) == ("retried", "WARNING")
    assert set(SEED_FIELDS) - {"lock_key"} <= set(retried) and retried["error_kind"]


def test_received_and_started_are_debug_lines(redis_url, antre_logging):
    per_job, ok, _ = _run_two_jobs(redis_url, "DEBUG")
    events = [(x["event"], x["level"]) for x in per_job[ok] if x["event"] != "lease_extended"]
    assert events == [("received", "DEBUG"), ("started", "DEBUG"), ("succeeded", "INFO")]


# -- buffered writes (one write system call per line cost more than the line) ------------------
class _Writes(io.StringIO):
    """A stream that keeps each write apart and tells when one came."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.came = threading.Event()

    def write(self, text: str) -> int:
        self.writes.append(text)
        self.came.set()
        return super().write(text)


def test_info_lines_wait_and_a_warning_writes_them_first_in_one_go(antre_logging):
    out = _Writes()
    logs.configure("json", "INFO", stream=out, flush_ms=60_000)
    log = logging.getLogger("antre.worker")
    for i in range(3):
        log.info("job %d", i)
    assert out.writes == []
    log.warning("trouble")
    assert len(out.writes) == 1
    assert [json.loads(x)["message"] for x in out.getvalue().splitlines()] == [
        "job 0", "job 1", "job 2", "trouble"]


def test_the_flusher_writes_waiting_lines_without_a_warning(antre_logging):
    out = _Writes()
    logs.configure("json", "INFO", stream=out, flush_ms=5)
    logging.getLogger("antre.worker").info("quiet")
    assert out.came.wait(10)
    assert json.loads(out.getvalue())["message"] == "quiet"


def test_a_full_buffer_is_written_in_pipe_sized_writes_of_whole_lines(antre_logging):
    out = _Writes()
    handler = logs.configure("json", "INFO", stream=out, flush_ms=60_000)
    log = logging.getLogger("antre.worker")
    n = 0
    while not out.writes:
        log.info("line %d %s", n, "x" * 300)
        n += 1
    assert sum(len(w) for w in out.writes) >= logs.BUFFER_BYTES
    assert all(len(w) <= logs.PIPE_BUF and w.endswith("\n") for w in out.writes)
    handler.flush()
    assert [json.loads(x)["message"][:8] for x in out.getvalue().splitlines()] == [
        f"line {i} x"[:8] for i in range(n)]


def test_shutdown_and_reconfiguring_write_what_waits(antre_logging):
    out = _Writes()
    logs.configure("json", "INFO", stream=out, flush_ms=60_000)
    logging.getLogger("antre.worker").info("before the switch")
    logs.configure("json", "INFO", stream=io.StringIO(), flush_ms=60_000)
    assert json.loads(out.getvalue())["message"] == "before the switch"
    out2 = _Writes()
    handler = logs.configure("json", "INFO", stream=out2, flush_ms=60_000)
    logging.getLogger("antre.worker").info("at exit")
    logging.shutdown([weakref.ref(handler)])  # what the interpreter runs at a normal exit
    assert json.loads(out2.getvalue())["message"] == "at exit"
    handler.close()  # closing twice (the interpreter's own shutdown comes after) is harmless


def test_default_stream_is_stderr_at_each_write_never_a_closed_one(antre_logging, monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    monkeypatch.delenv("ANTRE_LOG_FLUSH_MS", raising=False)
    handler = logs.configure("json", "INFO")
    assert isinstance(handler, logs.BufferedHandler) and handler.interval_s == 0.2
    logging.getLogger("antre.worker").warning("one")
    first.close()  # e.g. a test's captured stderr, gone after the test
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("antre.worker").warning("two")
    assert json.loads(second.getvalue())["message"] == "two"


def test_flush_ms_zero_writes_each_line_at_once(antre_logging, monkeypatch):
    monkeypatch.setenv("ANTRE_LOG_FLUSH_MS", "0")
    out = _Writes()
    monkeypatch.setattr(sys, "stderr", out)
    logs.configure("json", "INFO")
    logging.getLogger("antre.worker").info("a")
    logging.getLogger("antre.worker").info("b")
    assert len(out.writes) == 2


def test_a_job_line_made_without_a_record_is_the_formatters_line(job, antre_logging):
    out = _Writes()
    logs.configure("json", "INFO", stream=out)
    log = logging.getLogger("antre.worker")
    extra = logs.job_fields(job, "succeeded", duration_ms=3, error_kind="", delay_ms=5,
                            big=2**70, _private=1, nothing=None)
    logs.job_line(log, logging.INFO, "%s job %s%s", ("succeeded", job.id, ""), extra)
    log.info("%s job %s%s", "succeeded", job.id, "", extra=extra)
    fast, slow = (json.loads(line) for line in out.getvalue().splitlines())
    assert fast["ts"][:16] == slow["ts"][:16]
    fast.pop("ts"), slow.pop("ts")
    assert list(fast.items()) == list(slow.items())  # the same fields in the same order
    assert fast["message"] == "succeeded job j1" and fast["big"] == 2**70


@pytest.mark.parametrize("changes", [
    {},  # the common job: names, a lock, a traceparent
    {"lock_key": "", "trace_id": ""},  # empty fields are left out
    {"id": "", "type": "", "idempotency_key": "", "queue": ""},
    {"attempt": 0},
    {"idempotency_key": 'say "hi"\\ now', "lock_key": "é\n"},  # needs escaping: formatter
    {"type": "x\u2028y"},
    {"attempt": True},  # not an int: the formatter decides how it prints
])
@pytest.mark.parametrize("duration", [0, 1234, None])
@pytest.mark.parametrize("fence", [None, 7])
def test_a_succeeded_line_is_the_job_line_of_the_same_job(job, antre_logging, changes, duration,
                                                          fence):
    out = _Writes()
    logs.configure("json", "INFO", stream=out)
    log = logging.getLogger("antre.worker")
    j = dataclasses.replace(job, **changes)
    logs.succeeded_line(log, j, duration, fence)
    logs.job_line(log, logging.INFO, "%s job %s%s", ("succeeded", j.id, ""),
                  logs.job_fields(j, "succeeded", duration_ms=duration, error_kind="",
                                  lock_fence=fence))
    logging.getLogger("antre").handlers[0].flush()
    fast, slow = out.getvalue().rstrip("\n").split("\n")  # (U+2028 is no line end here)
    stamp = re.compile(r'\{"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",')
    assert stamp.match(fast) and stamp.match(slow)
    fast_rec, slow_rec = json.loads(fast), json.loads(slow)
    fast_rec.pop("ts"), slow_rec.pop("ts")
    assert fast[fast.index('"level"'):] == slow[slow.index('"level"'):]  # byte for byte
    assert list(fast_rec) == list(slow_rec) and fast_rec["event"] == "succeeded"
    assert fast_rec.get("lock_fence") == fence


def test_a_job_line_goes_through_filters_and_other_handlers(job, antre_logging):
    out = _Writes()
    logs.configure("json", "INFO", stream=out)
    log = logging.getLogger("antre.worker")
    seen = []
    log.addFilter(lambda record: seen.append(record.getMessage()) or False)  # drops them all
    try:
        logs.job_line(log, logging.INFO, "job %s", (job.id,), logs.job_fields(job, "x"))
    finally:
        log.filters.clear()
    assert seen == ["job j1"] and out.getvalue() == ""


# -- fork: a buffered line is written once, by the process that logged it ----------------------
def _in_child(body) -> tuple[int, int]:
    """Runs ``body`` in a forked child (which always ends with ``os._exit``: never back into
    pytest); returns the child's pid and exit code (0: ``body`` returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return pid, os.waitstatus_to_exitcode(status)


@pytest.fixture
def piped():
    """A BufferedHandler (JSON, flushed only when told: a 60 s interval) writing to a pipe, on
    a logger of its own; ``read()`` gives the lines written, as (message, pid) pairs, once
    every writer is done."""
    r, w = os.pipe()
    stream = os.fdopen(w, "w")
    handler = logs.BufferedHandler(stream, interval_s=60)
    handler.setFormatter(logs.JsonFormatter())
    log = logging.Logger("fork-test")  # not in the logging tree: nothing else sees it
    log.addHandler(handler)

    def written() -> bool:
        return bool(select.select([r], [], [], 0)[0])

    def read() -> list[tuple[str, int]]:
        handler.close()
        stream.close()
        with os.fdopen(r, "rb") as f:
            return [(x["message"], x["pid"]) for x in map(json.loads, f.read().splitlines())]

    try:
        yield log, handler, written, read
    finally:
        handler.close()
        if not stream.closed:
            stream.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_writes_only_its_own_lines_and_the_parent_its_own_once(piped):
    log, handler, written, read = piped
    log.info("parent, before the fork")
    assert not written()  # buffered

    def child() -> None:
        log.info("child")
        formatter = handler.formatter
        line = formatter.line(time.time(), logging.INFO, "fork-test", "child, job line", {})
        handler.acquire()
        try:
            handler.add_line(line, logging.INFO)  # the job_line path: the kept pid
        finally:
            handler.release()
        handler.flush()

    child_pid, code = _in_child(child)
    assert code == 0
    log.info("parent, after the fork")
    handler.flush()
    me = os.getpid()
    assert read() == [("child", child_pid), ("child, job line", child_pid),
                      ("parent, before the fork", me), ("parent, after the fork", me)]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_that_logs_nothing_does_not_write_the_parents_lines_at_exit(piped):
    log, handler, written, read = piped
    log.info("parent, before the fork")
    # the child's normal exit runs logging.shutdown: flush() and close() of every handler
    _, code = _in_child(handler.close)
    assert code == 0 and not written()
    log.info("parent, after the fork")
    assert read() == [("parent, before the fork", os.getpid()),
                      ("parent, after the fork", os.getpid())]


def test_apscheduler_lines_come_out_as_json_at_warning_only(antre_logging):
    """A pool's APScheduler lines went to stderr as plain text (and its INFO lines too when the
    app configured the root logger): they go through Antre's handler, in its format, WARNING+."""
    out = io.StringIO()
    logs.configure("json", stream=out)
    sched = logging.getLogger("apscheduler.scheduler")
    sched.info("Running job \"sweeper\" (scheduled at 2026-12-01)")
    sched.warning("Execution of job \"sweeper\" skipped: maximum number of running instances")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["level"], x["logger"]) for x in lines] == [("WARNING", "apscheduler.scheduler")]
    assert "skipped" in lines[0]["message"]
