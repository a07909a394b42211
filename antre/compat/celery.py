"""Celery's call sites on Antre: change the imports, keep the code.

```python
from antre.compat.celery import Celery, shared_task     # was: from celery import ...

app = Celery("proj", broker="redis://localhost:6379/0")  # an Antre app: app.antre

@shared_task(autoretry_for=(ConnectionError,), max_retries=3)
def fetch(url: str) -> int: ...

fetch.delay("https://example.org")
fetch.apply_async(args=("https://example.org",), countdown=60, queue="io")
```

Each task is a typed Antre task (``antre.tasks``): its payload is the function's arguments by
name, shown and checked as any task's; its job type is Celery's task name
(``module.function`` unless ``name=``). What maps to what:

- ``delay(*args, **kwargs)`` and ``apply_async(args=, kwargs=, countdown=, eta=, queue=,
  task_id=, headers=, time_limit=)``; every other option raises ``UnsupportedOption`` saying
  what to do instead. ``task_id`` is the idempotency key (the same id never runs twice);
  without it each call is a new operation (a key of its own), as in Celery.
- The result: ``AsyncResult`` (``.id``, ``.get(timeout=)``, ``.ready()``, ``.successful()``,
  ``.state``), read from Antre's results (``app.result(key)``), no result backend to run.
- Failures as Celery has them: an exception fails the task (to the dead-letter queue) unless
  it is in ``autoretry_for`` or raised through ``self.retry(exc=, countdown=)`` (``bind=True``);
  ``max_retries`` retries at most (``max_attempts`` = ``max_retries`` + 1),
  ``default_retry_delay`` between them, ``retry_backoff`` for exponential backoff.
- ``task.s(...)`` / ``task.si(...)`` and ``chain``, ``group``, ``chord``: ``app.chain``,
  ``app.parallel``, ``app.chord`` (one flow); a ``.s()`` step after another gets its result
  as its first argument (after a group or as a chord's callback: the list of results).
"""

from __future__ import annotations

import inspect
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, Generic, ParamSpec, TypeVar, cast

from antre.app import Antre
from antre.engine.envelope import JobSpec
from antre.engine.retry import RetryPolicy
from antre.errors import InvalidJob, Permanent, Retryable
from antre.flows import Chain, Chord, Flow, Parallel
from antre.tasks import Task

__all__ = ["AsyncResult", "Celery", "CeleryTask", "FlowResult", "Signature", "TaskFailed",
           "UnsupportedOption", "chain", "chord", "current_app", "group", "shared_task"]

P = ParamSpec("P")
R = TypeVar("R")

RESULT_HEADER = "antre-celery-result"  # '<parameter>:one|list': the step takes its input
DEFAULT_RETRY_DELAY_S = 180.0  # Celery's default_retry_delay
APPLY_OPTIONS = ("args", "kwargs", "countdown", "eta", "queue", "task_id", "headers",
                 "time_limit")
_INSTEAD = {
    "expires": "give the task max_age_s= (jobs older than that when reserved go to the DLQ)",
    "priority": "put urgent work on a queue of its own (queue=) with workers of its own",
    "link": "chain the tasks: chain(a.s(...), b.s())", "link_error": "add a hook (antre.hooks "
    "on_dead) or chain with on_failure=", "retry_policy": "Antre's producer retries "
    "connection errors itself; leave it out", "routing_key": "use queue=",
    "exchange": "use queue=", "serializer": "payloads are JSON", "compression": "leave it out",
    "shadow": "leave it out", "soft_time_limit": "use time_limit= (the job's timeout_s: "
    "ctx.cancelled is set, JobTimeout raised at the next ctx.checkpoint())",
}


class UnsupportedOption(InvalidJob, TypeError):
    """An ``apply_async`` (or task) option Antre has no equivalent of."""


class TaskFailed(Exception):
    """``AsyncResult.get()`` of a task that failed: its error as Antre recorded it."""


class _Retry(Exception):
    """``self.retry(...)``: this attempt failed; retry after ``countdown`` (seconds)."""

    def __init__(self, exc: BaseException | None, countdown: float) -> None:
        super().__init__(str(exc) if exc is not None else "retry requested")
        self.exc, self.countdown = exc, countdown


# -- the app ---------------------------------------------------------------------------------
_apps: list[Celery] = []
_shared: list[CeleryTask[Any, Any]] = []


def current_app() -> Celery:
    """The Celery app made last (where ``shared_task`` tasks enqueue)."""
    if not _apps:
        raise InvalidJob("no Celery app: make one first (antre.compat.celery.Celery('proj', "
                         "broker=...)), before enqueueing shared tasks")
    return _apps[-1]


class Celery:
    """An Antre app (``.antre``) with Celery's decorator: ``Celery("proj", broker=URL)`` (the
    broker is the Redis URL; ``backend``, when given, must be the same or None: results live
    in Antre). Every ``shared_task`` is registered with it."""

    def __init__(self, main: str | None = None, *, broker: str | None = None,
                 backend: str | None = None, antre: Antre | None = None,
                 **options: Any) -> None:
        if options:
            raise UnsupportedOption(f"Celery({', '.join(sorted(options))}=...): not supported; "
                                    "configure Antre itself (ANTRE_* settings) instead")
        if backend is not None and backend != broker:
            raise UnsupportedOption("a result backend apart from the broker: Antre keeps results "
                                    "itself (app.result(key)); leave backend= out")
        self.main = main or "celery"
        self.antre = antre or Antre(redis_url=broker)
        _apps.append(self)
        for task in _shared:
            task.register(self.antre)

    def task(self, *args: Any, **options: Any) -> Any:
        """``@app.task`` / ``@app.task(name=..., bind=True, max_retries=3, ...)``."""
        return _decorator(args, options, self.antre)

    def send_task(self, name: str, args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None,
                  **options: Any) -> AsyncResult:
        """Enqueue the task registered as ``name`` (``apply_async``'s options)."""
        task = self.antre.tasks.get(name)
        if not isinstance(task, CeleryTask):
            raise InvalidJob(f"no Celery-style task named {name!r} in this app; registered: "
                             f"{', '.join(sorted(self.antre.tasks)) or 'none'}")
        return task.apply_async(args=tuple(args), kwargs=kwargs, **options)


def shared_task(*args: Any, **options: Any) -> Any:
    """``@shared_task`` / ``@shared_task(bind=True, autoretry_for=(...), max_retries=3, ...)``:
    registered with every ``Celery`` app, those made before and after."""
    return _decorator(args, options, None)


def share(task: CeleryTask[Any, Any]) -> None:
    """Register ``task`` with every Celery-style app, those made already and those to come."""
    _shared.append(task)
    for celery in _apps:
        task.register(celery.antre)


def _decorator(args: tuple[Any, ...], options: dict[str, Any], app: Antre | None) -> Any:
    def make(fn: Callable[..., Any]) -> CeleryTask[Any, Any]:
        task: CeleryTask[Any, Any] = CeleryTask(fn, **options)
        if app is not None:
            task.register(app)
        else:
            share(task)
        return task
    if len(args) == 1 and callable(args[0]) and not options:
        return make(args[0])
    if args:
        raise TypeError("use @shared_task or @shared_task(name=..., ...): options by name")
    return make


# -- tasks -----------------------------------------------------------------------------------
class Request:
    """``self.request`` of a bound task: its id, retries so far, arguments."""

    def __init__(self, ctx: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.id: str = ctx.job.id
        self.retries: int = ctx.attempt - 1
        self.args, self.kwargs = args, kwargs
        self.ctx = ctx


class CeleryTask(Generic[P, R]):
    """A Celery-style task over a typed Antre task (``self.typed`` once registered)."""

    def __init__(self, fn: Callable[..., R], *, name: str | None = None, bind: bool = False,
                 max_retries: int | None = 3, autoretry_for: tuple[type[BaseException], ...] = (),
                 default_retry_delay: float = DEFAULT_RETRY_DELAY_S,
                 retry_backoff: bool | float = False, retry_backoff_max: float = 600,
                 retry_jitter: bool = True, queue: str | None = None, ignore_result: bool = False,
                 **antre_options: Any) -> None:
        self.run, self.bind = fn, bind
        self.name = name or f"{fn.__module__}.{fn.__name__}"  # as Celery names it
        self.max_retries = max_retries
        self.autoretry_for, self.default_retry_delay = tuple(autoretry_for), default_retry_delay
        self.queue = queue
        self._local = threading.local()  # self.request, per runner thread
        self.options = {**antre_options, **_retry_options(max_retries, retry_backoff,
                                                          retry_backoff_max, retry_jitter)}
        self._signature = _signature_without_self(fn, bind)
        self.typed: Task[Any, Any] | None = None
        self.antre: Antre | None = None  # the app it enqueues on (the last registered with)

    def __repr__(self) -> str:
        return f"<@task: {self.name}>"

    @property
    def request(self) -> Request | None:
        """The running job's request (in a ``bind=True`` task), None outside one."""
        return cast("Request | None", getattr(self._local, "request", None))

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        """Run the function here, now (as calling a Celery task does)."""
        return self.run(self, *args, **kwargs) if self.bind else self.run(*args, **kwargs)

    def register(self, app: Antre) -> None:
        """Register the handler with ``app`` (once per app)."""
        if self.name in app.tasks:
            return
        if self.queue is not None:
            self.options.setdefault("queue", self.queue)
        wrapper = _payload_function(self._signature)
        typed: Task[Any, Any] = Task(app, self.name, wrapper, key=None)
        app.handler(self.name, **self.options)(self._handler)
        app.tasks[self.name] = typed
        self.typed, self.antre = typed, app

    def _typed(self) -> Task[Any, Any]:
        if self.typed is None:
            self.register(current_app().antre)
        assert self.typed is not None
        return self.typed

    @property
    def app(self) -> Antre:
        self._typed()
        assert self.antre is not None  # set with typed
        return self.antre

    # -- producing -----------------------------------------------------------------------
    def delay(self, *args: P.args, **kwargs: P.kwargs) -> AsyncResult:
        return self.apply_async(args=args, kwargs=kwargs)

    def apply_async(self, args: Iterable[Any] | None = None, kwargs: dict[str, Any] | None = None,
                    **options: Any) -> AsyncResult:
        """Enqueue with Celery's options (``APPLY_OPTIONS``); others: ``UnsupportedOption``."""
        typed, app = self._typed(), self.app
        key = str(options.get("task_id") or f"{self.name}:{uuid.uuid4().hex}")
        spec_options = _apply_options(options, app)
        payload = typed.payload(*(args or ()), **(kwargs or {}))
        job_id = app.enqueue(self.name, payload, idempotency_key=key, **spec_options)
        return AsyncResult(app, job_id, key)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature: in a chain it also gets the previous step's result, first."""
        return Signature(self, args, kwargs, immutable=False)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: its arguments only."""
        return Signature(self, args, kwargs, immutable=True)

    signature = s

    def retry(self, exc: BaseException | None = None, countdown: float | None = None,
              **options: Any) -> _Retry:
        """In a ``bind=True`` task: ``raise self.retry(exc=exc, countdown=10)``."""
        if options:
            raise UnsupportedOption(f"retry({', '.join(sorted(options))}=...): use exc= and "
                                    "countdown= (max_retries is the task's)")
        return _Retry(exc, self.default_retry_delay if countdown is None else countdown)

    # -- the worker's side ---------------------------------------------------------------
    def _handler(self, ctx: Any, payload: Any) -> Any:
        typed = self._typed()
        arguments = typed.arguments(_with_input(ctx, payload))
        try:
            if self.bind:
                self._local.request = Request(ctx, (), arguments)
                return self.run(self, **arguments)
            return self.run(**arguments)
        except _Retry as exc:
            raise Retryable(str(exc), retry_after_s=exc.countdown) from exc.exc
        except self.autoretry_for as exc:
            raise Retryable(f"{type(exc).__name__}: {exc}",
                            retry_after_s=None if "retry" in self.options
                            else self.default_retry_delay) from exc
        except (Retryable, Permanent):
            raise
        except Exception as exc:  # Celery: an exception fails the task, no retry
            raise Permanent(f"{type(exc).__name__}: {exc}") from exc


def _retry_options(max_retries: int | None, backoff: bool | float, backoff_max: float,
                   jitter: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"max_attempts": 1_000_000 if max_retries is None else max_retries + 1}
    if backoff:
        base_s = 1.0 if backoff is True else float(backoff)
        out["retry"] = RetryPolicy(base_ms=int(base_s * 1000), factor=2.0,
                                   cap_ms=int(backoff_max * 1000), jitter=0.5 if jitter else 0.0)
    return out


def _signature_without_self(fn: Callable[..., Any], bind: bool) -> inspect.Signature:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if bind:
        if not params:
            raise InvalidJob(f"task {fn.__qualname__}: bind=True takes self first")
        params = params[1:]
    return sig.replace(parameters=params)


def _payload_function(sig: inspect.Signature) -> Callable[..., Any]:
    """A function of ``(ctx, <the task's parameters>)``, for ``Task``'s payload binding."""
    def payload_of(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("never called: only its signature is used")
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    setattr(payload_of, "__signature__", sig.replace(parameters=[ctx, *sig.parameters.values()]))
    return payload_of


def _apply_options(options: dict[str, Any], app: Antre) -> dict[str, Any]:
    """``apply_async``'s options as ``enqueue``'s (``UnsupportedOption`` for the others)."""
    unknown = sorted(set(options) - set(APPLY_OPTIONS))
    if unknown:
        hints = "; ".join(f"{o}: {_INSTEAD.get(o, 'no equivalent')}" for o in unknown)
        raise UnsupportedOption(f"apply_async({', '.join(unknown)}=...) is not supported on "
                                f"Antre ({hints}); supported: {', '.join(APPLY_OPTIONS)}")
    out: dict[str, Any] = {}
    if options.get("queue"):
        out["queue"] = options["queue"]
    if options.get("headers"):
        out["headers"] = {str(k): str(v) for k, v in options["headers"].items()}
    if options.get("time_limit") is not None:
        out["timeout_s"] = float(options["time_limit"])
    delay = _delay_s(options.get("countdown"), options.get("eta"), app)
    if delay:
        out["delay_s"] = delay
    return out


def _delay_s(countdown: Any, eta: Any, app: Antre) -> float:
    if countdown is not None and eta is not None:
        raise UnsupportedOption("give countdown= or eta=, not both")
    if countdown is not None:
        return max(0.0, float(countdown))
    if eta is None:
        return 0.0
    if not isinstance(eta, datetime):
        raise UnsupportedOption(f"eta= takes a datetime, not {type(eta).__name__}")
    when = eta if eta.tzinfo is not None else eta.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - app.clock() / 1000)


def _with_input(ctx: Any, payload: Any) -> Any:
    """The payload with the flow's input (the previous step's result, or the list of them) as
    the parameter its header names, for a ``.s()`` step of a chain or a chord's callback."""
    wanted = ctx.job.headers.get(RESULT_HEADER, "") if ctx.job.headers else ""
    if not wanted or not isinstance(payload, dict):
        return payload
    name, _, shape = wanted.partition(":")
    value = list(ctx.flow_results) if shape == "list" else ctx.previous_result
    return {name: value, **payload}


# -- results ---------------------------------------------------------------------------------
STATES = {"completed": "SUCCESS", "failed": "FAILURE", "cancelled": "REVOKED",
          "abandoned": "FAILURE", "pending": "PENDING", "unknown": "PENDING"}


class AsyncResult:
    """A task's result as Celery's ``AsyncResult`` reads (from ``app.result(key)``)."""

    def __init__(self, app: Antre, job_id: str, idempotency_key: str) -> None:
        self.app, self.id, self.idempotency_key = app, job_id, idempotency_key

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    @property
    def state(self) -> str:
        return STATES.get(self.app.result(self.idempotency_key).status, "PENDING")

    status = state

    def ready(self) -> bool:
        return self.app.result(self.idempotency_key).final

    def successful(self) -> bool:
        return self.state == "SUCCESS"

    def failed(self) -> bool:
        return self.state == "FAILURE"

    def get_status(self) -> str:
        """RQ's word for the state: finished, failed, canceled or queued."""
        return {"SUCCESS": "finished", "FAILURE": "failed", "REVOKED": "canceled"}.get(
            self.state, "queued")

    @property
    def result(self) -> Any:
        """The return value once it succeeded, else None (as RQ's ``Job.result``)."""
        status = self.app.result(self.idempotency_key)
        return status.result if status.status == "completed" else None

    def get(self, timeout: float | None = None, propagate: bool = True) -> Any:
        """The task's return value, waiting up to ``timeout`` seconds (default: a day);
        ``TimeoutError`` if it did not end; ``TaskFailed`` if it failed (with ``propagate``)."""
        status = self.app.result(self.idempotency_key).wait(86_400 if timeout is None
                                                            else timeout)
        if status.timed_out:
            raise TimeoutError(f"task {self.id} did not end within {timeout}s")
        if status.status != "completed" and propagate:
            raise TaskFailed(status.error or status.status)
        return status.result


class FlowResult:
    """A chain's, group's or chord's result (``Flow``): ``get()`` gives the chain's last
    result, the group's list or the chord callback's result."""

    def __init__(self, flow: Flow, single: bool) -> None:
        self.flow, self.single, self.id = flow, single, flow.id

    def get(self, timeout: float | None = None) -> Any:
        row = self.flow.wait(timeout)
        if row.state != "succeeded":
            raise TaskFailed(f"flow {self.id} ended {row.state}")
        results = self.flow.results()
        return results[0] if self.single else results

    def ready(self) -> bool:
        return self.flow.status().state in ("succeeded", "failed", "cancelled")


# -- canvas: signatures, chain, group, chord -------------------------------------------------
class Signature:
    """``task.s(...)``: a task with its arguments, to compose (``chain``, ``group``,
    ``chord``) or to run (``.delay()``, ``.apply_async()``, calling it)."""

    def __init__(self, task: CeleryTask[Any, Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], *, immutable: bool) -> None:
        self.task, self.args, self.kwargs, self.immutable = task, args, kwargs, immutable

    def spec(self, takes: str = "") -> JobSpec:
        """The job of this step; ``takes`` ('one' or 'list'): it gets the flow's input as its
        first parameter (unless immutable)."""
        typed = self.task._typed()
        headers: dict[str, str] = {}
        if takes and not self.immutable:
            first = next(iter(self.task._signature.parameters), None)
            if first is None:
                raise InvalidJob(f"{self.task.name} takes no argument for the previous result: "
                                 "use .si() for a step that ignores it")
            bound = self.task._signature.bind_partial(None, *self.args, **self.kwargs)
            payload = dict(list(bound.arguments.items())[1:])
            headers[RESULT_HEADER] = f"{first}:{takes}"
        else:
            payload = typed.payload(*self.args, **self.kwargs)
        return self.task.app.spec(self.task.name, payload, headers=headers,
                              idempotency_key=f"{self.task.name}:{uuid.uuid4().hex}")

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.task.apply_async(args=(*self.args, *args), kwargs={**self.kwargs, **kwargs})

    def apply_async(self, args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None,
                    **options: Any) -> AsyncResult:
        return self.task.apply_async(args=(*self.args, *args),
                                     kwargs={**self.kwargs, **(kwargs or {})}, **options)

    __call__ = delay


class _Canvas:
    """What ``chain``, ``group`` and ``chord`` share: run as one Antre flow."""

    def app(self) -> Antre:
        raise NotImplementedError

    def steps(self, takes: str) -> Any:
        raise NotImplementedError

    def ends_in_list(self) -> bool:
        return False

    def apply_async(self, queue: str | None = None, **options: Any) -> FlowResult:
        if options:
            raise UnsupportedOption(f"{type(self).__name__}.apply_async("
                                    f"{', '.join(sorted(options))}=...): only queue= is taken")
        flow = cast(Chain | Parallel | Chord, self.steps("")).enqueue(queue=queue)
        return FlowResult(flow, single=not self.ends_in_list())

    def delay(self) -> FlowResult:
        return self.apply_async()

    __call__ = delay


def _spec_of(step: Signature | _Canvas, takes: str) -> Any:
    return step.spec(takes) if isinstance(step, Signature) else step.steps(takes)


def _app_of(step: Signature | _Canvas) -> Antre:
    return step.task.app if isinstance(step, Signature) else step.app()


class chain(_Canvas):  # noqa: N801 - Celery's name
    """``chain(a.s(1), b.s(), c.s())``: each after the previous, given its result."""

    def __init__(self, *tasks: Signature | _Canvas) -> None:
        if not tasks:
            raise InvalidJob("chain() needs at least one task")
        self.tasks = tasks

    def app(self) -> Antre:
        return _app_of(self.tasks[0])

    def steps(self, takes: str) -> Chain:
        out, prev = [], takes
        for t in self.tasks:
            out.append(_spec_of(t, prev))
            prev = "list" if isinstance(t, _Canvas) and t.ends_in_list() else "one"
        return self.app().chain(*out)

    def ends_in_list(self) -> bool:
        last = self.tasks[-1]
        return isinstance(last, _Canvas) and last.ends_in_list()


class group(_Canvas):  # noqa: N801 - Celery's name
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in ...)``: in parallel."""

    def __init__(self, *tasks: Signature | _Canvas | Iterable[Signature | _Canvas]) -> None:
        flat: list[Signature | _Canvas] = []
        for t in tasks:
            flat += [t] if isinstance(t, (Signature, _Canvas)) else list(t)
        if not flat:
            raise InvalidJob("group() needs at least one task")
        self.tasks = flat

    def app(self) -> Antre:
        return _app_of(self.tasks[0])

    def steps(self, takes: str) -> Parallel:
        return self.app().parallel([_spec_of(t, takes) for t in self.tasks])

    def ends_in_list(self) -> bool:
        return True


class chord(_Canvas):  # noqa: N801 - Celery's name
    """``chord(group_or_tasks, callback.s())``: the callback gets the list of their results."""

    def __init__(self, header: group | Iterable[Signature | _Canvas],
                 body: Signature | None = None) -> None:
        self.header = header if isinstance(header, group) else group(header)
        self.body = body

    def __call__(self, body: Signature | None = None) -> FlowResult:
        if body is not None:
            self.body = body
        return self.apply_async()

    def app(self) -> Antre:
        return self.header.app()

    def steps(self, takes: str) -> Chord:
        if self.body is None:
            raise InvalidJob("chord(header)(callback.s()): the chord has no callback")
        return self.app().chord(self.header.steps(takes), _spec_of(self.body, "list"))


def wait_all(results: Iterable[AsyncResult], timeout: float = 30.0) -> list[Any]:
    """Each result's value, in order (a helper for scripts moving from ``ResultSet.get``)."""
    deadline = time.monotonic() + timeout
    return [r.get(timeout=max(0.001, deadline - time.monotonic())) for r in results]
