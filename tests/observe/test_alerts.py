"""Alerts fire once per episode, resolve once, survive a failing webhook, reach a real server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from antre.engine import keys
from antre.observe.alerts import (
    AlertEngine,
    NoLiveWorker,
    OldestReady,
    dlq_growth,
    lease_expiration_spike,
    lock_conflict_spike,
)
from antre.engine.queue import Queue
from antre.observe.registry import WorkerInfo, WorkerRegistry


@pytest.fixture
def webhook():
    """A local HTTP server on 127.0.0.1 collecting POSTed JSON bodies."""
    received: list[dict] = []
    status = {"code": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if status["code"] == 200:
                received.append(json.loads(body))
            self.send_response(status["code"])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received, status
    finally:
        server.shutdown()
        server.server_close()


def bury(q: Queue, n: int) -> None:
    for i in range(n):
        q.enqueue("charge", {"i": i}, idempotency_key=f"c{i}-{q.clock()}")
    for job in q.reserve("w", count=n):
        q.bury(job, reason="card declined")


def test_dlq_growth_fires_once_per_episode_and_resolves(r, clock, webhook):
    url, received, _ = webhook
    q = Queue(r, "billing", clock=clock)
    q.enqueue("charge", {}, idempotency_key="seed")
    engine = AlertEngine(r, clock, [dlq_growth(max_in_window=10, window_s=300)],
                         webhook_url=url, dashboard_url="http://dash.example")
    assert engine.check() == []  # first point
    clock.advance(60_000)
    bury(q, 12)
    [event] = engine.check()
    assert (event.rule, event.queue, event.status) == ("dlq_growth", "billing", "firing")
    assert len(received) == 1
    body = received[0]
    assert {k: body[k] for k in ("source", "rule", "queue", "status", "value", "threshold")} == {
        "source": "antre", "rule": "dlq_growth", "queue": "billing", "status": "firing",
        "value": 12, "threshold": 10}
    assert body["dashboard"] == "http://dash.example/dlq?queue=billing"
    assert body["since"].endswith("Z") and "12 jobs dead-lettered" in body["message"]
    [active] = engine.active()
    assert (active.rule, active.status, active.notified) == ("dlq_growth", "firing", "firing")

    clock.advance(60_000)
    bury(q, 3)  # still firing: 15 in the window; no repeat
    assert engine.check() == []
    assert len(received) == 1 and engine.active()[0].value == 15

    clock.advance(400_000)  # nothing buried in the last 5 minutes
    [event] = engine.check()
    assert event.status == "resolved"
    assert [b["status"] for b in received] == ["firing", "resolved"]
    assert "resolved_at" in received[1]
    assert engine.active() == [] and engine.alerts() == []
    clock.advance(60_000)
    assert engine.check() == [] and len(received) == 2

    bury(q, 11)  # a new episode fires again
    clock.advance(1_000)
    assert [e.status for e in engine.check()] == ["firing"]
    assert len(received) == 3


def test_failing_webhook_is_retried_next_check_and_never_raises(r, clock):
    calls: list[dict] = []

    def post(url, payload):
        calls.append(payload)
        if len(calls) == 1:
            raise OSError("connection refused")

    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")
    engine = AlertEngine(r, clock, [OldestReady(max_age_s=60)], webhook_url="http://x", post=post)
    assert engine.check() == []
    clock.advance(61_000)
    assert [e.status for e in engine.check()] == ["firing"]  # POST failed, logged
    assert engine.active()[0].notified == ""
    clock.advance(1_000)
    assert engine.check() == []  # delivered now, not a new event
    assert [c["status"] for c in calls] == ["firing", "firing"]
    assert engine.active()[0].notified == "firing"
    clock.advance(1_000)
    engine.check()
    assert len(calls) == 2


def test_http_error_from_the_webhook_is_retried(r, clock, webhook):
    url, received, status = webhook
    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")
    engine = AlertEngine(r, clock, [NoLiveWorker()], webhook_url=url)
    status["code"] = 500
    [event] = engine.check()
    assert (event.rule, event.queue) == ("no_live_worker", "*")
    assert received == []
    status["code"] = 200
    engine.check()
    assert [b["rule"] for b in received] == ["no_live_worker"]
    WorkerRegistry(r, clock).beat(WorkerInfo(id="w1"))
    assert [e.status for e in engine.check()] == ["resolved"]
    assert [b["status"] for b in received] == ["firing", "resolved"]


def test_no_live_worker_needs_ready_jobs(r, clock):
    engine = AlertEngine(r, clock, [NoLiveWorker()])
    assert engine.check() == []
    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")
    assert [e.rule for e in engine.check()] == ["no_live_worker"]
    assert engine.active()[0].notified == "firing"  # no webhook: delivered = shown


def test_spikes_of_lease_expirations_and_lock_conflicts(r, clock):
    q = Queue(r, "q", clock=clock)
    rules = [lease_expiration_spike(max_in_window=2, window_s=60),
             lock_conflict_spike(max_in_window=2, window_s=60)]
    engine = AlertEngine(r, clock, rules)
    q.enqueue("t", {}, idempotency_key="seed")
    engine.check()
    for i in range(3):
        q.enqueue("t", {}, idempotency_key=f"e{i}")
    for job in q.reserve("w", count=4)[:3]:
        q.snooze(job, 10, "lock_busy", counter="lock_busy")
    clock.advance(1_000)
    q.promote()
    q.reserve("w", count=10)
    clock.advance(31_000)
    assert q.sweep().requeued == 4
    fired = sorted(e.rule for e in engine.check())
    assert fired == ["lease_expiration_spike", "lock_conflict_spike"]
    clock.advance(61_000)
    assert sorted(e.status for e in engine.check()) == ["resolved", "resolved"]


def test_resolved_but_undelivered_then_firing_again_is_the_same_episode(r, clock):
    calls: list[str] = []
    fail = {"on": False}

    def post(url, payload):
        if fail["on"]:
            raise OSError("down")
        calls.append(payload["status"])

    q = Queue(r, "q", clock=clock)
    engine = AlertEngine(r, clock, [NoLiveWorker()], webhook_url="http://x", post=post)
    q.enqueue("t", {}, idempotency_key="a")
    engine.check()
    fail["on"] = True
    WorkerRegistry(r, clock).beat(WorkerInfo(id="w1"))
    engine.check()  # resolved, POST failed
    clock.advance(60_000)  # the worker is gone again
    fail["on"] = False
    assert engine.check() == []
    assert calls == ["firing"] and engine.active()[0].status == "firing"


def test_points_are_bounded_in_time(r, clock):
    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")
    engine = AlertEngine(r, clock, [dlq_growth(window_s=60)])
    for _ in range(10):
        engine.check()
        clock.advance(30_000)
    points = json.loads(r.hget(keys.alert_points(), "q"))
    assert len(points) <= 4 and points[-1][0] == clock() - 30_000
