"""Typed tasks: ``@app.task`` turns a handler into a ``Task`` whose ``enqueue`` takes the
handler's own parameters, so mypy and editors check a producer's arguments (``ParamSpec``).

```python
@app.task(key=lambda to, subject: f"email:{to}:{subject}", max_attempts=5)
def send_email(ctx: JobContext, to: str, subject: str) -> dict[str, str]:
    ...

send_email.enqueue(to="a@example.org", subject="welcome")          # key from ``key=``
send_email.using(idempotency_key="email:42", delay_s=60).enqueue(to="a@example.org",
                                                                 subject="hi")
```

The payload is the handler's arguments by name (a JSON object); the worker calls
``fn(ctx, **payload)``. With ``model=`` (a dataclass, or a pydantic model) the handler takes one
argument of that type: it is checked at enqueue (``InvalidJob`` naming the field) and rebuilt in
the worker, where a payload that no longer fits goes to the DLQ with the validation error. The
string API (``app.enqueue("send_email", {...})``) reaches the same handler.

``Task.schema()`` is what the payload must be (the fields, their types and defaults, read from
the model or the signature: the dashboard's job page shows it) and ``Task.problem(payload)``
why a payload would not fit (the worker's own check: the edited-payload replay refuses it).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, Protocol,
                    TypeVar, cast)

from antre.errors import InvalidJob, Permanent

if TYPE_CHECKING:
    from antre.engine.envelope import JobSpec

P = ParamSpec("P")
R = TypeVar("R")
TaskFn = Callable[Concatenate[Any, P], R]


@dataclass(frozen=True)
class Field:
    """One field of a task's payload: its type as written, and its default as JSON text
    ('' when the field is required)."""

    name: str
    type: str
    required: bool
    default: str = ""


@dataclass(frozen=True)
class Schema:
    """What a task's payload must be: ``model`` ('' for the handler's own parameters)."""

    task: str
    model: str
    fields: tuple[Field, ...]


class Producer(Protocol):
    """What a task enqueues through (``Antre``): its ``enqueue``, ``aenqueue`` and ``spec``,
    called with the job type, the payload and the enqueue options."""

    @property
    def enqueue(self) -> Callable[..., str]: ...

    @property
    def aenqueue(self) -> Callable[..., Coroutine[Any, Any, str]]: ...

    @property
    def spec(self) -> Callable[..., JobSpec]: ...


class Task(Generic[P, R]):
    """A registered handler with a typed producer side; calling it runs the handler itself."""

    def __init__(self, app: Producer, name: str, fn: TaskFn[P, R], *,
                 key: Callable[..., str] | None = None, model: type | None = None) -> None:
        self.app, self.name, self.fn, self.key, self.model = app, name, fn, key, model
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        if not params or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params[1:]):
            raise InvalidJob(f"task {name!r}: the handler takes (ctx, ...) with named "
                             "parameters (no *args / **kwargs): they are the payload's fields")
        if model is not None and len(params) != 2:
            raise InvalidJob(f"task {name!r}: with model= the handler takes (ctx, payload)")

    def __call__(self, ctx: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(ctx, *args, **kwargs)

    # -- the producer's side -------------------------------------------------------------
    def payload(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """The stored payload of these arguments; ``InvalidJob`` when they do not fit."""
        try:
            bound = self.signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise InvalidJob(f"{self.name}: {exc}") from None
        fields = {k: v for k, v in list(bound.arguments.items())[1:]}
        if self.model is None:
            return fields
        (value,) = fields.values()
        return _dump(self.name, self.model, value)

    def idempotency_key(self, *args: P.args, **kwargs: P.kwargs) -> str:
        if self.key is None:
            raise InvalidJob(f"task {self.name!r} has no key=: give the key with "
                             f"{self.name}.using(idempotency_key=...).enqueue(...)")
        return self.key(*args, **kwargs)

    def using(self, **options: Any) -> Bound[P, R]:
        """Enqueue options (``idempotency_key``, ``lock_key``, ``delay_s``, ``queue``,
        ``session``, ``unique``, ...) for the next ``enqueue`` / ``spec``."""
        return Bound(self, options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        return self.using().enqueue(*args, **kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        return await self.using().aenqueue(*args, **kwargs)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        return self.using().spec(*args, **kwargs)

    # -- the worker's side ---------------------------------------------------------------
    def arguments(self, payload: Any) -> dict[str, Any]:
        """The handler's keyword arguments from a stored payload; ``Permanent`` (to the DLQ,
        with the reason) when the payload no longer fits the handler."""
        if self.model is not None:
            name = list(self.signature.parameters)[1]
            return {name: _load(self.name, self.model, payload)}
        if not isinstance(payload, dict):
            raise Permanent(f"payload of {self.name} must be a JSON object of its arguments, "
                            f"not {type(payload).__name__}")
        try:
            self.signature.bind(None, **payload)
        except TypeError as exc:
            raise Permanent(f"payload does not fit {self.name}{self.signature}: {exc}") from None
        return payload

    def problem(self, payload: Any) -> str:
        """Why ``payload`` would not fit this task in the worker ('' when it fits)."""
        try:
            self.arguments(payload)
        except Permanent as exc:
            return str(exc)
        return ""

    def schema(self) -> Schema:
        """The payload's fields, types and defaults (from the model, else the signature)."""
        if self.model is None:
            hints = _hints(self.fn)
            params = list(self.signature.parameters.values())[1:]
            return Schema(self.name, "", tuple(
                Field(p.name, _type_name(hints.get(p.name, p.annotation)),
                      p.default is p.empty, _default(p.default, None))
                for p in params))
        return Schema(self.name, self.model.__name__, _model_fields(self.model))

    def json_schema(self) -> dict[str, Any] | None:
        """The JSON schema of ``model=`` (None without one): a pydantic model's own
        (``model_json_schema``), a dataclass's from its fields' types (unknown fields refused,
        as the worker refuses them)."""
        if self.model is None:
            return None
        if hasattr(self.model, "model_json_schema"):  # pydantic
            return cast(dict[str, Any], self.model.model_json_schema())
        return _dataclass_schema(self.model, set())

    def handler(self) -> Callable[[Any, Any], Any]:
        """The ``fn(ctx, payload)`` the worker runs (a coroutine function for an async task)."""
        fn: Callable[..., Any] = self.fn  # called with the payload's fields by name
        if inspect.iscoroutinefunction(fn):
            async def run_async(ctx: Any, payload: Any) -> Any:
                return await fn(ctx, **self.arguments(payload))
            return run_async

        def run(ctx: Any, payload: Any) -> Any:
            return fn(ctx, **self.arguments(payload))
        return run


class Bound(Generic[P, R]):
    """A task with its enqueue options: ``task.using(idempotency_key=...).enqueue(...)``."""

    def __init__(self, task: Task[P, R], options: dict[str, Any]) -> None:
        self.task, self.options = task, options

    def _options(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        options = dict(self.options)
        if "idempotency_key" not in options:
            options["idempotency_key"] = self.task.idempotency_key(*args, **kwargs)
        return options

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        task = self.task
        return task.app.enqueue(task.name, task.payload(*args, **kwargs),
                                **self._options(*args, **kwargs))

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        task = self.task
        return await task.app.aenqueue(task.name, task.payload(*args, **kwargs),
                                       **self._options(*args, **kwargs))

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        task = self.task
        options = self._options(*args, **kwargs)
        options.pop("queue", None)
        return task.app.spec(task.name, task.payload(*args, **kwargs), **options)


def _dump(name: str, model: type, value: Any) -> Any:
    """A model instance (or the dict of its fields) as the JSON payload, validated."""
    if isinstance(value, dict):
        value = _build(name, model, value, InvalidJob)
    if not isinstance(value, model):
        raise InvalidJob(f"{name}: the payload must be a {model.__name__}, not "
                         f"{type(value).__name__}")
    if hasattr(value, "model_dump"):  # pydantic
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise InvalidJob(f"{name}: model= takes a dataclass or a pydantic model")


def _load(name: str, model: type, payload: Any) -> Any:
    if not isinstance(payload, dict):
        raise Permanent(f"payload of {name} must be a JSON object fitting {model.__name__}, "
                        f"not {type(payload).__name__}")
    return _build(name, model, payload, Permanent)


def _build(name: str, model: type, fields: dict[str, Any], error: type[Exception]) -> Any:
    """``model`` from ``fields``: a dataclass's unknown or missing fields, or a pydantic
    model's validation errors, raised as ``error`` naming the field."""
    if hasattr(model, "model_validate"):  # pydantic
        try:
            return model.model_validate(fields)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise error(f"payload does not fit {model.__name__}: {exc}") from None
    if dataclasses.is_dataclass(model):
        known = {f.name for f in dataclasses.fields(model) if f.init}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise error(f"payload does not fit {model.__name__}: unknown field "
                        f"{unknown[0]!r}")
        try:
            return model(**fields)
        except TypeError as exc:
            raise error(f"payload does not fit {model.__name__}: {exc}") from None
    raise InvalidJob(f"{name}: model= takes a dataclass or a pydantic model")


def _model_fields(model: type) -> tuple[Field, ...]:
    fields = getattr(model, "model_fields", None)
    if isinstance(fields, dict):  # pydantic
        return tuple(Field(name, _type_name(info.annotation), bool(info.is_required()),
                           "" if info.is_required() else
                           _default(info.default, info.default_factory))
                     for name, info in fields.items())
    hints = _hints(model)
    return tuple(Field(f.name, _type_name(hints.get(f.name, f.type)),
                       f.default is dataclasses.MISSING
                       and f.default_factory is dataclasses.MISSING,
                       _default(f.default, f.default_factory))
                 for f in dataclasses.fields(model) if f.init)


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               type(None): "null", dict: "object", list: "array",
                               tuple: "array", set: "array", frozenset: "array"}


def _dataclass_schema(model: Any, seen: set[Any]) -> dict[str, Any]:
    """A dataclass's fields as a JSON schema object (a field's default where it is JSON)."""
    hints = _hints(model)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(model):
        if not f.init:
            continue
        prop = _json_type(hints.get(f.name, f.type), seen | {model})
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        elif f.default is not dataclasses.MISSING:
            try:
                json.dumps(f.default)
                prop = {**prop, "default": f.default}
            except (TypeError, ValueError):
                pass
        properties[f.name] = prop
    out: dict[str, Any] = {"title": model.__name__, "type": "object", "properties": properties,
                           "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def _json_type(annotation: Any, seen: set[Any]) -> dict[str, Any]:
    """One type hint as JSON schema ({} for what it cannot say: any value)."""
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        return {"anyOf": [_json_type(a, seen) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        items = [a for a in args if a is not Ellipsis]
        return {"type": "array", **({"items": _json_type(items[0], seen)} if items else {})}
    if origin is dict:
        return {"type": "object",
                **({"additionalProperties": _json_type(args[1], seen)} if len(args) == 2 else {})}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return {"title": annotation.__name__} if annotation in seen else \
            _dataclass_schema(annotation, seen)
    return {}


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # noqa: BLE001 - a forward reference the module cannot resolve
        return {}


def _type_name(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return "any"
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(value: Any, factory: Any) -> str:
    if callable(factory) and factory is not dataclasses.MISSING:
        return f"{getattr(factory, '__name__', 'factory')}()"
    if value is inspect.Parameter.empty or value is dataclasses.MISSING:
        return ""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
