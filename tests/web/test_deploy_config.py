"""What ships for deployment keeps secrets where they belong: ``docker-compose.yml`` needs
its secrets (no defaults), publishes the dashboard on localhost only and gives the web container
no webhook secret; ``.dockerignore`` keeps secrets and history out of the image."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from antre_web.security import secret_key_problem


REPO = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


_VAR = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` (docker compose is not
    installed here; this follows its documented rules)."""
    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name, "")
        if op == "?" and not value:
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return value or (arg if op == "-" else "")
    return _VAR.sub(one, text)


REPO = Path(__file__).resolve().parents[2]


REPO = Path(__file__).resolve().parents[2]


def test_compose_needs_its_secrets_and_publishes_on_localhost():
    raw = (REPO / "docker-compose.yml").read_text()
    assert "change-me" not in raw
    doc = _compose()
    env = doc["services"]["web"]["environment"]
    for name in ("ANTRE_SECRET_KEY", "ANTRE_ADMIN_PASSWORD"):
        with pytest.raises(ValueError, match=name):
            interpolate(str(env[name]), {})
    good = {"ANTRE_SECRET_KEY": "3b7e9a1c5d2f8e4a6b0c9d7e1f3a5b8c2d4e6f0a1b3c5d7e9f2a4b6c8d0e1f3a", "ANTRE_ADMIN_PASSWORD": "a-long-admin-password",
            "ANTRE_POSTGRES_PASSWORD": "0123abcd" * 2}
    assert secret_key_problem(interpolate(env["ANTRE_SECRET_KEY"], good)) is None
    assert interpolate(env["ANTRE_DATABASE_URL"], good).startswith(
        "postgresql+psycopg://postgres:0123abcd0123abcd@")
    (port,) = doc["services"]["web"]["ports"]
    assert interpolate(port, good) == "127.0.0.1:8000:8000"
    assert interpolate(port, {**good, "ANTRE_BIND": "0.0.0.0"}) == "0.0.0.0:8000:8000"
    assert "ports" not in doc["services"]["redis"] and "ports" not in doc["services"]["postgres"]
    with pytest.raises(ValueError):
        interpolate(doc["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"], {})


def test_the_web_container_never_receives_the_webhook_secret():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    web_env = compose["services"]["web"]["environment"]
    worker_env = compose["services"]["worker"]["environment"]
    assert "ANTRE_ALERT_WEBHOOK_SECRET" not in web_env
    assert "ANTRE_ALERT_WEBHOOK_SECRET" in worker_env and "ANTRE_SECRET_KEY" not in worker_env


def test_dockerignore_keeps_secrets_and_history_out():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    for needed in (".git", "antre-data/", ".env", "*.db", "test-artifacts/"):
        assert needed in lines
