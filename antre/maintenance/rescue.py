"""The rescuer: the leases of a worker process that stopped beating, returned at once.

Every worker process writes its heartbeat into each queue partition it serves
(``keys.QueueKeys.beats``, first thing in each round of its heartbeat loop, every second by
default; removed at a graceful stop). A process killed with ``kill -9`` (or whose host died)
stops beating long before its leases' deadlines: the rescuer finds a beat older than the pause
tolerance (``ANTRE_WORKER_PAUSE_TOLERANCE_S``) and returns all that process's leases in one
script call per partition, with every other process found lost there in the same pass
(``rescue.lua``; a partition holding more than ``queue.RESCUE_WALK`` jobs in flight takes a
call per that many). Each job spends one delivery, as at a lease's expiry, and its lease epoch
is bumped: a process that was only paused (SIGSTOP, a long GC pause) finds its leases gone when
it wakes and drops what it finishes, as after an expired lease. Then the business locks it
held on those jobs' keys are released (``Locks.release_lost``: the rerun need not wait out
their TTL; the fence refuses a paused holder's SQL). The lease-expiry sweep (``Queue.sweep``)
stays the backstop: for a process that beats but holds a lease it no longer renews, for records
the rescuer leaves alone, and with the rescuer turned off (``off``).

The trade-off (docs/explanation/guarantees.md): a lower tolerance brings a killed process's
jobs back sooner; a process paused longer than the tolerance (less its heartbeat interval) is
taken for lost and its jobs run a second time (at least once: its own ack is refused, its SQL
completion fenced out). The default, 3.5 s with the default 1 s heartbeat and the 1 s duty,
returns a killed process's jobs within about 4.5 s (3.5 s measured: bench/results/rescue.md)
and never takes a pause of up to 2.5 s for a loss (one of more than 4.5 s always).

A rescuer that could not reach Redis for more than ``GAP_S`` (an outage: no process could beat
either) judges nobody until it has watched a whole tolerance again (``keys.rescuer_watch``,
shared by every pool), so the end of an outage never reads as every process lost.

The pool's ``rescuer`` duty (``antre_worker.duties``) runs ``Rescuer.run`` every second, once
cluster-wide; nothing here schedules itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

import redis

import antre.settings as settings
from antre.clock import Clock, system_ms
from antre.engine import keys, partitions
from antre.engine.locks import Locks
from antre.engine.queue import RescueResult
from antre.engine.scripts import Scripts
from antre.observe.readmodels import ReadModels

GAP_S = 2.0  # two ticks of the 1 s duty missed: the rescuer lost sight of Redis; it watches anew


def pause_tolerance_s(environ: Mapping[str, str] | None = None) -> float:
    """``ANTRE_WORKER_PAUSE_TOLERANCE_S`` (``settings.WORKER_PAUSE_TOLERANCE_S``: default 3.5,
    1 to 3600 seconds; ``off``: 0, the rescuer does nothing). A bad value is a
    ``SettingError`` saying what the setting takes."""
    value = settings.WORKER_PAUSE_TOLERANCE_S.get(environ)
    return 0.0 if value is None else float(value)


@dataclass
class RescuePass:
    """One pass: the processes found lost and what was done with their leases."""
    watching: bool = True  # False: the rescuer had a gap (an outage) and only watched
    lost: list[str] = field(default_factory=list)  # worker ids, one entry per process
    results: list[RescueResult] = field(default_factory=list)  # one per partition rescued
    locks_released: int = 0  # business locks the lost processes held on their jobs' keys

    @property
    def returned(self) -> int:
        return sum(r.returned for r in self.results)

    @property
    def buried(self) -> int:
        return sum(r.buried for r in self.results)


class Rescuer:
    """Finds the worker processes whose heartbeat is older than ``tolerance_s`` in every
    queue's partitions and returns their leases (``Queue.rescue``)."""

    def __init__(self, client: redis.Redis, *, clock: Clock = system_ms,
                 scripts: Scripts | None = None, tolerance_s: float | None = None,
                 gap_s: float = GAP_S) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)
        self.tolerance_s = pause_tolerance_s() if tolerance_s is None else tolerance_s
        self.gap_s = gap_s

    @property
    def tolerance_ms(self) -> int:
        return int(self.tolerance_s * 1000)

    def watch(self, now_ms: int) -> bool:
        """Note that the rescuer reaches Redis now; True once it has done so for a whole
        tolerance without a gap longer than ``gap_s`` (``keys.rescuer_watch``: shared by the
        pools, whichever runs the tick). A gap means Redis was unreachable (or every pool
        stalled): the processes could not beat either, so their beats say nothing yet."""
        key = keys.rescuer_watch()
        last, since = cast(list[str | None], self.redis.hmget(key, ["last", "since"]))
        start = now_ms
        if last is not None and since is not None:
            try:
                if 0 <= now_ms - int(last) <= min(self.gap_s * 1000, self.tolerance_ms):
                    start = int(since)
            except ValueError:
                pass
        self.redis.hset(key, mapping={"last": now_ms, "since": start})
        return now_ms - start >= self.tolerance_ms

    def run(self) -> RescuePass:
        out = RescuePass()
        if self.tolerance_s <= 0:
            return out
        now = self.clock()
        if not self.watch(now):
            out.watching = False
            return out
        cutoff = now - self.tolerance_ms
        locks = Locks(self.redis, clock=self.clock, scripts=self.scripts)
        for name in ReadModels(self.redis).queue_names():
            for q in partitions.all_queues(self.redis, name, clock=self.clock,
                                           scripts=self.scripts):
                for res in q.rescue(q.silent(cutoff), cutoff):
                    if res.worker_id not in out.lost:
                        out.lost.append(res.worker_id)
                    out.results.append(res)
                    for key in sorted(res.lock_keys):  # else the next run waits out its TTL
                        out.locks_released += locks.release_lost(key, res.worker_id)
        return out
