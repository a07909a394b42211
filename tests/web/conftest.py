"""The dashboard under test: ``web`` (a ``create_app`` on the test Redis and a SQLite file, one
user per role, password ``webtools.PASSWORD``, a manual clock at the wall time, a producer on
the same Redis) and ``operator_client`` (a test client logged in as the operator)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from argon2 import PasswordHasher

import antre
from antre.clock import ManualClock, system_ms
from antre_web import create_app
from webtools import PASSWORD, ROLES, TEST_SECRET_KEY, Web


@pytest.fixture
def web(redis_url: str, sqlite_url: str) -> Iterator[Web]:
    clock = ManualClock(system_ms())
    producer = antre.Antre(redis_url=redis_url, clock=clock)
    app = create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                      "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": clock})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    for role in ROLES:
        svc.users.add(role, role, PASSWORD)
    yield Web(app, svc, producer, clock)
    producer.redis.close()


@pytest.fixture
def operator_client(web: Web) -> Any:
    """A test client logged in as ``operator`` (its CSRF token in the session)."""
    return web.client("operator")
