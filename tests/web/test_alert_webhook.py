"""The alert webhook against a local HTTP server: redirects are not followed, the call is
bounded as a whole (a server dripping bytes cannot hold it), the body is signed (timestamp and
HMAC), only http(s) URLs are called, and the worker's alerts duty signs with the configured
secret."""

from __future__ import annotations

import hashlib
import hmac
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from antre import Antre
from antre.clock import ManualClock
from antre.engine.queue import Queue
from antre.observe.alerts import post_json


@pytest.fixture
def hook_server():
    """A local HTTP server: ``mode`` 'ok', 'redirect' (to /elsewhere) or 'slow' (drips bytes)."""
    state = {"mode": "ok", "got": [], "stop": threading.Event()}

    class Handler(BaseHTTPRequestHandler):
        def _record(self):
            n = int(self.headers.get("Content-Length") or 0)
            state["got"].append((self.command, self.path, dict(self.headers), self.rfile.read(n)))

        def do_POST(self):
            self._record()
            if state["mode"] == "redirect":
                self.send_response(302)
                self.send_header("Location", "/elsewhere")
                self.end_headers()
            elif state["mode"] == "slow":  # the status line, then a header a byte at a time
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(100):  # each byte well within any socket timeout
                    if state["stop"].wait(0.1):
                        return
                    self.wfile.write(b"x")
                    self.wfile.flush()
                self.wfile.write(b"\r\nContent-Length: 0\r\n\r\n")
            else:
                self.send_response(204)
                self.end_headers()

        do_GET = _record

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", state
    finally:
        state["stop"].set()
        server.shutdown()
        server.server_close()


def test_webhook_redirects_are_not_followed(hook_server):
    url, state = hook_server
    state["mode"] = "redirect"
    with pytest.raises(OSError, match="302"):
        post_json(url, {"a": 1})
    assert [(m, p) for m, p, _, _ in state["got"]] == [("POST", "/hook")]  # no GET /elsewhere


def test_webhook_call_is_bounded_as_a_whole(hook_server):
    url, state = hook_server
    state["mode"] = "slow"  # 10 s to send the headers, 0.1 s per byte
    with pytest.raises(TimeoutError):
        post_json(url, {"a": 1}, deadline_s=0.5)


def test_webhook_body_is_signed(hook_server):
    url, state = hook_server
    post_json(url, {"rule": "x"}, secret="s3cr3t", now_s=lambda: 1_700_000_000)
    _, _, headers, body = state["got"][0]
    assert headers["X-Antre-Timestamp"] == "1700000000"
    expected = hmac.new(b"s3cr3t", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert headers["X-Antre-Signature"] == f"sha256={expected}"
    with pytest.raises(ValueError):
        post_json("file:///etc/passwd", {})


def test_the_worker_duty_signs_with_the_configured_secret(r, hook_server, monkeypatch):
    from antre_worker.duties import DUTIES
    url, state = hook_server
    monkeypatch.setenv("ANTRE_ALERT_WEBHOOK", url)
    monkeypatch.setenv("ANTRE_ALERT_WEBHOOK_SECRET", "duty-secret")
    clock = ManualClock()
    app = Antre(redis_client=r, clock=clock)
    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")  # ready, no worker alive

    class D:  # the duty's context: only what _alerts reads
        pass

    d = D()
    d.app, d.clock = app, clock
    (duty,) = [x for x in DUTIES if x.name == "alerts"]
    events = duty.fn(d)
    assert "no_live_worker" in [e.rule for e in events]
    _, _, headers, body = state["got"][0]
    ts = headers["X-Antre-Timestamp"].encode()
    assert headers["X-Antre-Signature"] == "sha256=" + hmac.new(
        b"duty-secret", ts + b"." + body, hashlib.sha256).hexdigest()
