"""Flow limits held at reserve: a job type's and a downstream's
concurrency and rate as *gates* of the queue ('type:<job type>', 'ds:<downstream>'), which
``reserve.lua`` applies before delivering a job (``antre/engine/lua/_gates.lua``):
a job over its gate's slots waits in the gate's line and is moved back to ready by the script
that frees a slot (ack, retry, bury, sweep, cancel); one over its gate's rate waits in
``scheduled`` for its start. Nothing is delivered, snoozed or charged.

What this module owns:

- ``plan``: which limits of an app's handlers are held, per queue, and which are not (a
  downstream whose handlers live in several queues: a queue's script sees only its own keys on
  Redis Cluster, so its limit stays the shared semaphore and token bucket of ``flow``, and an
  excess job is snoozed with the reason; likewise ``LimitPolicy(across_queues=True)``);
- ``Gates.declare``: a worker writing its plan for a queue it serves;
- the operator's live overrides of a gate's slots and rate (``set_override``, ``clear``,
  ``revert_due``), refused for a type or downstream no worker declared in that queue;
- ``Gates.limits``: what the Limits view shows (declared, override, in flight, waiting).

Like every control, none of this knows who asked or audits: the table of actions does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis

from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.engine.envelope import format_rate
from antre.engine.scripts import Scripts
from antre.limits.admission import LimitPolicy
from antre.limits.overrides import checked_override

MAX_SLOTS = 100_000
KINDS = {"type": "type", "downstream": "ds"}


class GateError(ValueError):
    """An override that was refused; the message says what to pass."""


class HandlerLike(Protocol):
    """What ``plan`` reads of a handler (``antre.app.HandlerSpec``)."""

    @property
    def queue(self) -> str: ...

    @property
    def downstream(self) -> str | None: ...

    @property
    def flow(self) -> LimitPolicy | None: ...


@dataclass
class Declaration:
    """One queue's gates as a worker declares them (``gates_declare.lua``)."""

    cand: dict[str, str] = field(default_factory=dict)  # job type -> its gates
    conc: dict[str, int] = field(default_factory=dict)  # gate -> slots
    rate: dict[str, str] = field(default_factory=dict)  # gate -> '<n>/<window ms>'

    def as_json(self) -> str:
        return json.dumps({"cand": self.cand, "conc": self.conc, "rate": self.rate},
                          sort_keys=True)

    def per_partition(self, partitions: int) -> "Declaration":
        """The share of each of a queue's ``partitions``: a type's or downstream's
        limit is cross-partition, and each partition's reserve sees only its own keys, so
        each holds ceil(limit / N) slots and ceil(n / N) starts per window (together at most
        N - 1 over the limit, never under a partition's share)."""
        if partitions <= 1:
            return self
        def share(n: int) -> int:
            return max(1, math.ceil(n / partitions))
        rates = {}
        for gate, rate in self.rate.items():
            n, _, window = rate.partition("/")
            rates[gate] = f"{share(int(n))}/{window}"
        return Declaration(dict(self.cand), {g: share(c) for g, c in self.conc.items()}, rates)


def rate_of(policy: LimitPolicy) -> str | None:
    """A token bucket (``rate_per_s``, ``burst``) as a held rate: ``burst`` starts in any
    ``burst / rate_per_s`` seconds, '<n>/<window ms>'."""
    if not policy.rate_per_s:
        return None
    burst = policy.burst or max(1, math.ceil(policy.rate_per_s))
    return f"{burst}/{max(1, round(burst * 1000 / policy.rate_per_s))}"


def shared_downstreams(handlers: Iterable[HandlerLike]) -> set[str]:
    """Downstreams named by handlers of more than one queue (not held: see the docstring)."""
    queues: dict[str, set[str]] = {}
    for spec in handlers:
        if spec.downstream:
            queues.setdefault(spec.downstream, set()).add(spec.queue)
    return {d for d, qs in queues.items() if len(qs) > 1}


def plan(handlers: Mapping[str, HandlerLike],
         downstreams: Mapping[str, LimitPolicy]) -> dict[str, Declaration]:
    """Queue -> the gates of its handlers: each handler type is a candidate for overrides;
    its limits (and its downstream's, unless shared across queues) are declared."""
    shared = shared_downstreams(handlers.values())
    out: dict[str, Declaration] = {}
    for job_type, spec in handlers.items():
        d = out.setdefault(spec.queue, Declaration())
        gates = [f"type:{job_type}"]
        _limit(d, gates[0], spec.flow)
        if spec.downstream and spec.downstream not in shared:
            gates.append(f"ds:{spec.downstream}")
            _limit(d, gates[1], downstreams.get(spec.downstream))
        d.cand[job_type] = " ".join(gates)
    return out


def _limit(d: Declaration, gate: str, policy: LimitPolicy | None) -> None:
    if policy is None or policy.across_queues:
        return
    if policy.concurrency:
        d.conc[gate] = int(policy.concurrency)
    rate = rate_of(policy)
    if rate:
        d.rate[gate] = rate


def held(policy: LimitPolicy | None, *, shared: bool = False) -> bool:
    """Whether ``policy``'s concurrency and rate are held at reserve (so the worker takes no
    semaphore or token for them); its breaker is the worker's in any case."""
    return policy is not None and not policy.across_queues and not shared


@dataclass(frozen=True)
class GateOverride:
    slots: int | None
    rate: str  # as given ('10/s'), '' when the rate is not overridden
    by: str
    reason: str
    at: int
    until_ms: int  # 0: until cleared


@dataclass(frozen=True)
class GateState:
    """One gate of a queue, as the Limits view shows it."""

    gate: str
    kind: str  # type | downstream
    name: str
    slots: int | None  # declared
    rate: str  # declared, as '10/s'; '' none
    override: GateOverride | None
    in_flight: int
    waiting: int

    @property
    def slots_now(self) -> int | None:
        o = self.override
        return o.slots if o is not None and o.slots is not None else self.slots

    @property
    def rate_now(self) -> str:
        o = self.override
        return o.rate if o is not None and o.rate else self.rate


def gate_of(kind: str, name: str) -> str:
    if kind not in KINDS:
        raise GateError(f"bad kind {kind!r}: pass 'type' or 'downstream'")
    if not keys.valid_name(name):
        raise GateError(f"bad {kind} name {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    return f"{KINDS[kind]}:{name}"


class Gates:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis, self.clock = client, clock
        self.scripts = scripts or Scripts(client)

    def declare(self, queue: str, d: Declaration, partitions: int = 1) -> int:
        """Write ``queue``'s gates (replacing the last declaration; overrides are kept) in
        each of its ``partitions`` (its share: ``Declaration.per_partition``); returns how
        many waiting jobs a raised or removed limit started."""
        text = d.per_partition(partitions).as_json()
        started = 0
        for p in range(partitions):
            k = keys.QueueKeys(queue, p)
            started += int(self.scripts.gates_declare(
                keys=[k.gate_candidates, k.gate_slots, k.gate_rates, k.gate_active],
                args=[k.job_prefix, self.clock(), text]))
        return started

    def known(self, queue: str) -> set[str]:
        """The gates a worker declared for ``queue`` (its handlers' types and downstreams)."""
        raw = cast(dict[str, str], self.redis.hgetall(keys.QueueKeys(queue).gate_candidates))
        return {g for gates in raw.values() for g in gates.split()}

    def set_override(self, queue: str, kind: str, name: str, by: str, reason: str, *,
                     slots: int | None = None, rate: str | None = None,
                     revert_after_s: float | None = None) -> GateOverride:
        """Override a type's or downstream's slots (0 holds it) and/or rate ('10/s') in
        ``queue``; with ``revert_after_s`` it ends by itself then. Held on every host at the
        next reserve; a raise starts waiting jobs at once."""
        gate = self._known_gate(queue, kind, name)
        rate_value, reason = checked_override(
            slots, rate, reason, MAX_SLOTS, revert_after_s, error=GateError,
            holds="to hold it", hold="hold it", page="Limits")
        now, until = self.clock(), 0
        if revert_after_s is not None:
            until = now + int(float(revert_after_s) * 1000)
        record = GateOverride(slots, format_rate(rate_value) if rate_value else "", by, reason,
                              now, until)
        value = f"{'' if slots is None else slots}|{until}|{rate_value}"
        self._call(queue, gate, value, json.dumps(record.__dict__))
        return record

    def clear(self, queue: str, kind: str, name: str) -> int:
        """End the override; returns how many waiting jobs that started."""
        return self._call(queue, self._known_gate(queue, kind, name), "", "")

    def revert_due(self, queue: str) -> int:
        """End the overrides whose time is up (the scripts ignore them already; this starts
        what a lowered limit held back). Returns how many ended."""
        k = keys.QueueKeys(queue)
        now, ended = self.clock(), 0
        for gate, raw in cast(dict[str, str], self.redis.hgetall(k.gate_override_records)).items():
            until = _int(_json(raw).get("until_ms"), 1)
            if until and until <= now:
                self._call(queue, gate, "", "")
                ended += 1
        return ended

    def override(self, queue: str, gate: str) -> GateOverride | None:
        raw = self.redis.hget(keys.QueueKeys(queue).gate_override_records, gate)
        return _override(cast(str | None, raw), self.clock())

    def limits(self, queue: str) -> list[GateState]:
        """Every gate of ``queue`` a worker declared, with its override and its counts; a
        partitioned queue's partitions added up (the slots and starts all of them hold
        together: their shares, ``Declaration.per_partition``)."""
        every = partitions.all_keys(self.redis, queue)
        k = every[0]
        gates = sorted(self.known(queue))
        pipe = self.redis.pipeline(transaction=False)
        for pk in every:
            pipe.hgetall(pk.gate_slots)
            pipe.hgetall(pk.gate_rates)
        pipe.hgetall(k.gate_override_records)
        for g in gates:
            for pk in every:
                pipe.scard(pk.gate_held(g))
                pipe.llen(pk.gate_line(g))
        n = len(every)
        replies = keys.sound(pipe.execute(raise_on_error=False),
                             ({},) * (2 * n) + ({},) + (0,) * (2 * n * len(gates)))
        slots, rates = _summed(replies[0:2 * n:2]), _summed_rates(replies[1:2 * n:2])
        records, per = replies[2 * n], replies[2 * n + 1:]
        # per gate: in flight, then waiting, each summed over the partitions
        counts = [sum(int(per[(i * n + j) * 2 + w]) for j in range(n))
                  for i in range(len(gates)) for w in (0, 1)]
        now = self.clock()
        out = []
        for i, g in enumerate(gates):
            kind, _, name = g.partition(":")
            out.append(GateState(
                g, "type" if kind == "type" else "downstream", name,
                _int(slots.get(g), 0) if g in slots else None, format_rate(rates.get(g, "")),
                _override(records.get(g), now), int(counts[2 * i]), int(counts[2 * i + 1])))
        return out

    def _known_gate(self, queue: str, kind: str, name: str) -> str:
        if not keys.valid_name(queue):
            raise GateError(f"bad queue name {queue!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        gate = gate_of(kind, name)
        if gate not in self.known(queue):
            raise GateError(f"unknown {kind} {name!r} in queue {queue}: no worker serving it "
                            f"declared one (pass a job type or downstream of its handlers)")
        return gate

    def _call(self, queue: str, gate: str, value: str, record: str) -> int:
        """The override in every partition, each its share of the slots and the starts."""
        every = partitions.all_keys(self.redis, queue)
        share = _share(value, len(every))
        return sum(int(self.scripts.gates_override(
            keys=[k.gate_overrides, k.gate_override_records],
            args=[k.job_prefix, gate, share, record, self.clock()])) for k in every)


def _share(value: str, n: int) -> str:
    """An override value '<slots>|<until>|<n>/<window>' as each of ``n`` partitions holds it:
    ceil of the slots and of the starts (0 slots stays 0: held everywhere)."""
    if n <= 1 or not value:
        return value
    slots, until, rate = (value.split("|") + ["", ""])[:3]
    if slots:
        slots = str(-(-int(slots) // n))
    if rate:
        count, _, window = rate.partition("/")
        rate = f"{max(1, -(-int(count) // n))}/{window}"
    return f"{slots}|{until}|{rate}"


def _summed(maps: list[dict[str, str]]) -> dict[str, str]:
    """Per gate, the slots of every partition added up."""
    out: dict[str, int] = {}
    for m in maps:
        for g, v in m.items():
            out[g] = out.get(g, 0) + _int(v, 0)
    return {g: str(v) for g, v in out.items()}


def _summed_rates(maps: list[dict[str, str]]) -> dict[str, str]:
    """Per gate, the starts per window of every partition added up ('<n>/<window ms>')."""
    out: dict[str, tuple[int, str]] = {}
    for m in maps:
        for g, v in m.items():
            count, _, window = str(v).partition("/")
            was = out.get(g, (0, window))[0]
            out[g] = (was + _int(count, 0), window)
    return {g: f"{c}/{w}" for g, (c, w) in out.items()}


def _json(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _override(raw: str | None, now: int) -> GateOverride | None:
    d = _json(raw)
    if not d:
        return None
    until = _int(d.get("until_ms"), 0)
    if until and until <= now:
        return None
    slots = d.get("slots")
    return GateOverride(slots if type(slots) is int else None, str(d.get("rate") or ""),
                        str(d.get("by", "")), str(d.get("reason", "")), _int(d.get("at"), 0),
                        until)
