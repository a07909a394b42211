"""Worker processes under kill -9, SIGTERM, poison jobs and a Redis restart (real subprocesses,
real Redis; the lease clock is advanced in the test process, never slept for)."""

from __future__ import annotations

import os
import signal
import time

import helpers
import pytest
import redis
from helpers import spawn

from antre import Antre
from antre.clock import ManualClock, system_ms
from antre.engine.queue import Queue
from antre.observe.registry import WorkerRegistry

APP = "tests.apps.basic:app"


def child(redis_url, tmp_path, *extra):
    return spawn(redis_url, ["antre_worker.child", APP, "--threads", "1", "--heartbeat", "0.2",
                             *extra], tmp_path / "worker.log")


def wait_for(cond, timeout=60.0, what="condition"):
    """``helpers.wait_for`` for real processes: a longer bound, a slower poll, and a Redis
    connection error (a restart) counts as not yet."""
    return helpers.wait_for(cond, timeout, what, poll_s=0.02, ignore=(redis.ConnectionError,))


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def later(ms: int) -> Queue:
    """The queue as a sweeper sees it ``ms`` from now (an injected clock, no sleeping)."""
    return Queue(redis.Redis.from_url(os.environ["_T_URL"], decode_responses=True), "default",
                 clock=ManualClock(system_ms() + ms))


@pytest.fixture
def app(redis_url, monkeypatch):
    monkeypatch.setenv("_T_URL", redis_url)
    return Antre(redis_url=redis_url)


def test_sigkill_mid_job_redelivers_after_the_lease_and_completes(app, r, tmp_path, procs):
    q = app.queue()
    job_id = q.enqueue("hang_first", {}, idempotency_key="hf:1", visibility_timeout_s=30)
    p = child(app.redis_url, tmp_path)
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, what="handler started")
    p.kill()
    p.wait(10)
    assert q.get(job_id).state == "inflight"
    assert later(29_000).sweep().requeued == 0  # the lease still holds
    assert later(31_000).sweep().requeued == 1
    assert q.where(job_id) == ["ready"]
    p2 = child(app.redis_url, tmp_path, "--burst")
    procs.append(p2)
    assert p2.wait(20) == 0
    job = q.get(job_id)
    assert (job.state, job.deliveries, job.attempt) == ("done", 2, 0)
    assert job.result == {"deliveries": 2}
    assert r.llen("test:done") == 1


@pytest.mark.slow
def test_poison_job_that_kills_its_worker_ends_in_the_dlq(app, r, tmp_path, procs):
    q = app.queue()
    job_id = q.enqueue("suicide", {}, idempotency_key="p:1", max_deliveries=3,
                       visibility_timeout_s=30)
    sup = spawn(app.redis_url, ["antre_worker", "worker", APP, "--processes", "1", "--threads", "1",
                                "--no-scheduler", "--grace", "1"], tmp_path / "pool.log")
    procs.append(sup)
    for delivery in (1, 2, 3):
        wait_for(lambda n=delivery: r.llen("test:started") == n, 20, f"delivery {delivery}")
        pid = int(r.lindex("test:started", -1).rsplit(":", 1)[1])
        wait_for(lambda p=pid: gone(p), what="the worker to die")
        res = later(31_000).sweep()
        assert (res.requeued, res.buried) == ((1, 0) if delivery < 3 else (0, 1))
    job = q.get(job_id)
    assert job.state == "dead" and q.where(job_id) == ["dead"]
    assert job.reason.startswith("delivered 3 times and never finished")
    assert "poison" in job.reason
    registry = WorkerRegistry(app.redis)
    wait_for(lambda: any(w.kind == "supervisor" and w.restarts >= 3 for w in registry.list()),
             what="the supervisor to count restarts")
    assert registry.restart_counts()[("killed", "")] >= 3  # by cause: no handler named
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(15) == 0


def test_sigterm_mid_job_hands_back_without_spending_an_attempt(app, r, tmp_path, procs):
    q = app.queue()
    job_id = q.enqueue("slow", {"seconds": 30}, idempotency_key="s:1")
    p = child(app.redis_url, tmp_path, "--grace", "0.5")
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, what="handler started")
    assert q.get(job_id).deliveries == 1
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    job = q.get(job_id)
    assert (job.state, job.attempt, job.deliveries) == ("ready", 0, 0)
    assert q.where(job_id) == ["ready"]
    assert q.stats()["handed_back"] == 1
    assert r.llen("test:done") == 0


def test_sigterm_lets_a_short_job_finish(app, r, tmp_path, procs):
    q = app.queue()
    job_id = q.enqueue("slow", {"seconds": 0.5}, idempotency_key="s:2")
    p = child(app.redis_url, tmp_path, "--grace", "10")
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, what="handler started")
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    assert q.get(job_id).state == "done"


def test_worker_survives_a_redis_restart(app, redis_server, tmp_path, procs):
    q = app.queue()
    q.enqueue("echo", {"n": 1}, idempotency_key="e:1")
    p = child(app.redis_url, tmp_path)
    procs.append(p)
    wait_for(lambda: app.redis.llen("test:done") == 1, what="first job")
    log_path = tmp_path / "worker.log"
    redis_server.stop()  # no AOF: the data is gone; the worker must reconnect by itself
    wait_for(lambda: "redis unreachable at" in log_path.read_text(), what="the outage line")
    time.sleep(0.5)  # an outage of a while: the worker backs off, stays alive, logs once
    redis_server.start()
    fresh = Antre(redis_url=app.redis_url).queue()
    job_id = fresh.enqueue("echo", {"n": 2}, idempotency_key="e:2")
    wait_for(lambda: fresh.get(job_id).state == "done", 15, "job after restart")
    assert p.poll() is None
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    log = log_path.read_text()
    assert log.count("redis unreachable at") == 1
    assert log.count("redis reachable again") == 1


def test_burst_pool_processes_everything_and_exits(app, r, tmp_path, procs):
    q = app.queue()
    ids = [q.enqueue("echo", {"n": n}, idempotency_key=f"b:{n}") for n in range(30)]
    sup = spawn(app.redis_url, ["antre_worker", "worker", APP, "--processes", "2", "--threads", "2",
                                "--burst"], tmp_path / "pool.log")
    procs.append(sup)
    assert sup.wait(30) == 0
    assert all(q.where(i) == ["done"] for i in ids)
    assert r.llen("test:done") == 30


@pytest.mark.slow
def test_a_hung_handler_is_timed_out_at_each_attempt_and_its_process_retired(app, r, tmp_path,
                                                                             procs):
    q = app.queue()
    job_id = q.enqueue("hang_forever", {}, idempotency_key="hang:1", timeout_s=0.5,
                       max_attempts=2)
    sup = spawn(app.redis_url, ["antre_worker", "worker", APP, "--processes", "1", "--threads", "1",
                                "--no-scheduler", "--grace", "1"], tmp_path / "pool.log")
    procs.append(sup)
    wait_for(lambda: q.get(job_id).state == "dead", 20, "the job to die of timeouts")
    job = q.get(job_id)
    assert job.error_kind == "timeout" and job.attempt == 2
    assert job.reason.startswith("attempts exhausted (2/2)") and "JobTimeout" in job.reason
    assert "hard timeout after" in job.reason and "did not return to Python" in job.reason
    assert r.llen("test:started") == 2
    log = tmp_path / "pool.log"
    wait_for(lambda: log.read_text().count("code 3 (retired: a handler it could not stop)") == 2,
             what="the supervisor to restart both retired processes")
    assert WorkerRegistry(r).restart_counts() == {("hard_timeout", "hang_forever"): 2}
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(15) == 0


def _pool(app, tmp_path, threads: int = 2):
    return spawn(app.redis_url, ["antre_worker", "worker", APP, "--processes", "1",
                                 "--threads", str(threads), "--prefetch", "1", "--no-scheduler",
                                 "--grace", "1"], tmp_path / "pool.log")


def _marks(r, what: str, job_id: str) -> list[tuple[int, int]]:
    """(delivery, pid) of each ``test:<what>`` mark of ``job_id`` (tests/apps/basic.py)."""
    return [(int(d), int(p)) for i, d, p in (m.split(":") for m in r.lrange(f"test:{what}", 0, -1))
            if i == job_id]


@pytest.mark.slow
def test_a_hung_handler_is_interrupted_while_its_sibling_completes_once_in_the_same_process(
        app, r, tmp_path, procs):
    q = app.queue()
    sibling = q.enqueue("until_flag", {}, idempotency_key="sib:1")
    hung = q.enqueue("spin_forever", {}, idempotency_key="spin:1", timeout_s=0.5,
                     max_attempts=1)
    sup = _pool(app, tmp_path)
    procs.append(sup)
    wait_for(lambda: q.get(hung).state == "dead", 20, "the hung job to be timed out")
    job = q.get(hung)
    assert job.error_kind == "timeout" and "the handler was interrupted" in job.reason
    assert "hard timeout after" in job.reason and "JobTimeout" in job.reason
    assert q.get(sibling).state == "inflight"  # still running: nothing stopped it
    r.set("test:flag", "1")
    wait_for(lambda: q.get(sibling).state == "done", 20, "the sibling to complete")
    (_, pid), = _marks(r, "started", hung)
    assert _marks(r, "started", sibling) == _marks(r, "done", sibling) == [(1, pid)]
    assert q.get(sibling).deliveries == 1 and q.get(sibling).result == "finished"
    later = q.enqueue("echo", {"n": 1}, idempotency_key="e:1")
    wait_for(lambda: q.get(later).state == "done", 20, "the same process to run the next job")
    assert _marks(r, "done", later) == [(1, pid)]  # never restarted
    assert "worker_restart" not in (tmp_path / "pool.log").read_text()
    assert WorkerRegistry(r).restart_counts() == {}
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(15) == 0


@pytest.mark.slow
def test_a_handler_stuck_in_a_c_call_retires_its_process_once_its_sibling_completed(
        app, r, tmp_path, procs):
    q = app.queue()
    sibling = q.enqueue("until_flag", {}, idempotency_key="sib:2")
    hung = q.enqueue("hang_in_c", {}, idempotency_key="c:1", timeout_s=0.5, max_attempts=1)
    sup = _pool(app, tmp_path)
    procs.append(sup)
    wait_for(lambda: q.get(hung).state == "dead", 20, "the stuck job to be timed out")
    assert "did not return to Python" in q.get(hung).reason
    (_, pid), = _marks(r, "started", hung)
    log = tmp_path / "pool.log"
    wait_for(lambda: "retires once its other jobs are done" in log.read_text(),
             what="the process to say it retires")
    later = q.enqueue("echo", {"n": 2}, idempotency_key="e:2")
    assert q.get(sibling).state == "inflight" and "worker_restart" not in log.read_text()
    r.set("test:flag", "1")  # the sibling completes, then the process exits and is replaced
    wait_for(lambda: q.get(later).state == "done", 30, "a fresh process to run the next job")
    assert _marks(r, "started", sibling) == _marks(r, "done", sibling) == [(1, pid)]
    assert q.get(sibling).state == "done" and q.get(sibling).deliveries == 1
    (_, fresh), = _marks(r, "done", later)
    assert fresh != pid  # the retired process reserved nothing more
    assert log.read_text().count("code 3 (retired: a handler it could not stop)") == 1
    assert WorkerRegistry(r).restart_counts() == {("hard_timeout", "hang_in_c"): 1}
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(15) == 0


def _last_line(path) -> dict:
    import json
    lines = [x for x in path.read_text().splitlines() if x.startswith("{")]
    return json.loads(lines[-1])


def test_a_stopping_worker_with_redis_gone_exits_within_its_grace_plus_a_bound(
        embedded_redis_factory, tmp_path, procs):
    """SIGTERM while a handler runs, then Redis stops: the handler's settle does not retry
    forever holding the job (nor does the stop's hand-back wait for it): every retry gives up at
    the end of the grace, the process exits with 4 and says why; the job's lease brings it
    back."""
    server = embedded_redis_factory(tcp=True)
    r = redis.Redis.from_url(server.url, decode_responses=True)
    Antre(redis_url=server.url).queue().enqueue("slow", {"seconds": 1.5},
                                                idempotency_key="slow:gone")
    log = tmp_path / "worker.log"
    p = spawn(server.url, ["antre_worker.child", APP, "--threads", "1", "--heartbeat", "0.2",
                           "--grace", "3"], log)
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, what="handler started")
    p.send_signal(signal.SIGTERM)
    server.stop()
    assert p.wait(3 + 10 + 5) == 4  # grace + the child's STOP_BOUND_S + slack
    last = _last_line(log)
    assert last["level"] == "ERROR" and "redis unreachable" in last["message"]
    assert "exit code 4" in last["message"] and "leases expire" in last["message"]


def test_burst_with_redis_unreachable_gives_up_with_a_clear_message(tmp_path, procs,
                                                                     monkeypatch):
    """``antre worker --burst`` on a Redis that never answers used to retry for ever; it gives
    up after ANTRE_BURST_REDIS_WAIT_S, the child and the pool exit with 4."""
    monkeypatch.setenv("ANTRE_BURST_REDIS_WAIT_S", "1")
    log = tmp_path / "pool.log"
    sup = spawn("redis://127.0.0.1:1/0", ["antre_worker", "worker", APP, "--burst",
                                          "--processes", "1", "--threads", "1"], log)
    procs.append(sup)
    assert sup.wait(30) == 4
    text = log.read_text()
    assert "burst: redis unreachable at redis://127.0.0.1:1/0 for 1s" in text
    assert "giving up" in text
    last = _last_line(log)
    assert last["logger"] == "antre.worker.pool" and "exit code 4" in last["message"]


def test_the_child_of_a_killed_supervisor_exits_with_redis_gone(embedded_redis_factory, tmp_path,
                                                                 procs):
    """SIGTERM to the supervisor, SIGKILL to it a second later, then Redis stopped: its child
    (a handler running), told by PDEATHSIG, is gone within its grace plus the bound rather than
    living on."""
    server = embedded_redis_factory(tcp=True)
    r = redis.Redis.from_url(server.url, decode_responses=True)
    Antre(redis_url=server.url).queue().enqueue("slow", {"seconds": 2},
                                                idempotency_key="slow:orphan")
    sup = spawn(server.url, ["antre_worker", "worker", APP, "--processes", "1", "--threads", "1",
                             "--no-scheduler", "--grace", "3"], tmp_path / "pool.log")
    procs.append(sup)
    wait_for(lambda: r.llen("test:started") == 1, 20, "handler started")
    child_pid = int(r.lindex("test:started", 0).rsplit(":", 1)[1])
    sup.send_signal(signal.SIGTERM)
    log = tmp_path / "pool.log"  # the supervisor passed the SIGTERM on: the child is stopping
    wait_for(lambda: "stopping: no new jobs" in log.read_text(), what="the child stopping")
    sup.kill()
    server.stop()
    wait_for(lambda: gone(child_pid), 3 + 10 + 5, "the orphaned child to exit")
    assert "redis unreachable" in (tmp_path / "pool.log").read_text()


def test_a_stopping_worker_on_a_hung_redis_ends_itself_after_grace_plus_the_bound(
        embedded_redis_factory, tmp_path, procs):
    """Redis frozen (SIGSTOP: every call waits out its socket timeout, retried): the hand-back
    at the end of the grace would take minutes. The child's watchdog ends it at grace + 10 s
    with exit code 5 and a last line saying what it left."""
    server = embedded_redis_factory(tcp=True)
    r = redis.Redis.from_url(server.url, decode_responses=True)
    Antre(redis_url=server.url).queue().enqueue("slow", {"seconds": 60},
                                                idempotency_key="slow:hung")
    log = tmp_path / "worker.log"
    p = spawn(server.url, ["antre_worker.child", APP, "--threads", "1", "--heartbeat", "0.2",
                           "--grace", "1"], log)
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, what="handler started")
    os.kill(server.pid, signal.SIGSTOP)
    try:
        p.send_signal(signal.SIGTERM)
        assert p.wait(1 + 10 + 5) == 5
    finally:
        os.kill(server.pid, signal.SIGCONT)
    last = _last_line(log)
    assert last["event"] == "stop_timeout" and "did not stop within 11s" in last["message"]
    assert "1 job held" in last["message"]
