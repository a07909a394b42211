"""The dashboard's "database unreachable" state: set only by an error that says the database
cannot be reached (never by a request whose values the database refuses, such as a NUL in a
path), and cleared by the next request the database answers, HTTP Basic ones included. The
outage is a real one: the dashboard reaches PostgreSQL through a TCP link the test cuts."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from antre_web import create_app
from argon2 import PasswordHasher
from webtools import PASSWORD, TEST_SECRET_KEY, basic

from antre.clock import ManualClock, system_ms
from antre.embedded import free_port


class Link:
    """A TCP forwarder to ``target``: ``cut`` closes every connection and stops listening
    (connections are refused), ``mend`` listens again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.port = target, free_port()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self.mend()

    def mend(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):  # closed by ``cut``
            return
        finally:
            for s in (a, b):
                s.close()

    def cut(self) -> None:
        assert self._server is not None
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept
        except OSError:
            pass
        self._server.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def linked(redis_url: str, pg_url: str) -> Iterator[Any]:
    """The dashboard on PostgreSQL through a ``Link``; an operator; a manual clock."""
    parts = urlsplit(pg_url)
    link = Link((parts.hostname or "127.0.0.1", parts.port or 5432))
    url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{link.port}"))
    clock = ManualClock(system_ms())
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": url, "TESTING": True,
                      "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": clock})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    svc.users.add("operator", "operator", PASSWORD)
    yield app, svc, link, clock
    link.cut()


def test_a_nul_in_a_path_leaves_the_database_reachable_and_basic_changes_working(linked):
    app, svc, _, _ = linked
    c = app.test_client()
    resp = c.post("/api/queues/x/jobs/a%00b/replay", json={}, headers=basic("operator"))
    assert resp.status_code in (400, 404, 409)  # refused or not found: never a 500 or a 503
    assert svc.outages.since("database") is None
    (entry,) = svc.audit.list(action="dlq.replay")
    assert entry.target == "x/a\ufffdb" and entry.outcome in ("refused", "failed")
    paused = c.post("/api/queues/default/pause", json={"reason": "r"}, headers=basic("operator"))
    assert paused.status_code == 200, paused.get_json()


def test_after_a_real_database_outage_the_next_basic_request_clears_the_banner(linked):
    app, svc, link, clock = linked
    c = app.test_client()
    assert c.get("/api/overview", headers=basic("operator")).status_code == 200
    link.cut()
    down = c.post("/api/queues/default/pause", json={}, headers=basic("operator"))
    assert down.status_code == 503
    assert svc.outages.since("database") is not None
    link.mend()
    clock.advance(61_000)
    assert svc.outages.since("database") is not None  # no timer clears it
    assert c.get("/api/overview", headers=basic("operator")).status_code == 200
    assert svc.outages.since("database") is None  # a read the database answered did
    link.cut()
    assert c.get("/api/overview", headers=basic("operator")).status_code == 503
    link.mend()
    resp = c.post("/api/queues/default/pause", json={"reason": "after"},
                  headers=basic("operator"))
    assert resp.status_code == 200, resp.get_json()
    assert svc.outages.since("database") is None
    assert [e.reason for e in svc.audit.list(action="queue.pause")] == ["after"]


def test_a_database_refusing_only_the_audit_entry_is_not_an_outage(web):
    from sqlalchemy import create_engine, text
    engine = create_engine(web.svc.database_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TRIGGER refused BEFORE INSERT ON antre_audit "
                          "BEGIN SELECT RAISE(ABORT, 'no'); END"))
    engine.dispose()
    resp = web.app.test_client().post("/api/queues/default/pause", json={},
                                      headers=basic("operator"))
    assert resp.status_code == 503 and "audit log could not be written" in resp.get_json()[
        "message"]
    assert web.svc.outages.since("database") is None
