"""Helpers for the dashboard tests: the ``Web`` bundle the ``web`` fixture
(``tests/web/conftest.py``) yields, logging in, CSRF-posting, Basic and htmx headers."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

import antre
from antre.clock import ManualClock

PASSWORD = "correct horse battery"
#: A session-signing key that passes the dashboard's checks (>= 32 bytes, no placeholder).
TEST_SECRET_KEY = "tests-only-session-key-4f9c2a7e1b8d3c6a5e0f9b2d"
ROLES = ("viewer", "operator", "admin")


@dataclass
class Web:
    app: Any
    svc: Any
    producer: antre.Antre
    clock: ManualClock

    def client(self, role: str | None = None) -> Any:
        c = self.app.test_client()
        if role:
            login(c, role)
        return c

    @property
    def q(self) -> antre.Queue:
        return self.producer.queue("default")

    def dead_job(self, job_type: str = "email", payload: Any = None, error: str = "smtp down",
                 key: str | None = None) -> str:
        job_id = self.q.enqueue(job_type, payload if payload is not None else {"to": "a@x"},
                                idempotency_key=key or f"{job_type}:{self.clock()}:{id(payload)}")
        (job,) = self.q.reserve("w1")
        assert job.id == job_id
        self.q.bury(job, reason="permanent failure", error=error, traceback="Traceback: boom")
        self.clock.advance(5)
        return job_id

    def audit(self, action: str | None = None) -> list[Any]:
        return self.svc.audit.list(limit=1000, action=action)


def csrf_of(client: Any) -> str:
    with client.session_transaction() as s:
        return str(s.get("csrf", ""))


def login(client: Any, name: str, password: str = PASSWORD) -> Any:
    page = client.get("/login")
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.get_data(as_text=True))
    assert token
    resp = client.post("/login", data={"username": name, "password": password,
                                       "csrf_token": token.group(1)})
    return resp


def post(client: Any, url: str, data: dict[str, Any] | None = None, csrf: bool = True,
         **kw: Any) -> Any:
    data = dict(data or {})
    if csrf:
        data["csrf_token"] = csrf_of(client)
    return client.post(url, data=data, **kw)


def basic(name: str, password: str = PASSWORD) -> dict[str, str]:
    token = base64.b64encode(f"{name}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def htmx() -> dict[str, str]:
    return {"HX-Request": "true"}
