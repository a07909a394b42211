"""A job's states and a flow's states: the one declared set of each.

A job is always in exactly one state (its hash's field ``state``; "A job's life" in
docs/ARCHITECTURE.md draws the scripts that move it). Every reader and writer names a state
by these constants: the Python read models, the dashboard's templates (Jinja globals
``JOB_STATES`` / ``FLOW_STATES``, ``webapp/antre_web/__init__.py``) and the Lua scripts (the
tables ``S`` and ``FS``, written into the library by ``antre/engine/scripts.py``: ``S.dead`` is
``'dead'``). ``tests/system/test_job_states.py`` fails on a state spelled anywhere else.
"""

from __future__ import annotations

JOB_DOCS: dict[str, str] = {}
FLOW_DOCS: dict[str, str] = {}


def _job(name: str, doc: str) -> str:
    JOB_DOCS[name] = doc
    return name


def _flow(name: str, doc: str) -> str:
    FLOW_DOCS[name] = doc
    return name


READY = _job("ready", "In its queue's ready list (or a paused type's parked list): the next "
                      "reserve may deliver it.")
SCHEDULED = _job("scheduled", "Waiting for its visible_at (a delay, a retry's backoff, a "
                              "snooze, a rate's later start) in the ZSET scheduled.")
INFLIGHT = _job("inflight", "Delivered to a worker under a fenced lease (ZSET inflight, scored "
                            "by the lease's deadline).")
DONE = _job("done", "Completed: its result kept until retention forgets it.")
DEAD = _job("dead", "In the dead-letter queue with its reason: replayed, discarded or "
                    "forgotten by retention.")
WAITING = _job("waiting", "In a line (a lock key's turn, a group's slots, a gate's limit: "
                          "field waits_on), made ready by the script that ends the job ahead.")
HELD = _job("held", "A job of a flow whose parents have not all settled: placed when they "
                    "have.")

JOB_STATES: tuple[str, ...] = tuple(JOB_DOCS)

RUNNING = _flow("running", "A flow with jobs still to settle.")
FLOW_WAITING = _flow("waiting", "A flow stopped on a failed job whose policy is 'wait': a "
                                "replay of the job carries it on.")
FAILED = _flow("failed", "A flow that failed (its policy gave up on a failed job).")
SUCCEEDED = _flow("succeeded", "A flow whose every job settled as its policy asks.")
CANCELLED = _flow("cancelled", "A flow an operator or its producer cancelled.")

FLOW_STATES: tuple[str, ...] = tuple(FLOW_DOCS)
FINAL_FLOW_STATES = frozenset((SUCCEEDED, FAILED, CANCELLED))


def attempt_text(state: str, spent: int, most: int = 0) -> str:
    """A job's attempt as a reader counts them, from 1 (``spent`` counts attempts spent, from
    0): the one running or that succeeded, the number spent, or 'not run yet'; ``most``: its
    max_attempts ('attempt 2/5')."""
    of = f"/{most}" if most else ""
    if state in (INFLIGHT, DONE):
        return f"attempt {spent + 1}{of}"
    if spent <= 0:
        return "not run yet"
    return f"{spent}{of} attempt{'s' if spent != 1 or most else ''} spent"


def lua_tables() -> dict[str, dict[str, str]]:
    """The scripts' tables: ``S`` (job states) and ``FS`` (flow states), name -> value."""
    return {"S": {s: s for s in JOB_STATES}, "FS": {s: s for s in FLOW_STATES}}
