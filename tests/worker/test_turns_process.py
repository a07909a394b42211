"""Per-key turns against real worker processes: kill -9 of the worker holding a
key's head, SIGSTOP past its lease, a Redis restart. The key is never stuck (the next job runs
once the lease is swept), its jobs never run two at once, they end in order, nothing is lost.
The lease clock is advanced in the test process (``later``), never slept for."""

from __future__ import annotations

import os
import signal

import pytest
import redis

from antre import Antre
from antre.engine import keys
from antre.engine.queue import JobSpec, Queue

from helpers import spawn
from test_worker_process import gone, later, wait_for

APP = "tests.apps.turns:app"
KEY = "order:42"


def child(redis_url, tmp_path, *extra, threads=2):
    return spawn(redis_url, ["antre_worker.child", APP, "--threads", str(threads),
                             "--heartbeat", "0.2", *extra], tmp_path / "worker.log")


@pytest.fixture
def app(redis_url, monkeypatch):
    monkeypatch.setenv("_T_URL", redis_url)
    return Antre(redis_url=redis_url)


def line(q: Queue, n: int, hold_first: bool = True, work_s: float = 0.01) -> list[str]:
    return q.enqueue_many([JobSpec("step", {"i": i, "hold": hold_first and i == 0,
                                            "work_s": work_s}, f"turn:{i}", KEY)
                           for i in range(n)])


def runs(r) -> list[tuple[int, str, int, int]]:
    out = []
    for raw in r.lrange("turns:runs", 0, -1):
        i, what, delivery, pid = raw.split(":")
        out.append((int(i), what, int(delivery), int(pid)))
    return out


def assert_one_at_a_time_in_order(r, n: int, dead_pid: int | None = None) -> None:
    """Every run but a dead worker's starts after the previous run ended; ends are in order."""
    seen = [x for x in runs(r) if x[3] != dead_pid]
    running = None
    for i, what, _, _ in seen:
        if what == "start":
            assert running is None, f"job {i} started while job {running} ran: {seen}"
            running = i
        else:
            assert running == i, seen
            running = None
    assert [i for i, what, _, _ in seen if what == "end"] == list(range(n))


def assert_key_free(q: Queue, ids: list[str]) -> None:
    assert [q.get(i).state for i in ids] == ["done"] * len(ids)
    assert q.redis.hlen(q.keys.turns) == 0
    assert q.redis.zcard(q.keys.waiting) == 0


def test_kill_9_of_the_heads_worker_the_line_goes_on_after_the_sweep(app, r, tmp_path, procs):
    q = app.queue()
    ids = line(q, 4)
    p = child(app.redis_url, tmp_path)
    procs.append(p)
    wait_for(lambda: r.llen("turns:runs") == 1, what="the head started")
    p.kill()
    p.wait(10)
    assert [q.get(i).state for i in ids] == ["inflight", "waiting", "waiting", "waiting"]
    assert later(29_000).sweep().requeued == 0
    assert later(31_000).sweep().requeued == 1
    assert [q.get(i).state for i in ids] == ["ready", "waiting", "waiting", "waiting"]
    r.set("turns:go", 1)
    # the dead worker's lock (1 s TTL) expires by itself; a burst worker started before would
    # snooze the head on it and leave it scheduled
    wait_for(lambda: not r.exists(keys.lock(KEY)), what="the dead worker's lock to expire")
    p2 = child(app.redis_url, tmp_path, "--burst")
    procs.append(p2)
    assert p2.wait(30) == 0  # burst runs the whole line: each next job is ready at once
    assert_key_free(q, ids)
    assert q.get(ids[0]).deliveries == 2
    assert_one_at_a_time_in_order(r, 4, dead_pid=p.pid)
    assert q.redis.zcard(q.keys.dead) == 0


def test_sigstop_past_the_lease_the_next_worker_runs_the_line_and_the_late_ack_is_refused(
        app, r, tmp_path, procs):
    q = app.queue()
    ids = line(q, 3)
    # one thread: a stopped worker's idle thread would have a reserve queued behind its wait
    # on the wake list, which Redis runs for it (taking the head again until its next sweep)
    p = child(app.redis_url, tmp_path, threads=1)
    procs.append(p)
    wait_for(lambda: r.llen("turns:runs") == 1, what="the head started")
    p.send_signal(signal.SIGSTOP)
    try:
        assert later(31_000).sweep().requeued == 1
        r.set("turns:go", 1)  # the stopped worker would go on if it ran
        wait_for(lambda: not r.exists(keys.lock(KEY)), what="the stopped worker's lock")
        p2 = child(app.redis_url, tmp_path, "--burst")
        procs.append(p2)
        assert p2.wait(30) == 0
        assert_key_free(q, ids)
        assert_one_at_a_time_in_order(r, 3, dead_pid=p.pid)
        by = q.get(ids[0]).worker_id
    finally:
        p.send_signal(signal.SIGCONT)
    # the stopped worker wakes inside the head's handler: its ack is fenced off by the epoch
    wait_for(lambda: any(x[3] == p.pid and x[1] == "end" for x in runs(r)), what="late end")
    wait_for(lambda: "lease" in (tmp_path / "worker.log").read_text(), what="lease lost line")
    head = q.get(ids[0])
    assert (head.state, head.epoch, head.worker_id) == ("done", 2, by)
    assert r.hlen(q.keys.turns) == 0
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0


def test_a_redis_restart_mid_line_loses_nothing_and_keeps_the_order(
        embedded_redis_factory, tmp_path, procs, monkeypatch):
    server = embedded_redis_factory(appendonly=True, tcp=True)
    monkeypatch.setenv("_T_URL", server.url)
    client = redis.Redis.from_url(server.url, decode_responses=True)
    q = Queue(client, "default")
    ids = line(q, 12, hold_first=False, work_s=0.05)
    p = child(server.url, tmp_path)
    procs.append(p)
    wait_for(lambda: client.llen("turns:runs") >= 6, what="a few jobs done")
    server.restart()
    wait_for(lambda: all(q.get(i).state == "done" for i in ids), 30, "the line after restart")
    assert client.hlen(q.keys.turns) == 0 and client.zcard(q.keys.waiting) == 0
    ends = [i for i, what, _, _ in runs(client) if what == "end"]
    # a job that ran when Redis went away may run again after it: never out of order, none lost
    assert sorted(set(ends)) == list(range(12))
    assert all(a <= b for a, b in zip(ends, ends[1:])), ends
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    assert not gone(os.getpid())
