"""Every outcome is declared once and read from its declaration: each type in ``Outcome`` has
an ``OutcomeKind`` whose every field is filled and answers with the right type for every
instance the type can take, every field has a reader, and no reader in the worker switches
on an outcome's type. The outcome types and the fields are read from the code, not listed
here."""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from pathlib import Path as FilePath
from typing import Any

import pytest

import antre_worker
from antre.engine.envelope import from_fields
from antre.engine.failing import Failure
from antre_worker import outcomes
from antre_worker.held import Running
from antre_worker.outcomes import KINDS, Outcome, OutcomeKind, Path

WORKER = FilePath(antre_worker.__file__).parent
TYPES = typing.get_args(Outcome)
FIELDS = [f.name for f in dataclasses.fields(OutcomeKind)]


def _value(tp: Any) -> Any:
    """A value of the field type ``tp`` (an outcome type gets a sample of its own)."""
    if tp in TYPES:
        return _samples(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
        return None
    values: dict[Any, Any] = {Any: None, bool: False, str: "x", int: 1, float: 1.0}
    if tp not in values:
        raise AssertionError(f"no sample for a field of type {tp!r}: add one to _value")
    return values[tp]


def _samples(cls: type) -> list[Any]:
    """``cls`` with every field filled, then once more per bool field, flipped."""
    hints = typing.get_type_hints(cls, vars(outcomes))
    base = {f.name: _value(hints[f.name]) for f in dataclasses.fields(cls)}
    flipped = [dict(base, **{name: not value}) for name, value in base.items()
               if type(value) is bool]
    flipped += [dict(base, **{name: ""}) for name, value in base.items() if value == "x"]
    return [cls(**fields) for fields in [base, *flipped]]


def _running(q: Any) -> Running:
    job = from_fields({"type": "t", "idempotency_key": "k", "payload": "{}"}, q.name, "j1")
    return Running(job, q)


def test_every_outcome_type_has_one_declaration():
    assert TYPES, "Outcome names no types"
    assert set(KINDS) == set(TYPES), ("declare(...) each type of Outcome, and put each "
                                      "declared type in Outcome")


@pytest.mark.parametrize("cls", TYPES, ids=lambda c: c.__name__)
def test_each_declaration_fills_every_field(cls):
    kind = KINDS[cls]
    hints = typing.get_type_hints(OutcomeKind, vars(outcomes))
    for name in FIELDS:
        value = getattr(kind, name)
        if hints[name] is bool:
            assert type(value) is bool, f"{cls.__name__}.{name}"
        elif name != "batched":
            assert callable(value), f"{cls.__name__}.{name} is not filled"


@pytest.mark.parametrize("cls", TYPES, ids=lambda c: c.__name__)
def test_each_declaration_answers_for_every_instance(cls, q):
    kind, r = KINDS[cls], _running(q)
    for o in _samples(cls):
        path = kind.path(o)
        assert isinstance(path, Path)
        assert (path is Path.BATCH_FAIL) <= (kind.batched is not None), (
            f"{cls.__name__} settles with its batch's failures but has no batched form")
        if kind.batched is not None:
            assert isinstance(kind.batched(r, o, None), Failure)
        assert kind.event(o) and isinstance(kind.event(o), str)
        assert isinstance(kind.level(o), int)
        for reader in (kind.error_kind, kind.note, kind.snooze_reason):
            assert isinstance(reader(o), str)
        assert isinstance(kind.details(o), dict)
        assert isinstance(kind.timeline(r, o), dict)
        assert all(isinstance(c, str) and c for c in kind.counts(o))


def test_a_batched_form_belongs_to_an_outcome_that_waits_for_its_batch():
    for cls, kind in KINDS.items():
        if kind.batched is not None:
            assert any(kind.path(o) is Path.BATCH_FAIL for o in _samples(cls)), cls.__name__


def test_each_event_names_one_outcome_type():
    owner: dict[str, str] = {}
    for cls, kind in KINDS.items():
        for o in _samples(cls):
            event = kind.event(o)
            assert owner.setdefault(event, cls.__name__) == cls.__name__, (
                f"event {event!r} is both {owner[event]} and {cls.__name__}")


def _worker_trees() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text()) for p in sorted(WORKER.glob("*.py"))}


def test_every_field_of_the_declaration_has_a_reader():
    read = {node.attr for name, tree in _worker_trees().items() if name != "outcomes.py"
            for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    unread = [name for name in FIELDS if name not in read]
    assert not unread, f"OutcomeKind fields nobody reads: {unread}"


def _switches(tree: ast.Module, names: set[str]) -> list[int]:
    """Lines that test a value against an outcome type (``isinstance``, ``type(x) is``)."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance" and len(node.args) == 2):
            tested = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.Eq))
                                                   for op in node.ops):
            tested = {n.id for n in node.comparators if isinstance(n, ast.Name)}
        else:
            continue
        if tested & names:
            lines.append(node.lineno)
    return lines


def test_no_reader_switches_on_an_outcome_type():
    names = {cls.__name__ for cls in TYPES}
    found = {name: lines for name, tree in _worker_trees().items()
             if name != "outcomes.py" and (lines := _switches(tree, names))}
    assert not found, f"read the outcome's declaration (kind_of) instead: {found}"


def test_the_switch_finder_finds_a_switch():
    tree = ast.parse("if isinstance(o, (Retry, Bury)):\n    pass\nif type(o) is Ack:\n    pass\n")
    assert _switches(tree, {"Retry", "Ack"}) == [1, 3]
