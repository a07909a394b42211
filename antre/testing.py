"""Testing an app that uses Antre: a private Redis started for you, the jobs run in-process by
the worker's own code, and assertions on what was enqueued.

```python
# conftest.py
pytest_plugins = ["antre.testing"]

# test_orders.py
from antre.testing import assert_enqueued, drain

def test_an_order_sends_its_receipt(antre_app):
    @antre_app.handler("receipt")
    def receipt(ctx, payload): ...

    antre_app.enqueue("receipt", {"order": 7}, idempotency_key="receipt:7")
    assert_enqueued(antre_app, type="receipt", payload={"order": 7})
    assert drain(antre_app).succeeded
```

- The fixtures: ``antre_server`` (one embedded Redis for the test session, ``antre.embedded``)
  and ``antre_app`` (a new ``Antre`` on it for each test, the server flushed first, on a
  ``ManualClock`` started at the wall clock's time, recording what it enqueues). Outside pytest,
  ``embedded_app()`` gives the same app in a ``with`` block. ``bind(app, url)`` points an app of
  your own (one built at import, with its handlers) at the server before it first connects.
- ``drain(app)`` runs everything enqueued to completion with a real ``WorkerProcess`` in this
  process (``run_burst``, one runner thread), again and again: after each burst the app's clock
  is moved to the next scheduled job (a retry's backoff, a delay, a rate limit's next window), so
  retries, flows, per-key turns and group limits go as in production, without waiting.
- ``inline(app)``: within the block every enqueue is drained before it returns (handlers run
  "at enqueue"), as Celery's eager mode or Sidekiq's inline testing do, through the same worker.
- ``assert_enqueued(app, type=..., payload=..., queue=...)``: what was enqueued (by the test or
  by handlers), ``payload`` matched field by field for a dict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from antre import Antre
from antre.clock import ManualClock, system_ms
from antre.embedded import EmbeddedRedis
from antre.hooks import Enqueued, Hook, JobEvent
from antre_worker.runner import WorkerProcess

__all__ = ["Drained", "Recorder", "assert_enqueued", "assert_not_enqueued", "bind", "clear",
           "drain", "embedded_app", "enqueued", "inline", "record", "antre_app", "antre_server"]

MAX_ROUNDS = 1_000  # drain gives up (RuntimeError) after this many bursts
_ANY = object()  # "not given" (None is a payload)
_draining: set[int] = set()  # id() of the apps being drained now
_guard = threading.Lock()


# -- what happened: one recording hook per app ----------------------------------------------
class Recorder(Hook):
    """Records enqueues and outcomes of one app (``record(app)``)."""

    def __init__(self) -> None:
        self.enqueued: list[Enqueued] = []
        self.succeeded: list[JobEvent] = []
        self.retried: list[JobEvent] = []
        self.dead: list[JobEvent] = []

    def on_enqueue(self, event: Enqueued) -> None:
        self.enqueued.append(event)

    def after_job(self, event: JobEvent) -> None:
        self.succeeded.append(event)

    def on_retry(self, event: JobEvent) -> None:
        self.retried.append(event)

    def on_dead(self, event: JobEvent) -> None:
        self.dead.append(event)


def record(app: Antre) -> Recorder:
    """The app's recorder, added on first call (the fixtures and ``embedded_app`` add it)."""
    for hook in app.hooks.hooks:
        if isinstance(hook, Recorder):
            return hook
    recorder = Recorder()
    app.add_hook(recorder)
    return recorder


def clear(app: Antre) -> None:
    """Forget what ``app`` recorded (an app kept across tests: clear it in its fixture)."""
    recorder = record(app)
    for events in (recorder.enqueued, recorder.succeeded, recorder.retried, recorder.dead):
        events.clear()


def enqueued(app: Antre) -> list[Enqueued]:
    """Every job enqueued through ``app`` since it was recorded, in order."""
    return list(record(app).enqueued)


# -- apps on an embedded server -------------------------------------------------------------
def bind(app: Antre, redis_url: str, *, clock: ManualClock | None = None) -> Antre:
    """Point ``app`` at ``redis_url`` (``antre_server.url``) on a ``ManualClock`` (at the wall
    clock's time unless given), recording what it enqueues. Only before the app first
    connected: ``RuntimeError`` otherwise (bind it in a fixture, before anything uses it)."""
    if app._redis is not None or app._aredis is not None:
        raise RuntimeError("this app is connected already: bind(app, url) before it first "
                           "uses Redis (in a fixture, ahead of the code under test)")
    app._redis_url = redis_url
    app.clock = clock or ManualClock(system_ms())
    record(app)
    return app


@contextlib.contextmanager
def embedded_app(*, database: bool = False, **options: Any) -> Iterator[Antre]:
    """An ``Antre`` (``options`` as its own) on a new embedded Redis, stopped after the block.
    ``database=True``: with an SQLite file of its own (idempotency records, ``ctx.db``)."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(EmbeddedRedis())
        if database:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="antre-test-"))
            options.setdefault("database_url", f"sqlite:///{Path(folder) / 'antre.db'}")
        app = Antre(**options)
        yield bind(app, server.url)
        _close(app)


def _close(app: Antre) -> None:
    if app._redis is not None:
        app._redis.close()
    engine = app._sql.engine if app._sql is not None else None
    if engine is not None:
        engine.dispose()


# -- running what was enqueued ---------------------------------------------------------------
@dataclass
class Drained:
    """What one ``drain`` ran: the bursts, how far it moved the clock, the workers' counts and
    the jobs that succeeded, were retried or died meanwhile (their hooks' events)."""

    rounds: int = 0
    advanced_ms: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    succeeded: list[JobEvent] = field(default_factory=list)
    retried: list[JobEvent] = field(default_factory=list)
    dead: list[JobEvent] = field(default_factory=list)

    def raise_dead(self) -> None:
        """``AssertionError`` listing the jobs that died, with their errors and tracebacks."""
        if self.dead:
            raise AssertionError(f"{len(self.dead)} job(s) died:\n" + "\n".join(
                f"- {e.job_type} {e.job_id} (attempt {e.attempt}): {e.error}\n{e.traceback}"
                for e in self.dead))

    def add(self, other: Drained) -> None:
        self.rounds += other.rounds
        self.advanced_ms += other.advanced_ms
        self.counts.update(other.counts)
        self.succeeded += other.succeeded
        self.retried += other.retried
        self.dead += other.dead


def drain(app: Antre, *, queues: list[str] | None = None, advance: bool = True,
          max_rounds: int = MAX_ROUNDS) -> Drained:
    """Run the jobs of ``queues`` (default: the app's) until none is ready, in flight or (with
    ``advance``) scheduled: bursts of a real ``WorkerProcess`` on the app's clock, which is
    moved to the next scheduled job between them. ``advance=False`` runs only what is due now.
    Called while the app is being drained (a handler's enqueue in ``inline`` mode) it returns
    at once: the drain under way runs that job too."""
    clock = _manual_clock(app)
    names = list(queues or app.queues())
    with _guard:
        if id(app) in _draining:
            return Drained()
        _draining.add(id(app))
    try:
        return _drain(app, clock, names, advance, max_rounds)
    finally:
        with _guard:
            _draining.discard(id(app))


def _manual_clock(app: Antre) -> ManualClock:
    clock = app.clock
    if not isinstance(clock, ManualClock):
        raise RuntimeError("drain needs the app on a ManualClock: use the antre_app fixture, "
                           "embedded_app(), bind(app, url), or Antre(clock=ManualClock(...))")
    return clock


def _drain(app: Antre, clock: ManualClock, names: list[str], advance: bool,
           max_rounds: int) -> Drained:
    recorder = record(app)
    marks = (len(recorder.succeeded), len(recorder.retried), len(recorder.dead))
    out, started = Drained(), clock()
    while out.rounds < max_rounds:
        if _work_now(app, names):
            out.rounds += 1
            out.counts.update(_burst(app, clock, names))
        due = _next_due(app, names) if advance else None
        if due is None:
            break
        clock.now_ms = max(clock.now_ms, due)
    else:
        raise RuntimeError(f"drain: jobs still scheduled after {max_rounds} bursts (a job "
                           "that snoozes forever?); pass max_rounds= for more")
    out.advanced_ms = clock() - started
    out.succeeded = recorder.succeeded[marks[0]:]
    out.retried = recorder.retried[marks[1]:]
    out.dead = recorder.dead[marks[2]:]
    return out


def _burst(app: Antre, clock: ManualClock, names: list[str]) -> dict[str, int]:
    worker = WorkerProcess(app, queues=names, threads=1, clock=clock, worker_id="antre-testing",
                           heartbeat_s=3600, stop_grace_s=10)
    return worker.run_burst()


def _partitions(app: Antre, names: list[str]) -> list[Any]:
    return [q for name in names for q in app.partitions_of(name).queues()]


def _work_now(app: Antre, names: list[str]) -> bool:
    """Anything ready, in flight, or scheduled and due by the app's clock."""
    pipe = app.redis.pipeline(transaction=False)
    for q in _partitions(app, names):
        pipe.llen(q.keys.ready)
        pipe.zcard(q.keys.inflight)
        pipe.zcount(q.keys.scheduled, "-inf", app.clock())
    return any(pipe.execute())


def _next_due(app: Antre, names: list[str]) -> int | None:
    """The earliest scheduled job's time (ms), None when none is scheduled."""
    pipe = app.redis.pipeline(transaction=False)
    for q in _partitions(app, names):
        pipe.zrange(q.keys.scheduled, 0, 0, withscores=True)
    firsts = [int(rows[0][1]) for rows in pipe.execute() if rows]
    return min(firsts) if firsts else None


# -- inline mode ------------------------------------------------------------------------------
class _Inline(Hook):
    """Drains the app after each enqueue (not one made while it drains: that drain runs it)."""

    def __init__(self, app: Antre) -> None:
        self.app = app
        self.report = Drained()

    def on_enqueue(self, event: Enqueued) -> None:
        self.report.add(drain(self.app))


@contextlib.contextmanager
def inline(app: Antre, *, allow_dead: bool = False) -> Iterator[Drained]:
    """Within the block every enqueue returns once its job (and whatever it enqueued) ran to
    the end, retries included, on the worker's code. Yields the running report; at the end of
    the block a job that died raises ``AssertionError`` with its error, unless
    ``allow_dead``."""
    hook = _Inline(app)
    record(app)
    app.add_hook(hook)
    try:
        yield hook.report
    finally:
        app.hooks.remove(hook)
    if not allow_dead:
        hook.report.raise_dead()


# -- assertions -------------------------------------------------------------------------------
def _matches(event: Enqueued, job_type: str | None, payload: Any, queue: str | None,
             fields: dict[str, Any]) -> bool:
    if job_type is not None and event.job_type != job_type:
        return False
    if queue is not None and event.queue != queue:
        return False
    if payload is not _ANY and not _payload_matches(event.payload, payload):
        return False
    return all(getattr(event, name) == value for name, value in fields.items())


def _payload_matches(stored: Any, wanted: Any) -> bool:
    """A dict matches when each field given is equal (the others are not looked at)."""
    if isinstance(wanted, dict) and isinstance(stored, dict):
        return all(k in stored and _payload_matches(stored[k], v) for k, v in wanted.items())
    return bool(stored == wanted)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Enqueued))


def assert_enqueued(app: Antre, type: str | None = None, *, payload: Any = _ANY,
                    queue: str | None = None, count: int | None = None,
                    **fields: Any) -> list[Enqueued]:
    """The enqueued jobs of ``type`` (a job type) that fit ``payload`` (a dict: the fields
    given), ``queue`` and ``fields`` (any of ``Enqueued``'s: ``idempotency_key=``,
    ``lock_key=``, ``delay_s=``, ``group=``); ``AssertionError`` listing what was enqueued
    when there is none (or not ``count`` of them)."""
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise TypeError(f"assert_enqueued: unknown field(s) {unknown}; use {sorted(_FIELDS)}")
    found = [e for e in record(app).enqueued if _matches(e, type, payload, queue, fields)]
    if (count is None and not found) or (count is not None and len(found) != count):
        want = "none" if not found else f"{len(found)}"
        raise AssertionError(f"expected {count if count is not None else 'a'} job(s) of "
                             f"type={type!r} payload={_shown(payload)} queue={queue!r} "
                             f"{fields or ''}, found {want}; enqueued:\n" + _listing(app))
    return found


def assert_not_enqueued(app: Antre, type: str | None = None, *, payload: Any = _ANY,
                        queue: str | None = None, **fields: Any) -> None:
    """``AssertionError`` when a job fitting these (as ``assert_enqueued``) was enqueued."""
    assert_enqueued(app, type, payload=payload, queue=queue, count=0, **fields)


def _shown(payload: Any) -> str:
    return "(any)" if payload is _ANY else repr(payload)


def _listing(app: Antre) -> str:
    rows = record(app).enqueued
    return "\n".join(f"- {e.job_type} on {e.queue}: {e.payload!r} (key {e.idempotency_key})"
                     for e in rows[-50:]) or "(nothing)"


# -- the pytest plugin: pytest_plugins = ["antre.testing"] -----------------------------------
@pytest.fixture(scope="session")
def antre_server() -> Iterator[EmbeddedRedis]:
    """One embedded Redis for the test session (``antre.embedded.EmbeddedRedis``)."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def antre_app(antre_server: EmbeddedRedis) -> Iterator[Antre]:
    """A new ``Antre`` on ``antre_server`` (flushed first) and a ``ManualClock``, recording
    what it enqueues."""
    app = bind(Antre(), antre_server.url)
    app.redis.flushall()
    yield app
    _close(app)
