"""Session-wide fixtures shared by every test module.

Fixtures: ``redis_server`` (session), ``redis_url``, ``r``, ``sqlite_url``, ``pg_url``,
``db_url`` (parametrized sqlite/postgres), ``embedded_redis_factory``, ``redis_cluster``
(session), ``antre_logging``; ``clock`` (a ``ManualClock`` at ``START_MS``), ``app`` (an
``Antre`` on the test Redis, no database), ``q`` (its default queue), ``procs`` (processes a
test started, killed after it). Each folder's ``conftest.py`` adds what its tests share
(``web/``: the dashboard and logged-in clients; ``control/`` and ``engine/``: a ``Queue`` named
"jobs"; ``control/``: a queue holding a job in every state). Plain functions shared across
folders (``make_worker``, ``spawn``, ``wait_for``) are in ``helpers.py``, the dashboard's
(``login``, ``post``, ``basic``, ...) in ``webtools.py``; both import as top-level modules.

Every test must leave the ``antre`` loggers as it found them (their handlers, level and
``propagate``): a test that runs something which configures logging in-process (the CLI's
``worker``/``sweep`` commands call ``antre.observe.logs.configure()``) uses ``antre_logging``. A test
that does not fails at teardown (``_antre_loggers_left_as_found``): a handler left behind wrote
later tests' log lines to the terminal, and ``propagate=False`` hid them from ``caplog``.

Under ``CI=true`` a missing service (PostgreSQL, redis-cli for the cluster) fails the test
instead of skipping it, and a session in which no test ran is an error.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest
import redis

from antre import Antre
from antre.clock import ManualClock
from antre.engine.queue import Queue

from antre.embedded import EmbeddedRedis, free_port
from antre.stores.sql import make_engine, migrate
from antre_demo import make_app, setup
from helpers import START_MS

# the users' test helpers (antre.testing): their fixtures antre_server and antre_app
pytest_plugins = ["antre.testing"]

IN_CI = os.environ.get("CI", "").lower() == "true"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def skip_or_fail(reason: str) -> None:
    """``pytest.skip`` locally; ``pytest.fail`` under CI=true, where everything must run."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: missing services are failures, not skips)")
    pytest.skip(reason)


# --- markers and the CI "nothing ran" guard -----------------------------------------------

_FIXTURE_MARKERS = {"pg_url": "postgres", "redis_cluster": "cluster"}


def pytest_collection_modifyitems(config, items):
    """Tests that use ``pg_url``/``redis_cluster`` get the ``postgres``/``cluster`` marker."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        for fixture, marker in _FIXTURE_MARKERS.items():
            if fixture in names and item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))


_ran = {"count": 0}


def pytest_runtest_logreport(report):
    if report.when == "call":
        _ran["count"] += 1


def pytest_sessionfinish(session, exitstatus):
    """Under CI=true a session in which no test ran is an error.

    pytest already exits 5 when nothing was collected; this also catches a run where
    everything was collected but skipped or deselected.  A nonzero status is never
    turned into zero.
    """
    if IN_CI and exitstatus == pytest.ExitCode.OK and _ran["count"] == 0:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if IN_CI and _ran["count"] == 0:
        terminalreporter.write_line(
            "CI=true: no test ran in this session; that is an error.", red=True
        )


# --- the antre loggers: left as found ------------------------------------------------------


def _antre_loggers() -> dict[str, tuple[list[logging.Handler], int, bool]]:
    """The handlers, level and propagate of ``antre`` and every ``antre.*`` logger, and of the
    libraries' loggers ``configure()`` routes (``apscheduler``)."""
    out = {}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.split(".")[0] in ("antre", "apscheduler") and isinstance(logger, logging.Logger):
            out[name] = (logger.handlers[:], logger.level, logger.propagate)
    return out


def _restore_antre_loggers(saved: dict[str, tuple[list[logging.Handler], int, bool]]) -> None:
    """Put the loggers back as ``saved`` (a logger made since: no handlers, NOTSET,
    propagating); handlers added since are closed (a buffered one writes what it holds)."""
    kept = {id(h) for handlers, _, _ in saved.values() for h in handlers}
    for name, (handlers, level, propagate) in _antre_loggers().items():
        for handler in handlers:
            if id(handler) not in kept:
                handler.close()
        logger = logging.getLogger(name)
        logger.handlers[:], logger.level, logger.propagate = saved.get(name, ([], 0, True))


@pytest.fixture
def antre_logging():
    """For a test that configures logging (``antre.observe.logs.configure()``, the worker CLI): the
    ``antre`` loggers are put back as they were after it."""
    saved = _antre_loggers()
    try:
        yield
    finally:
        _restore_antre_loggers(saved)


def _antre_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("ANTRE_")}


@pytest.fixture(autouse=True)
def _antre_environment_left_as_found(request):
    """Fails a test that leaves an ``ANTRE_*`` variable of the environment changed (the
    processes later tests start inherit it), then puts the environment back."""
    saved = _antre_environment()
    yield
    now = _antre_environment()
    if now != saved:
        changed = sorted(k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k))
        for k in changed:
            if k in saved:
                os.environ[k] = saved[k]
            else:
                os.environ.pop(k, None)
        pytest.fail(f"{request.node.nodeid} left {', '.join(changed)} changed in the "
                    f"environment: use monkeypatch.setenv / delenv", pytrace=False)


@pytest.fixture(autouse=True)
def _antre_loggers_left_as_found(request):
    """Fails a test that leaves a handler, level or ``propagate`` changed on an ``antre``
    logger (then restores them, so the tests after it are not affected)."""
    saved = _antre_loggers()
    yield
    now = _antre_loggers()
    changed = sorted(name for name in saved.keys() | now.keys()
                     if now.get(name, ([], 0, True)) != saved.get(name, ([], 0, True)))
    if changed:
        _restore_antre_loggers(saved)
        pytest.fail(f"{request.node.nodeid} left the logger(s) {', '.join(changed)} changed "
                    f"(handlers, level or propagate): use the antre_logging fixture",
                    pytrace=False)


# --- Redis -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server():
    """A private Redis started by the test session itself (never the machine's 6379)."""
    server = EmbeddedRedis(tcp=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    """URL of the session's Redis, flushed (FLUSHALL) before the test."""
    if not redis_server.running:  # a test restarted/stopped it: bring it back
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def embedded_redis_factory(tmp_path):
    """Factory for a test's own EmbeddedRedis (e.g. to restart it); all stopped after.

    ``embedded_redis_factory(appendonly=True, tcp=True)`` returns a started server whose
    data dir is under ``tmp_path``.
    """
    servers: list[EmbeddedRedis] = []

    def make(**kwargs) -> EmbeddedRedis:
        kwargs.setdefault("data_dir", str(tmp_path / f"redis{len(servers)}"))
        server = EmbeddedRedis(**kwargs)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in servers:
            server.stop()


# --- SQL ---------------------------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'antre.db'}"


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def _libpq_url(sqlalchemy_url: str) -> str:
    """``postgresql+psycopg://...`` -> ``postgresql://...`` for psycopg.connect."""
    scheme, sep, rest = sqlalchemy_url.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


@pytest.fixture
def pg_url():
    """A PostgreSQL URL (``postgresql+psycopg://``) whose connections use a fresh, empty schema.

    The schema is dropped after the test (connections the test left open are terminated
    first, found by their application_name).
    """
    base = os.environ.get("ANTRE_TEST_PG_URL", DEFAULT_PG_URL)
    try:
        import psycopg
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install 'psycopg[binary]')")
    try:
        admin = psycopg.connect(_libpq_url(base), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        skip_or_fail(f"PostgreSQL not reachable at {base}: {e}".strip())

    schema = f"antre_test_{uuid.uuid4().hex[:12]}"
    app_name = f"pytest-{schema}"
    try:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        yield _with_query(base, options=f"-csearch_path={schema}", application_name=app_name)
    finally:
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (app_name,),
            )
            admin.execute("SET lock_timeout = '10s'")
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            admin.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    """Runs the test once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


# --- Redis Cluster -----------------------------------------------------------------------


def _wait_cluster_ok(ports: list[int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    pending = list(ports)
    while pending:
        port = pending[0]
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        try:
            info = client.execute_command("CLUSTER INFO")
        finally:
            client.close()
        if isinstance(info, bytes):
            info = info.decode()
        if isinstance(info, dict):
            state = info.get("cluster_state")
        else:
            state = next(
                (ln.split(":", 1)[1].strip() for ln in str(info).splitlines()
                 if ln.startswith("cluster_state:")),
                None,
            )
        if state == "ok":
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"Redis Cluster node {port} not ok after {timeout}s: {info}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A local 3-node Redis Cluster (no replicas); yields ``[(host, port), ...]``."""
    redis_cli = shutil.which("redis-cli") or shutil.which("valkey-cli")
    server_bin = shutil.which("redis-server") or shutil.which("valkey-server")
    if not redis_cli or not server_bin:
        skip_or_fail("Redis Cluster tests need redis-server and redis-cli (apt-get install redis-server)")

    base = tmp_path_factory.mktemp("cluster")
    nodes: list[EmbeddedRedis] = []
    try:
        for i in range(3):
            node = EmbeddedRedis(
                data_dir=str(base / f"node{i}"),
                tcp=True,
                binary=server_bin,
                extra_args=[
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-port", str(free_port()),
                    "--cluster-node-timeout", "5000",
                ],
            )  # fmt: skip
            nodes.append(node.start())
        ports = [n.port for n in nodes]
        cmd = [redis_cli, "--cluster", "create",
               *[f"127.0.0.1:{p}" for p in ports],
               "--cluster-replicas", "0", "--cluster-yes"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
        _wait_cluster_ok(ports)
        yield [("127.0.0.1", p) for p in ports]
    finally:
        for node in nodes:
            node.stop()


# --- shared by the SQL and demo-scenario tests ------------------------------------------------


@pytest.fixture
def migrated_engine(db_url):
    """An engine on ``db_url`` with Antre's tables migrated."""
    eng = make_engine(db_url)
    migrate(eng)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def demo_app(redis_url, db_url, clock):
    """The demo workload's app (``antre_demo``) on the test Redis and database; the test
    module provides ``clock``."""
    a = make_app(redis_url, db_url, clock=clock)
    setup(a)
    try:
        yield a
    finally:
        if a._sql:
            a.engine.dispose()
        a.redis.close()

@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at ``START_MS``: the test advances it (never sleeps for a timeout)."""
    return ManualClock(START_MS)

@pytest.fixture
def app(redis_url: str, clock: ManualClock) -> Antre:
    """An ``Antre`` on the test Redis (no database), on ``clock``."""
    return Antre(redis_url=redis_url, clock=clock)

@pytest.fixture
def q(app: Antre) -> Queue:
    """``app``'s default queue."""
    return app.queue()

@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes a test started (it appends them): those still running are killed after
    it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)
