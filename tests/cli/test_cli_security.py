"""Secrets stay out of what the CLI prints and audits: a Redis
URL's password never reaches the audit log or the terminal, and ``antre user add`` takes the
password from a prompt, stdin or ``$ANTRE_PASSWORD`` rather than the process list."""

from __future__ import annotations

import io
import json
import socket
from urllib.parse import urlsplit

import pytest

from antre import Antre
from antre_cli.main import main

SECRET = "s3cret-redis-pass"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["unreachable", "wrong-password"])
def bad_redis_url(request, redis_url) -> str:
    """A Redis URL with a password that does not work: nothing listens there, or the server
    refuses the AUTH of an unknown user."""
    if request.param == "unreachable":
        return f"redis://:{SECRET}@127.0.0.1:{_closed_port()}/0?password={SECRET}x"
    port = urlsplit(redis_url).port
    return f"redis://nosuchuser:{SECRET}@127.0.0.1:{port}/0"


def test_an_incident_command_never_audits_the_redis_password(monkeypatch, capsys, sqlite_url,
                                                             bad_redis_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", bad_redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    assert main(["pause", "billing", "--reason", "bad deploy"]) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and SECRET not in err
    (entry,) = Antre(redis_url="redis://127.0.0.1:1/0", database_url=sqlite_url).audit.list(
        action="queue.pause")
    assert entry.outcome == "failed"
    shown = json.dumps(entry.detail)
    assert "Redis at redis://" in shown and SECRET not in shown


def test_find_and_status_never_print_the_redis_password(monkeypatch, capsys, bad_redis_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", bad_redis_url)
    assert main(["find", "some-job-id"]) == 2
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.count("unreachable") == 2 and SECRET not in err


@pytest.fixture
def users_env(monkeypatch, redis_url, sqlite_url):
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ANTRE_PASSWORD", raising=False)
    return Antre(redis_url=redis_url, database_url=sqlite_url)


def test_user_add_reads_the_password_from_stdin(users_env, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("a-long-password-from-stdin\n"))
    assert main(["user", "add", "alice", "--role", "viewer", "--password-stdin"]) == 0
    assert users_env.users.verify("alice", "a-long-password-from-stdin") is not None
    assert "a-long-password-from-stdin" not in capsys.readouterr().out


def test_user_add_password_flag_still_works_but_warns(users_env, capsys):
    assert main(["user", "add", "bob", "--role", "viewer", "--password", "flag-password-123"]) == 0
    assert users_env.users.verify("bob", "flag-password-123") is not None
    err = capsys.readouterr().err
    assert "process list" in err and "--password-stdin" in err
