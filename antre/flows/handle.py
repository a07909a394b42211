"""What a producer holds: a stored flow's handle (``Flow``: status, results, wait, cancel)
and an open batch (``Batch``: add jobs over time, then close it so its callbacks may run).

``Flow.wait`` costs no polling: the script that makes the flow final pushes one token to its
wake list (``QueueKeys.flow_wake``), which the waiter blocks on with ``BLMOVE`` of the list onto
itself (the token stays there for every other waiter); a flow that finished already answers at
once. A wait longer than ``WAIT_CHUNK_S`` blocks again after each chunk (the connection's
socket timeout is 10 s): one command per chunk, never a poll of the flow's state.

``Flow.await_`` (``await app.aflow_wait(flow_id, timeout=)``) is the same wait from a coroutine:
the same ``BLMOVE`` on the same wake list, sent on a ``redis.asyncio`` connection (the app's
client for the running loop), its reply awaited with its own read timeout, so no thread is
held while it waits and one command covers up to ``ASYNC_CHUNK_S``; the status reads (short)
run on a thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import TracebackType
from collections.abc import Iterator
from typing import Any, Callable, Sequence

from redis.asyncio import Redis as AsyncRedis

from antre.engine.envelope import CANCEL_TO
from antre.engine.queue import Queue
from antre.errors import InvalidJob
from antre.flows import store
from antre.flows.compose import Step, compile_steps
from antre.flows.read import FlowReader, FlowRow
from antre.flows.store import CancelSummary, FlowError, Member

WAIT_CHUNK_S = 5.0
ASYNC_CHUNK_S = 300.0  # the longest single async BLMOVE (its reply awaited this + 5 s)


class FlowTimeout(TimeoutError):
    """``Flow.wait`` ran out of time before the flow finished; ``status`` is how it stood."""

    def __init__(self, message: str, status: FlowRow | None) -> None:
        super().__init__(message)
        self.status = status


class Flow:
    """A stored flow: ``id``, ``queue``; ``status()``, ``results()``, ``wait(timeout=)``,
    ``cancel(by=, reason=)``."""

    def __init__(self, queue: Queue, flow_id: str) -> None:
        self.q = queue
        self.id = flow_id
        self.queue = queue.name
        self._reader = FlowReader(queue.redis)
        self._execute: Any = queue.redis.execute_command  # (BLMOVE with a float timeout)

    def __repr__(self) -> str:
        return f"Flow({self.id!r}, queue={self.queue!r})"

    def status(self) -> FlowRow:
        """Its state and counters (``FlowError`` once it is gone: trimmed after it finished)."""
        row = self._reader.get(self.queue, self.id)
        if row is None:
            raise FlowError(f"no flow {self.id} in queue {self.queue!r} (finished flows are "
                            "kept as long as the queue's done jobs, failed ones as its dead jobs)")
        return row

    def results(self, offset: int = 0, limit: int | None = None) -> list[Any]:
        """The results of its last jobs, in order (a chain: its last step's; a group: every
        job's; a chord: the callback's; a batch: its members', in the order added), from
        ``offset``, at most ``limit`` (None: all). A member that died and was settled as
        failed gives a ``ChildFailure``; one not settled, None. Read a page at a time."""
        return self._reader.results(self.queue, self.id, offset, limit)

    def iter_results(self, offset: int = 0) -> Iterator[Any]:
        """``results()`` one at a time, read ``RESULTS_PAGE`` (1,000) per command: for a big
        batch, without holding every result at once."""
        return self._reader.iter_results(self.queue, self.id, offset)

    def wait(self, timeout: float | None = None) -> FlowRow:
        """Block until the flow is succeeded, failed or cancelled; returns its status. Raises
        ``FlowTimeout`` after ``timeout`` seconds (None: no limit)."""
        _check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = self.q.keys.flow_wake(self.id)
        while True:
            left = WAIT_CHUNK_S if deadline is None else min(WAIT_CHUNK_S,
                                                              deadline - time.monotonic())
            # BLMOVE's timeout: 0 blocks for ever, so an expired wait asks once without one
            got = (self.q.redis.lmove(wake, wake, "RIGHT", "LEFT") if left <= 0
                   else self._execute("BLMOVE", wake, wake, "RIGHT", "LEFT",
                                      round(max(left, 0.01), 3)))
            if got is not None:
                return self.status()
            if deadline is not None and time.monotonic() >= deadline:
                row = self._reader.get(self.queue, self.id)
                raise FlowTimeout(f"flow {self.id} did not finish within {timeout} s", row)

    async def await_(self, timeout: float | None = None,
                     aredis: Callable[[], AsyncRedis] | None = None) -> FlowRow:
        """``wait`` from a coroutine: the BLMOVE on ``aredis()`` (a ``redis.asyncio`` client
        of the running loop: ``app.aflow_wait`` passes the app's), no thread held while it
        waits; without ``aredis``, ``wait`` runs on a thread. Same answers: the status once
        the flow is final, ``FlowTimeout`` after ``timeout`` seconds (None: no limit)."""
        _check_timeout(timeout)
        if aredis is None:
            return await asyncio.to_thread(self.wait, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = self.q.keys.flow_wake(self.id)
        while True:
            left = ASYNC_CHUNK_S if deadline is None else min(ASYNC_CHUNK_S,
                                                               deadline - time.monotonic())
            if await ablocking_move(aredis(), wake, left):
                return await asyncio.to_thread(self.status)
            if deadline is not None and time.monotonic() >= deadline:
                row = await asyncio.to_thread(self._reader.get, self.queue, self.id)
                raise FlowTimeout(f"flow {self.id} did not finish within {timeout} s", row)

    def cancel(self, by: str, reason: str = "", to: str = "dlq") -> CancelSummary:
        """Cancel the flow: every job of it not ended yet ends as cancelled (to the DLQ with
        the reason, or discarded: ``to``), those in flight when their worker sees the request;
        nothing of it settles or starts after this. ``FlowError`` when it succeeded already."""
        if to not in CANCEL_TO:
            raise InvalidJob(f"to must be one of {', '.join(CANCEL_TO)}, not {to!r}")
        request = json.dumps({"by": by, "to": to, "reason": (reason or "").strip()[:2000],
                              "at": self.q.clock()}, separators=(",", ":"))
        return store.cancel(self.q, self.id, request)


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and (isinstance(timeout, bool) or
                                not isinstance(timeout, (int, float)) or timeout < 0):
        raise InvalidJob(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")


async def ablocking_move(client: AsyncRedis, wake: str, timeout_s: float) -> bool:
    """``BLMOVE wake wake RIGHT LEFT timeout_s`` on one of the client's pooled connections,
    its reply awaited up to ``timeout_s`` + 5 s whatever the client's socket timeout (an
    expired wait asks once with ``LMOVE``: BLMOVE 0 would block for ever); True when the
    flow's token is there (it stays, for every other waiter)."""
    if timeout_s <= 0:
        return await client.lmove(wake, wake, "RIGHT", "LEFT") is not None
    pool: Any = client.connection_pool
    conn: Any = await pool.get_connection()
    try:
        await conn.send_command("BLMOVE", wake, wake, "RIGHT", "LEFT",
                                f"{max(timeout_s, 0.01):.3f}")
        reply = await conn.read_response(timeout=timeout_s + 5)
    except BaseException:
        await conn.disconnect()  # whatever was unread would be read by the next caller
        raise
    finally:
        await pool.release(conn)
    return reply is not None


class Batch(Flow):
    """An open batch (``app.batch(...)``): ``add(step)`` stores jobs at once, over time;
    ``close()`` (or the end of a ``with`` block) lets its callbacks run once every member has
    settled: ``on_complete`` then, ``on_success`` when none of them is dead (or, later, when
    the dead ones were replayed and completed). A ``with`` block that raises leaves the batch
    open (its callbacks held): close or cancel it."""

    def __init__(self, queue: Queue, flow_id: str,
                 check: Callable[[Sequence[Member]], None] = lambda members: None) -> None:
        super().__init__(queue, flow_id)
        self._check = check

    def add(self, *steps: Step) -> list[str]:
        """Store ``steps`` (JobSpecs, or chains / groups / chords whose jobs all become
        members) in the batch now; returns their job ids. ``FlowError`` once it is closed."""
        members: list[Member] = []
        for step in steps:
            compiled = compile_steps(step)
            ids = store.member_ids(compiled.nodes, self.q)  # in the batch's partition
            members += store.members_of(compiled.nodes, ids)
        self._check(members)
        store.store_added(self.q, self.id, members)
        return [m.spec.job_id or "" for m in members]

    def close(self) -> str:
        """No more jobs; returns the batch's state (``succeeded`` at once when every member
        has completed already)."""
        return store.close(self.q, self.id)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
