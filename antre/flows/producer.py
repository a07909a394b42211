"""The producer's side of flows, as ``Antre`` offers it (``app.chain``, ``app.parallel``,
``app.chord``, ``app.batch``, ``app.flow``): which queue a flow goes to, the job types checked
against the app's handlers, the flow's record, then one store call (``store.py``).

The queue: ``queue=`` on ``enqueue``, else the first job's handler's queue, else the app's
default. Every job of a flow is in that queue (one Redis hash tag: one Cluster slot), so a job
whose handler runs on another queue is refused (``InvalidJob`` saying what to pass). Job types:
with handlers registered in the app, each job's type must be one of them (a typo would leave
the flow waiting on a job no worker runs); an app with none registered (a pure producer) checks
the names only, as ``enqueue`` does, and a worker buries a job of a type it does not know.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import redis

from antre.engine import partitions
from antre.engine.envelope import JobSpec, new_job_id
from antre.engine.queue import Queue
from antre.errors import InvalidJob
from antre.flows import store
from antre.flows.compose import Chain, Chord, FlowOptions, Parallel, Starter, Step, compile_steps
from antre.flows.handle import Batch, Flow
from antre.flows.read import FlowReader
from antre.flows.store import FlowError, Member


class _Handler(Protocol):
    queue: str


class App(Protocol):
    """What a ``FlowProducer`` needs of ``Antre``."""

    default_queue: str

    @property
    def handlers(self) -> Mapping[str, Any]: ...

    @property
    def redis(self) -> "redis.Redis": ...

    def queue(self, name: str | None = None) -> Queue: ...

    def partitions_of(self, name: str | None = None) -> partitions.Partitions: ...

    def job_queue(self, queue: str, job_id: str) -> Queue: ...


class FlowProducer(Starter):
    """``on_stored(queue, flow_id, specs)``: told of each flow's jobs once they are stored (the
    app's ``on_enqueue`` hooks)."""

    def __init__(self, app: App,
                 on_stored: Callable[[Queue, str, list[JobSpec]], None] | None = None) -> None:
        self.app = app
        self.on_stored = on_stored

    # -- compositions --------------------------------------------------------------------
    def chain(self, *steps: Step) -> Chain:
        return Chain(*steps, starter=self)

    def parallel(self, steps: Iterable[Step]) -> Parallel:
        return Parallel(steps, starter=self)

    def chord(self, header: Parallel | Iterable[Step], callback: Step) -> Chord:
        return Chord(header, callback, starter=self)

    def start(self, root: Step, options: FlowOptions) -> Flow:
        """Compile ``root``, check it, store it whole; its handle."""
        compiled = compile_steps(root)
        q = self._partition(self._queue(options.queue, [n.spec for n in compiled.nodes]),
                            options.flow_id, [n.spec for n in compiled.nodes])
        ids = store.member_ids(compiled.nodes, q)
        members = store.members_of(compiled.nodes, ids)
        self._check_members(q, members, options.queue is None)
        flow_id = q.partition_id(options.flow_id or new_job_id())
        meta = self._meta(q, flow_id, compiled.kind, options.policy, options.description)
        meta["exits"] = json.dumps([ids[i] for i in compiled.exits])
        store.store_new(q, flow_id, members, meta)
        if self.on_stored is not None:
            self.on_stored(q, flow_id, [m.spec for m in members])
        return Flow(q, flow_id)

    # -- batches -------------------------------------------------------------------------
    def batch(self, *, on_success: JobSpec | None = None, on_complete: JobSpec | None = None,
              description: str = "", queue: str | None = None,
              flow_id: str | None = None) -> Batch:
        """A new open batch (stored now, with its callbacks held)."""
        options = FlowOptions.of(queue=queue, description=description, flow_id=flow_id)
        hooks = [(name, spec) for name, spec in (("on_success", on_success),
                                                  ("on_complete", on_complete))
                 if spec is not None]
        for name, spec in hooks:
            if not isinstance(spec, JobSpec):
                raise InvalidJob(f"{name} is one job: pass app.spec(...) or task.spec(...)")
        q = self._partition(self._queue(options.queue, [spec for _, spec in hooks]),
                            options.flow_id, [spec for _, spec in hooks])
        members = [Member(dataclasses.replace(
            spec, job_id=q.partition_id(spec.job_id or new_job_id())), hook=name)
            for name, spec in hooks]
        same = options.queue is None
        self._check_members(q, members, same)
        flow_id = q.partition_id(options.flow_id or new_job_id())
        meta = self._meta(q, flow_id, "batch", "batch", options.description)
        meta["open"] = "1"
        for m in members:
            meta[m.hook] = m.spec.job_id or ""
        store.store_new(q, flow_id, members, meta)
        return Batch(q, flow_id, lambda added: self._check_members(q, added, same))

    # -- handles -------------------------------------------------------------------------
    def flow(self, flow_id: str, queue: str | None = None) -> Flow:
        """The handle of a stored flow; without ``queue``, looked for in the app's queues
        (``FlowError`` when none has it)."""
        names = [queue] if queue else self._queues()
        reader = FlowReader(self.app.redis)
        for name in names:
            row = reader.get(name, flow_id)
            if row is not None:
                q = self.app.job_queue(name, flow_id)
                if row.kind == "batch":
                    return Batch(q, flow_id, lambda added: self._check_members(q, added, False))
                return Flow(q, flow_id)
        raise FlowError(f"no flow {flow_id} in queue(s) {', '.join(names)}")

    def _queues(self) -> list[str]:
        handlers = self.app.handlers
        return sorted({self.app.default_queue} | {h.queue for h in handlers.values()},
                      key=lambda n: n != self.app.default_queue)

    def _partition(self, q: Queue, flow_id: str | None, specs: Sequence[JobSpec]) -> Queue:
        """The partition a new flow goes to, whole (its scripts need one slot): the one its
        given id names (no suffix: partition 0); else its first job's with a group or a
        lock_key (so that key's order and that group's limit hold); else round robin."""
        parts = self.app.partitions_of(q.name)
        if flow_id:
            p = parts.route(JobSpec("flow", None, "flow", job_id=flow_id))
        else:
            keyed = next((s for s in specs if partitions.spread_key(s) is not None), None)
            p = parts.route(keyed if keyed is not None else JobSpec("flow", None, "flow"))
        return parts.queue(p)

    # -- checks --------------------------------------------------------------------------
    def _queue(self, given: str | None, specs: Sequence[JobSpec]) -> Queue:
        if given:
            return self.app.queue(given)
        handler = self.app.handlers.get(specs[0].job_type) if specs else None
        return self.app.queue(handler.queue if handler is not None else None)

    def _check_members(self, q: Queue, members: Sequence[Member],
                       same_queue: bool = True) -> None:
        """Each job's type has a handler here (when the app has any), on the flow's queue
        (unless the flow's queue was given: then every job goes there, as ``enqueue(queue=)``
        sends a job to it)."""
        handlers = self.app.handlers
        for m in members:
            if not isinstance(m.spec, JobSpec):
                raise InvalidJob("a job of a flow is a JobSpec: app.spec(...) or task.spec(...)")
            if not handlers:
                continue
            handler = handlers.get(m.spec.job_type)
            if handler is None:
                raise InvalidJob(
                    f"job type {m.spec.job_type!r} has no handler in this app (registered: "
                    f"{', '.join(sorted(handlers)[:20])}); register it, or fix the name: "
                    "nothing of the flow was stored")
            if same_queue and handler.queue != q.name:
                raise InvalidJob(
                    f"job type {m.spec.job_type!r} runs on queue {handler.queue!r}, the flow "
                    f"on {q.name!r}: every job of a flow is in one queue; pass the "
                    f"flow's queue= (every job goes there), or register its handler on "
                    f"{q.name!r}")

    def _meta(self, q: Queue, flow_id: str, kind: str, policy: str,
              description: str) -> dict[str, str]:
        return {"id": flow_id, "queue": q.name, "kind": kind, "policy": policy,
                "description": description, "rmax": str(store.result_max()), "open": "0"}
