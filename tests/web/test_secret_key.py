"""Sessions cannot be forged: the dashboard refuses a missing, short or placeholder secret
key, whether it comes from its config, the environment or ``antre web`` (which then starts no
server), saying how to make one; the key the demo makes passes. HTTP-level against the real app
(Flask test client), a real Redis and SQLite."""

from __future__ import annotations

import os

import pytest
from webtools import TEST_SECRET_KEY

from antre_cli.web import serve
from antre_web import InsecureConfig, create_app
from antre_web.security import secret_key_problem


@pytest.mark.parametrize("secret", [None, "", "x", "change-me-in-production",
                                    "change-me-in-production-change-me-in-production",
                                    "a" * 64, b"short-bytes"])
def test_dashboard_refuses_a_missing_short_or_placeholder_secret(
        secret, redis_url, sqlite_url, monkeypatch):
    monkeypatch.delenv("ANTRE_SECRET_KEY", raising=False)
    with pytest.raises(InsecureConfig) as err:
        create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                    "SECRET_KEY": secret})
    assert "ANTRE_SECRET_KEY" in str(err.value) and "secrets.token_hex(32)" in str(err.value)


def test_the_environment_secret_is_checked_too(redis_url, sqlite_url, monkeypatch):
    monkeypatch.setenv("ANTRE_SECRET_KEY", "change-me-in-production")
    with pytest.raises(InsecureConfig, match="too short"):
        create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url})
    monkeypatch.setenv("ANTRE_SECRET_KEY", TEST_SECRET_KEY)
    assert create_app({"ANTRE_REDIS_URL": redis_url, "ANTRE_DATABASE_URL": sqlite_url})


def test_antre_web_will_not_start_without_a_good_secret(redis_url, sqlite_url, monkeypatch,
                                                          capsys):
    import antre_cli.web

    def no_gunicorn(self):
        raise AssertionError("gunicorn was started")

    monkeypatch.setattr(antre_cli.web._Gunicorn, "run", no_gunicorn)
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ANTRE_ADMIN_PASSWORD", raising=False)
    for value in ("change-me-in-production", None):
        if value is None:
            monkeypatch.delenv("ANTRE_SECRET_KEY", raising=False)
        else:
            monkeypatch.setenv("ANTRE_SECRET_KEY", value)
        assert serve(None, port=1) == 2  # returns before gunicorn would bind anything
        err = capsys.readouterr().err
        assert "refusing to start the dashboard" in err and "token_hex(32)" in err
    assert "ANTRE_SECRET_KEY" not in os.environ  # no random key slipped in for the workers


def test_the_demo_secret_passes():
    from antre_cli.demo import _secret
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        assert secret_key_problem(_secret(os.path.join(tmp, "secret_key"))) is None
