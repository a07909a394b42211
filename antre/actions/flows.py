"""Operator actions on a flow (issue 26): cancel a whole flow (every job of it not ended yet,
the callbacks with them), from the dashboard, the API and the CLI, audited as ``flow.cancel``.
"""

from __future__ import annotations

from antre.flows import FlowError

from .base import Action, Actor, Args, Html, Ops, Param, Result


def cancel_flow(ops: Ops, who: Actor, a: Args) -> Result:
    queue, flow_id = a["queue"], a["flow_id"]
    try:
        flow = ops.app.flow(flow_id, queue)
        done = flow.cancel(who.name, a["reason"], a["to"])
    except FlowError as exc:
        return Result(False, f"{exc}; nothing was changed",
                      404 if str(exc).startswith("no flow") else 409)
    where = "the dead-letter queue" if a["to"] == "dlq" else "discarded"
    return Result(True, f"flow {flow_id} cancelled: {done.ended} job(s) ended at once "
                        f"({where}), {done.requested} running or ready job(s) asked to stop",
                  200, {"ended": done.ended, "requested": done.requested, "to": a["to"]})


ENTRIES: list[Action] = [
    Action("flow.cancel", "operator",
           "Cancel a whole flow: its jobs not ended yet (held, ready, scheduled, waiting) "
           "end as cancelled, running ones when their worker sees the request; its "
           "callbacks never run. ``to``: 'dlq' (default) or 'discard'; 409 when the flow "
           "succeeded or was cancelled already.",
           "/queues/<queue>/flows/<flow_id>/cancel", "cancel_flow",
           Html("/flows/<queue>/<flow_id>/cancel", "control.cancel_flow", "overview.index"),
           ("flow", "cancel"), cancel_flow, lambda a: f"{a['queue']}/flow/{a['flow_id']}",
           (Param("to", help="where its jobs go: dlq or discard", default="dlq",
                  choices=("dlq", "discard")),)),
]
