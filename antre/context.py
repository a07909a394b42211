"""What a handler receives as ``ctx``. The worker fills in the callables; handlers only read."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from antre.stores.versioned import versioned_update
from antre.engine.envelope import Job
from antre.engine.progress import checked as checked_progress
from antre.errors import JobTimeout
from antre.observe.joblog import JobLog

_job_log = logging.getLogger("antre.job")
_MAKING = threading.Lock()  # guards the first making of a context's ``cancelled``


class JobContext:
    """``ctx`` of a handler.

    ``job``: the envelope. ``db``: a SQLAlchemy session committed together with the idempotency
    record (``None`` without a database); it is opened on first use, so a handler that never
    touches it costs no transaction (its completion is then one autocommit statement). In a
    worker's prefetched batch the session is the batch's, inside a savepoint of this job's:
    never commit or roll it back yourself (the worker commits the batch once, then acks).
    ``fence``: the fencing token of the job's business lock when it has a ``lock_key``, else
    the lease epoch. In a flow: ``flow_id``; ``flow_results``, the results of the
    jobs it waited for, in input order (a chord's callback: every job of its group; a
    ``ChildFailure`` for one that died when the flow ignores failures; one read, on first
    use); ``previous_result``, a chain step's previous step's result (the list when it
    waited for several). ``cancelled``: set when the soft
    timeout passed or the worker is shutting down; long handlers should look at it or call
    ``checkpoint()``.
    """

    def __init__(self, job: Job, worker_id: str, _db_factory: Callable[[], Any] | None = None,
                 _db: Any = None, fence: int = 0, lock: Any = None, last_checkpoint: Any = None,
                 cancelled: threading.Event | None = None,
                 _extend: Callable[[float], int] | None = None,
                 _checkpoint: Callable[[Any], None] | None = None,
                 _progress: Callable[[float, str], None] | None = None,
                 _flow_inputs: Callable[[], list[Any]] | None = None,
                 _log: JobLog | None = None) -> None:
        self.job = job
        self.worker_id = worker_id
        self._db_factory = _db_factory
        self._db = _db
        self.fence = fence
        self.lock = lock
        self.last_checkpoint = last_checkpoint
        self._cancelled = cancelled  # made on first use: most handlers never look at it
        self._extend = _extend
        self._checkpoint = _checkpoint
        self._progress = _progress
        self.last_progress: tuple[float, str] | None = None  # the last ctx.progress, checked
        self.flow_id: str = job.flow
        self._flow_inputs = _flow_inputs
        self._flow_results: list[Any] | None = None
        self._log = _log

    @property
    def flow_results(self) -> list[Any]:
        """The results of the jobs this one waited for in its flow, in input order; read from
        Redis once, on first use (a job that never looks costs no read)."""
        if self._flow_results is None:
            loader = self._flow_inputs
            self._flow_results = loader() if loader is not None and self.job.flow_inputs else []
        return self._flow_results

    @property
    def previous_result(self) -> Any:
        """The result of the one job this one waited for in its flow (a chain's previous
        step), the list of them when it waited for several, None when it waited for none."""
        results = self.flow_results
        if not results:
            return None
        return results[0] if len(results) == 1 else results

    def __repr__(self) -> str:
        return f"JobContext(job={self.job.id!r}, worker_id={self.worker_id!r}, fence={self.fence})"

    @property
    def cancelled(self) -> threading.Event:
        """Set when the soft timeout passed, the lease was lost, an operator cancelled the job
        or the worker is shutting down."""
        event = self._cancelled
        if event is None:
            with _MAKING:  # the handler and the heartbeat may both be first
                event = self._cancelled
                if event is None:
                    event = self._cancelled = threading.Event()
        return event

    @property
    def db(self) -> Any:
        """The job's SQLAlchemy session, opened on first use; ``None`` without a database."""
        if self._db is None and self._db_factory is not None:
            self._db = self._db_factory()
        return self._db

    def versioned_update(self, table: Any, key: Any, version: int, values: Any, **kw: Any
                         ) -> int:
        """``antre.stores.versioned.versioned_update`` on ``ctx.db``: the row's compare-and-set
        on its version, the new version returned; a row that moved on raises
        ``VersionConflict``, which re-queues this job behind its lock_key (no attempt spent)."""
        db = self.db
        if db is None:
            raise RuntimeError("ctx.versioned_update needs a database: set ANTRE_DATABASE_URL")
        return versioned_update(db, table, key, version, values, **kw)

    @property
    def opened_db(self) -> Any:
        """The session if the handler opened one, else ``None`` (for the worker; never opens)."""
        return self._db

    @property
    def attempt(self) -> int:
        """1-based number of this attempt."""
        return self.job.attempt + 1

    def extend_lease(self, seconds: float) -> int:
        """Push the lease deadline to now + ``seconds``; returns the new deadline (ms).
        Raises ``LeaseLost`` when the lease is no longer ours."""
        if self._extend is None:
            raise RuntimeError("extend_lease is only available inside a worker")
        return self._extend(seconds)

    def progress(self, fraction: float, message: str = "") -> None:
        """Say how far the handler got: ``fraction`` from 0 to 1 and a short text (at most
        200 characters kept), e.g. ``ctx.progress(0.4, "rows 4,000/10,000")``. The producer
        sees it in ``app.result(key).progress``, the dashboard on the job page. Cheap to call
        in a loop: the worker writes at most 4 a second, and the last one before the job's
        ack. Raises ``ValueError`` for a fraction outside 0..1 or a message that is not text."""
        value = checked_progress(fraction, message)
        self.last_progress = value
        if self._progress is not None:
            self._progress(*value)

    def log(self, message: str, *args: Any, level: int = logging.INFO) -> None:
        """Add a line to the job's own log (``message % args`` when args are given), shown on
        its job page and in the API, kept and retired with the job; it also goes to the
        process's log (logger ``antre.job``). The standard ``logging`` records the handler
        emits while it runs are kept there too. A delivery keeps at most
        ``antre.observe.joblog.MAX_LINES`` lines and ``MAX_BYTES`` bytes (then a line says how
        many were left out); secrets in URLs and ``password=...`` pairs are blanked."""
        text = message % args if args else str(message)
        if self._log is not None:
            self._log.add(level, text)
        _job_log.log(level, "job %s: %s", self.job.id, text)

    @property
    def own_log(self) -> JobLog | None:
        """The lines this delivery logged so far (for the worker)."""
        return self._log

    def checkpoint(self, state: Any = None) -> None:
        """Persist progress (when ``state`` is given) and raise ``JobTimeout`` if cancelled."""
        if state is not None:
            if self._checkpoint is not None:
                self._checkpoint(state)
            self.last_checkpoint = state
        if self.cancelled.is_set():
            raise JobTimeout("cancelled at checkpoint (soft timeout or shutdown)")
