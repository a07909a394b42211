"""Compositions of jobs (``chain``, ``group``, ``chord``) and their compilation into a DAG of
ordinary jobs: pure, no I/O (``antre/flows/store.py`` stores the DAG in one script call).

A step is a ``JobSpec`` (``app.spec(...)``, a typed ``task.spec(...)``) or a composition:

- ``Chain(a, b, c)``: each step starts once the previous one has completed, and gets its
  result (``ctx.previous_result``); a step that is a group fans out, and the next step fans in
  (it gets the group's results as a list);
- ``Parallel([a, b, c])``: in parallel; a group inside a chain passes on all its results;
- ``Chord(group, callback)``: the callback starts once every job of the group has completed,
  with their results in the group's order (``ctx.flow_results``).

``compile_steps`` turns a composition into ``Node``s (each with its parents, in input order,
and its children) and the ids of its last jobs, refusing with ``InvalidJob`` what cannot be a
flow: a composition that holds itself (a cycle), an empty group or chain, a chord without
jobs in its group, a step that is neither a ``JobSpec`` nor a composition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Union, cast

from antre.engine.envelope import JobSpec
from antre.errors import InvalidJob

if TYPE_CHECKING:
    from antre.flows.handle import Flow

Step = Union[JobSpec, "Chain", "Parallel", "Chord"]
POLICIES = ("fail", "ignore", "wait")
MAX_DESCRIPTION = 500


@dataclass(frozen=True)
class FlowOptions:
    """How a flow is stored: its queue (None: the first job's handler's), its policy for a
    dead job (``POLICIES``), a description for the operators, its id (None: a new one)."""

    queue: str | None = None
    policy: str = "fail"
    description: str = ""
    flow_id: str | None = None

    @classmethod
    def of(cls, *, queue: str | None = None, on_failure: str = "fail",
           ignore_failures: bool = False, description: str = "",
           flow_id: str | None = None) -> "FlowOptions":
        """The options as ``enqueue`` takes them, checked (``InvalidJob`` saying what to pass)."""
        if ignore_failures is not False and ignore_failures is not True:
            raise InvalidJob(f"ignore_failures must be True or False, not {ignore_failures!r}")
        policy = "ignore" if ignore_failures else on_failure
        if policy not in POLICIES:
            raise InvalidJob(f"on_failure must be one of {', '.join(POLICIES)}, not "
                             f"{on_failure!r}")
        if ignore_failures and on_failure not in ("fail", "ignore"):
            raise InvalidJob("ignore_failures=True is on_failure='ignore': pass one of them")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise InvalidJob(f"description must be text of at most {MAX_DESCRIPTION} "
                             "characters")
        return cls(queue, policy, description, flow_id)


class Starter:
    """What a composition's ``enqueue`` calls (``antre.flows.producer.FlowProducer``)."""

    def start(self, root: Step, options: "FlowOptions") -> "Flow":  # pragma: no cover
        raise NotImplementedError


class _Composition:
    """The common part of ``Chain``, ``Parallel`` and ``Chord``: ``enqueue`` through the app
    that made it (``app.chain(...)``)."""

    _starter: Starter | None = None

    def enqueue(self, *, queue: str | None = None, on_failure: str = "fail",
                ignore_failures: bool = False, description: str = "",
                flow_id: str | None = None) -> "Flow":
        """Store the whole flow (all or nothing) and return its handle. ``on_failure``: what
        a dead job does to the flow: 'fail' (default: the flow fails, the jobs after it do
        not run), 'ignore' (``ignore_failures=True``: they run, with the failure in its
        results) or 'wait' (they stay held, the flow waits for an operator); in every case a
        replayed dead job that then completes lets the flow go on. ``queue``: the flow's
        queue (default: the first job's handler's); every job of a flow is in it."""
        if self._starter is None:
            raise InvalidJob("this composition was not made by an app: build the outer one "
                             "with app.chain / app.parallel / app.chord (those inside it may be "
                             "Chain / Parallel / Chord made directly)")
        return self._starter.start(cast(Step, self), FlowOptions.of(
            queue=queue, on_failure=on_failure, ignore_failures=ignore_failures,
            description=description, flow_id=flow_id))


class Chain(_Composition):
    def __init__(self, *steps: Step, starter: Starter | None = None) -> None:
        self.steps: list[Step] = list(steps)
        self._starter = starter

    def __repr__(self) -> str:
        return f"Chain({len(self.steps)} steps)"


class Parallel(_Composition):
    def __init__(self, steps: Iterable[Step], starter: Starter | None = None) -> None:
        if isinstance(steps, (JobSpec, _Composition)):
            raise InvalidJob("parallel() takes a list of steps: app.parallel([a, b, c])")
        self.steps: list[Step] = list(steps)
        self._starter = starter

    def __repr__(self) -> str:
        return f"Parallel({len(self.steps)} steps)"


class Chord(_Composition):
    def __init__(self, header: "Parallel | Iterable[Step]", callback: Step,
                 starter: Starter | None = None) -> None:
        self.header = header if isinstance(header, Parallel) else Parallel(header)
        self.callback = callback
        self._starter = starter

    def __repr__(self) -> str:
        return f"Chord({len(self.header.steps)} steps, then {self.callback!r})"


@dataclass
class Node:
    """One job of a compiled flow: its spec, its parents (indexes, in input order: the order
    its results are handed over) and its children."""

    spec: JobSpec
    parents: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)


@dataclass
class Compiled:
    nodes: list[Node]
    exits: list[int]  # the flow's last jobs: their results are the flow's results
    kind: str  # 'chain', 'group', 'chord' or 'job'


def kind_of(root: Step) -> str:
    return {Chain: "chain", Parallel: "group", Chord: "chord"}.get(type(root), "job")


def compile_steps(root: Step) -> Compiled:
    """The DAG of ``root`` (``InvalidJob`` for what cannot be one; see the module)."""
    nodes: list[Node] = []
    try:
        exits = _walk(root, [], nodes, set())
    except RecursionError:
        raise InvalidJob("the flow is nested too deeply; flatten it (a chain of groups, "
                         "not a group in a group in a group ...)") from None
    return Compiled(nodes, exits, kind_of(root))


def _walk(step: Step, parents: list[int], nodes: list[Node], active: set[int]) -> list[int]:
    """Add ``step`` after ``parents``; returns its last jobs (what the next step waits on)."""
    if isinstance(step, JobSpec):
        i = len(nodes)
        nodes.append(Node(step, list(parents)))
        for p in parents:
            nodes[p].children.append(i)
        return [i]
    if not isinstance(step, (Chain, Parallel, Chord)):
        raise InvalidJob(f"a step of a flow is a JobSpec (app.spec(...), task.spec(...)) or "
                         f"a chain, group or chord, not {type(step).__name__}")
    if id(step) in active:
        raise InvalidJob(f"the flow holds a cycle: {step!r} is inside itself; build each "
                         "step once (a composition cannot contain itself)")
    active.add(id(step))
    try:
        return _walk_composition(step, parents, nodes, active)
    finally:
        active.discard(id(step))


def _walk_composition(step: "Chain | Parallel | Chord", parents: list[int], nodes: list[Node],
                      active: set[int]) -> list[int]:
    if isinstance(step, Chord):
        if not step.header.steps:
            raise InvalidJob("a chord needs at least one job in its group: pass "
                             "app.chord([a, b, ...], callback), or enqueue the callback alone")
        return _walk(step.callback, _walk(step.header, parents, nodes, active), nodes, active)
    if not step.steps:
        what = "chain" if isinstance(step, Chain) else "group"
        raise InvalidJob(f"an empty {what} is not a step: give it at least one job")
    if isinstance(step, Chain):
        exits = parents
        for s in step.steps:
            exits = _walk(s, exits, nodes, active)
        return exits
    out: list[int] = []
    for s in step.steps:
        out += _walk(s, parents, nodes, active)
    return out
