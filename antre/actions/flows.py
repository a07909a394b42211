"""Operator actions on a flow: cancel a whole flow (every job of it not ended yet,
the callbacks with them), from the dashboard, the API and the CLI, audited as ``flow.cancel``;
replay every dead job of a flow (``flow.replay_failed``) through the same replay as the DLQ's
(``Queue.replay``: attempts reset, idempotency key kept), so the flow goes on once they
complete.
"""

from __future__ import annotations

from antre.errors import InvalidJob
from antre.flows import FlowError
from antre.flows.read import FlowReader
from antre.engine import states

from .base import CANCEL_TO_PARAM, Action, Actor, Args, Html, Ops, Param, Result, _note

PAGE = 500  # a flow's jobs read a page at a time
MAX_REPLAYED = 10_000  # dead members replayed by one request at most


def cancel_flow(ops: Ops, who: Actor, a: Args) -> Result:
    queue, flow_id = a["queue"], a["flow_id"]
    try:
        flow = ops.app.flow(flow_id, queue)
        done = flow.cancel(who.name, a["reason"], a["to"])
    except FlowError as exc:
        return Result(False, f"{exc}; nothing was changed",
                      404 if str(exc).startswith("no flow") else 409)
    except InvalidJob as exc:  # a ``to`` other than dlq or discard
        return Result(False, f"{exc}; nothing was changed", 400)
    where = "the dead-letter queue" if a["to"] == "dlq" else "discarded"
    return Result(True, f"flow {flow_id} cancelled: {done.ended} job(s) ended at once "
                        f"({where}), {done.requested} running or ready job(s) asked to stop",
                  200, {"ended": done.ended, "requested": done.requested, "to": a["to"]})


def _flow_target(a: Args) -> str:
    return f"{a['queue']}/flow/{a['flow_id']}"


def dead_members(ops: Ops, queue: str, flow_id: str) -> list[str] | None:
    """The ids of the flow's jobs that are dead now, in the order they were made (None: no
    such flow). Bounded reads: a page of its jobs at a time, at most ``MAX_REPLAYED`` ids."""
    reader = FlowReader(ops.redis)
    dead: list[str] = []
    offset = 0
    while len(dead) < MAX_REPLAYED:
        tree = reader.tree(queue, flow_id, offset, PAGE)
        if tree is None:
            return None if offset == 0 else dead
        dead += [j.id for j in tree.jobs if j.state == states.DEAD]
        offset += PAGE
        if offset >= tree.total_jobs:
            break
    return dead[:MAX_REPLAYED]


def replay_failed(ops: Ops, who: Actor, a: Args) -> Result:
    queue, flow_id = a["queue"], a["flow_id"]
    row = FlowReader(ops.redis).get(queue, flow_id)
    if row is None:
        return Result(False, f"no flow {flow_id} in queue {queue} (finished flows are kept as "
                             "long as the queue's done jobs)", 404)
    if row.given_up:
        return Result(False, f"flow {flow_id} was given up when its member {row.failed_job} was "
                             f"{row.given_up_by.split(' by ')[0]}: it does not go on, so its dead "
                             "jobs are not replayed with it (replay one from the dead-letter "
                             "queue if its effect is still wanted); nothing was changed", 409)
    if row.state == "cancelled":
        return Result(False, f"flow {flow_id} was cancelled: its jobs are not replayed; "
                             "nothing was changed", 409)
    ids = dead_members(ops, queue, flow_id) or []
    if not ids:
        return Result(False, f"flow {flow_id} has no dead job to replay; nothing was changed",
                      409, {"replayed": 0})
    q = ops.app.job_queue(queue, flow_id)  # a flow's jobs: in its partition
    done = [job_id for job_id in ids if q.replay(job_id, who.name, _note(a))]
    missed = len(ids) - len(done)
    message = (f"{len(done)} dead job(s) of flow {flow_id} replayed: back in the ready list "
               "with their attempts reset and idempotency keys kept; the flow goes on when "
               "they complete")
    if missed:
        message += f"; {missed} had left the dead-letter queue meanwhile"
    return Result(bool(done), message, 200 if done else 409,
                  {"replayed": len(done), "not_dead_anymore": missed,
                   "job_ids": done[:100], "flow_state_before": row.state})


ENTRIES: list[Action] = [
    Action("flow.cancel", "operator",
           "Cancel a whole flow: its jobs not ended yet (held, ready, scheduled, waiting) "
           "end as cancelled, running ones when their worker sees the request; its "
           "callbacks never run. ``to``: 'dlq' (default) or 'discard'; 409 when the flow "
           "succeeded or was cancelled already.",
           "/queues/<queue>/flows/<flow_id>/cancel", "cancel_flow",
           Html("/flows/<queue>/<flow_id>/cancel", "control.cancel_flow", "overview.index"),
           ("flow", "cancel"), cancel_flow, lambda a: f"{a['queue']}/flow/{a['flow_id']}",
           (CANCEL_TO_PARAM,)),
    Action("flow.replay_failed", "operator",
           "Replay every dead job of one flow (attempts reset, idempotency keys kept); the "
           "flow goes on when they complete. 409 when it has none or was cancelled.",
           "/queues/<queue>/flows/<flow_id>/replay-failed", "replay_flow_failed",
           Html("/flows/<queue>/<flow_id>/replay-failed", "flows.replay_failed", "flows.flow",
                follow_next=False, back_args=lambda a: {"flow_id": a["flow_id"]}),
           ("flow", "replay-failed"), replay_failed, _flow_target),
]
