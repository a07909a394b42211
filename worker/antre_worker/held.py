"""``Running``: what this process knows about one job it holds a lease on, from reserve to
settlement. The runner creates it, the pipeline's steps fill it in (spec, lock, slots,
idempotency ownership, context), the heartbeat reads it to extend the lease and enforce the
timeout, and ``settle()`` closes it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from antre import HandlerSpec, JobContext, Queue
from antre.control.cancel import CancelRequest
from antre.engine.envelope import Job
from antre.limits.admission import Admission
from antre.observe.joblog import JobLog
from antre.stores.idempotency import Begin, IdempotencyStore
from antre.engine.locks import Lock

if TYPE_CHECKING:
    from .progress import Reporter


class Running:
    """A job this process holds a lease on (reserved, possibly not started yet). Only ``job``,
    ``queue`` and ``settle_lock`` are set when it is made; the rest start as the class's
    defaults and are set on the instance by the step that fills them in (a runner makes one
    per job reserved)."""

    spec: HandlerSpec | None = None
    ctx: JobContext | None = None
    started_ms: int = 0  # 0 until the handler starts
    started_mono: float = 0.0
    thread: int = 0
    store: IdempotencyStore | None = None  # set while this delivery owns its idempotency key
    soft_timed_out: bool = False
    closed: bool = False  # settled, handed back or given up: nothing more may touch the lease
    lease_lost: bool = False
    admission: Admission | None = None  # flow-control slots held while the handler runs
    lock: Lock | None = None  # the business lock held while the job is processed
    lock_fence: int | None = None  # its fencing token (kept for the log line after release)
    lock_renewed: float = 0.0  # monotonic time of the last renewal (the heartbeat renews)
    # the lock's release, sent with the job's ack in one round trip (Pipeline.process), and
    # whether that happened (give_back then has nothing left to release)
    ack_release: Any = None
    released_with_ack: bool = False
    # its ack is a hand-over (runner.py ``_work``), whose script checks the lock is still held
    # (no renewal before it); the lock its hand-over took for this delivery, adopted by the
    # lock step instead of an acquire (released by give_back when no step took it)
    lock_checked_at_ack: bool = False
    prelock: Lock | None = None
    cancel: CancelRequest | None = None  # an operator asked to stop it (seen at cancel_seen_ms)
    cancel_seen_ms: int = 0
    cancel_task: Callable[[], None] | None = None  # an async job: cancels its task on the loop
    # its idempotency claim (acquired: a fresh row), inserted with the claim of an earlier job of
    # its prefetched batch and not used yet (pipeline.py)
    ahead_claim: Begin | None = None
    reporter: "Reporter | None" = None  # its ctx.progress (progress.py), made with its ctx
    error: BaseException | None = None  # what its handler raised, for the hooks (hooked.py)
    # its ctx.db writes in a SAVEPOINT of its batch's shared transaction (transaction.py): the
    # savepoint while open (None once released or rolled back), and that transaction
    savepoint: Any = None
    tx: Any = None
    # its hard timeout (interrupt.py): whether its sync handler runs now (in its thread
    # ``thread``), when the heartbeat raised ``HardTimeout`` into it, and the error it becomes
    in_handler: bool = False
    interrupted_ms: int = 0
    interrupt_error: str = ""
    own_log: JobLog | None = None  # its ctx's log (kept past give_back for a batched settle)

    def __init__(self, job: Job, queue: Queue) -> None:
        self.job = job
        self.queue = queue
        self.settle_lock = threading.Lock()
        self.handler_guard = threading.Lock()  # orders a hard timeout's interrupt (interrupt.py)

    def __repr__(self) -> str:
        return f"Running(job={self.job.id!r}, queue={self.queue.name!r}, closed={self.closed})"

    def stop_handler(self) -> None:
        """Tell the handler to stop: ``ctx.cancelled`` for a sync one, and an async one's task
        is cancelled (timeout, lease lost, shutdown, an operator's cancel)."""
        if self.ctx is not None:
            self.ctx.cancelled.set()
        if self.cancel_task is not None:
            self.cancel_task()

    @property
    def owns_idempotency(self) -> bool:
        return self.store is not None
