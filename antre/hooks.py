"""Lifecycle hooks: code of yours (or of a library: ``antre.integrations.sentry``) told what
happens to jobs, without a say in it.

Subclass ``Hook``, override the methods you need (plain or ``async def``), and add it:

```python
from antre import Antre
from antre.hooks import Hook, JobEvent

class Alert(Hook):
    def on_dead(self, event: JobEvent) -> None:
        print(f"{event.job_type} {event.job_id} is dead: {event.error}")

app = Antre()
app.add_hook(Alert())
```

========================  =====================================================  ==========
method                    when                                                    where
========================  =====================================================  ==========
``on_enqueue(Enqueued)``  a job was stored (``enqueue``, ``aenqueue``,            producer
                          ``enqueue_many``, a flow's jobs, ``session=``: written
                          to the outbox)
``before_job(JobEvent)``  its handler is about to run (lock, limits and          worker
                          idempotency claim taken)
``after_job(JobEvent)``   it succeeded and its result was recorded               worker
``on_retry(JobEvent)``    it failed and was scheduled again (an attempt spent)   worker
``on_dead(JobEvent)``     it went to the dead-letter queue (a permanent error,   worker
                          attempts spent, too old, held back too often)
``on_tick(Tick)``         a periodic schedule's tick was enqueued                scheduler
========================  =====================================================  ==========

A hook only watches. Its exceptions (and an async one's timeout) are caught and logged, at most
once a minute per hook and method with the hook's name; they never fail, lose or change a job
or an enqueue. The worker calls hooks after the job's outcome is written to Redis, so a hook
that hangs holds up that runner thread, never the job's own state. An ``async def`` method runs
on a loop of its own thread (awaited directly from ``aenqueue``), waited for up to
``Hooks.timeout_s``. A duplicate delivery answered from its completed idempotency record, a job
held back without spending an attempt, handed back at shutdown or cancelled by an operator
calls none of ``after_job`` / ``on_retry`` / ``on_dead``.

Without a hook each call site costs one attribute test. The events are plain slotted
dataclasses (read them; changing one changes nothing of the job).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from antre.engine.envelope import Job
    from antre.maintenance.periodic import Schedule

__all__ = ["Enqueued", "Hook", "Hooks", "JobEvent", "Tick", "EVENTS"]

log = logging.getLogger("antre.hooks")

EVENTS = ("on_enqueue", "before_job", "after_job", "on_retry", "on_dead", "on_tick")
LOG_EVERY_S = 60.0  # a failing hook method's error is logged at most this often
DEFAULT_TIMEOUT_S = 10.0  # an async hook method is waited for this long

Returns = Awaitable[None] | None
H = TypeVar("H", bound="Hook")


@dataclass(slots=True)
class Enqueued:
    """A job as it was stored: its id (the existing job's for a ``unique`` one already
    pending) and what it was given."""

    job_id: str
    job_type: str
    queue: str
    idempotency_key: str
    payload: Any
    lock_key: str | None = None
    delay_s: float = 0.0
    group: str | None = None
    flow_id: str = ""


@dataclass(slots=True)
class JobEvent:
    """One job in the worker. ``attempt`` is 1-based (the attempt that ran). For ``on_retry`` and
    ``on_dead``: ``error`` (the error's text), ``error_kind`` (``retryable``, ``permanent``,
    ``timeout``, ``expired``, ...), ``traceback`` (text), ``exception`` (the exception the
    handler raised, when there is one) and ``signature``: the error group's signature the
    dashboard groups dead jobs by (``'<kind>: <normalised error>'``). ``delay_ms``: a retry's
    backoff. ``result``: the handler's result, for ``after_job``."""

    job: Job
    attempt: int
    duration_ms: int | None = None
    result: Any = None
    error: str = ""
    error_kind: str = ""
    traceback: str = ""
    exception: BaseException | None = None
    signature: str = ""
    delay_ms: int = 0

    @property
    def job_id(self) -> str:
        return self.job.id

    @property
    def job_type(self) -> str:
        return self.job.type

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def idempotency_key(self) -> str:
        return self.job.idempotency_key


@dataclass(slots=True)
class Tick:
    """A periodic schedule's tick, enqueued as the job ``job_id`` (the job's idempotency key is
    ``idempotency_key``)."""

    schedule: Schedule
    tick_ms: int
    job_id: str
    queue: str
    idempotency_key: str


class Hook:
    """Base class of a hook: every method does nothing; override those you need, as plain
    methods or ``async def``. The hook's name in log lines is ``name`` (its class name)."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def on_enqueue(self, event: Enqueued) -> Returns:
        return None

    def before_job(self, event: JobEvent) -> Returns:
        return None

    def after_job(self, event: JobEvent) -> Returns:
        return None

    def on_retry(self, event: JobEvent) -> Returns:
        return None

    def on_dead(self, event: JobEvent) -> Returns:
        return None

    def on_tick(self, event: Tick) -> Returns:
        return None


def _overridden(hook: Hook) -> list[tuple[str, Callable[[Any], Returns]]]:
    """The methods of ``hook`` its class overrides (the others are never called)."""
    if not isinstance(hook, Hook):
        raise TypeError(f"add_hook takes an antre.hooks.Hook (subclass it and override the "
                        f"methods you need), not {type(hook).__name__}")
    methods: dict[str, Callable[[Any], Returns]] = {
        "on_enqueue": hook.on_enqueue, "before_job": hook.before_job,
        "after_job": hook.after_job, "on_retry": hook.on_retry, "on_dead": hook.on_dead,
        "on_tick": hook.on_tick}
    return [(event, method) for event, method in methods.items()
            if getattr(type(hook), event) is not getattr(Hook, event)]


class Hooks:
    """The hooks of one app (``app.hooks``). Each event's tuple of methods is empty until a
    hook overrides it: a call site tests it (``if hooks.after_job:``) before building an
    event. ``errors`` counts the failures by ``'<hook>.<method>'``."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.on_enqueue: tuple[Callable[[Any], Returns], ...] = ()
        self.before_job: tuple[Callable[[Any], Returns], ...] = ()
        self.after_job: tuple[Callable[[Any], Returns], ...] = ()
        self.on_retry: tuple[Callable[[Any], Returns], ...] = ()
        self.on_dead: tuple[Callable[[Any], Returns], ...] = ()
        self.on_tick: tuple[Callable[[Any], Returns], ...] = ()
        self.hooks: list[Hook] = []
        self.monotonic = monotonic
        self.timeout_s = timeout_s
        self.errors: Counter[str] = Counter()
        self._logged: dict[str, tuple[float, int]] = {}  # key -> (logged at, failures since)
        self._names: dict[int, str] = {}  # id of a stored method -> '<hook>.<method>'
        self._guard = threading.Lock()
        self._loop: _Loop | None = None

    def add(self, hook: H) -> H:
        methods = _overridden(hook)
        with self._guard:
            self.hooks.append(hook)
            for event, method in methods:
                setattr(self, event, (*getattr(self, event), method))
                self._names[id(method)] = f"{hook.name}.{event}"
        return hook

    def remove(self, hook: Hook) -> None:
        """Take ``hook`` out (nothing if it is not in)."""
        with self._guard:
            if hook not in self.hooks:
                return
            self.hooks.remove(hook)
            for event in EVENTS:
                kept = []
                for method in getattr(self, event):
                    if getattr(method, "__self__", None) is hook:
                        self._names.pop(id(method), None)
                    else:
                        kept.append(method)
                setattr(self, event, tuple(kept))

    def __bool__(self) -> bool:
        return bool(self.hooks)

    # -- calling ---------------------------------------------------------------------------
    def emit(self, methods: Iterable[Callable[[Any], Returns]], event: object) -> None:
        """Call each method with ``event``; an ``async def`` one is run on the hooks' loop and
        waited for (up to ``timeout_s``). Never raises an ``Exception``."""
        for method in methods:
            try:
                returned = method(event)
                if returned is not None and inspect.isawaitable(returned):
                    self._run_async(returned)
            except Exception as exc:
                self.failed(method, exc)

    async def aemit(self, methods: Iterable[Callable[[Any], Returns]], event: object) -> None:
        """``emit`` from a coroutine: an ``async def`` method is awaited on the caller's loop."""
        for method in methods:
            try:
                returned = method(event)
                if returned is not None and inspect.isawaitable(returned):
                    await asyncio.wait_for(_awaited(returned), self.timeout_s)
            except Exception as exc:
                self.failed(method, exc)

    def _run_async(self, awaitable: Awaitable[None]) -> None:
        loop = self._loop
        if loop is None or not loop.alive():
            with self._guard:
                if self._loop is None or not self._loop.alive():
                    self._loop = _Loop()
                loop = self._loop
        loop.run(_awaited(awaitable), self.timeout_s)

    def failed(self, method: Callable[..., Any], exc: Exception) -> None:
        """Count a hook method's failure; log it unless one was logged less than
        ``LOG_EVERY_S`` ago (that line then says how many were not)."""
        key = self._names.get(id(method)) or str(getattr(method, "__qualname__", "?"))
        now = self.monotonic()
        with self._guard:
            self.errors[key] += 1
            at, quiet = self._logged.get(key, (-LOG_EVERY_S, 0))
            if now - at < LOG_EVERY_S:
                self._logged[key] = (at, quiet + 1)
                return
            self._logged[key] = (now, 0)
        more = f" ({quiet} more since the last line)" if quiet else ""
        log.error("hook %s raised %s: %s%s; the job is not affected", key,
                  type(exc).__name__, exc, more, exc_info=exc,
                  extra={"event": "hook_failed", "hook": key})


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


class _Loop:
    """An event loop on a daemon thread of its own, for async hook methods called from
    threads (the worker's runners, ``enqueue``). Made again in a forked child."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="antre-hooks-loop")
        self.thread.start()

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, None], timeout_s: float) -> None:
        """Run ``coro`` on the loop and wait for it; called from the loop's own thread (an
        async hook that enqueues), it is only scheduled: waiting there would never end."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout_s), self.loop)
        if threading.current_thread() is not self.thread:
            future.result()
