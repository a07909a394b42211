"""Operator actions on the incident view: acknowledge, silence or reopen an
incident, override an alert threshold of a queue.
"""

from __future__ import annotations

from antre.observe.alerts import AlertQuiet, AlertThresholds
from antre.observe.incidents import Incident, incident_view

from .base import Action, Actor, Args, Html, Ops, Param, Result


#: How long a silence may last (label -> seconds), as the dashboard and the CLI offer it.
SILENCES = {"15 min": 900, "1 hour": 3600, "4 hours": 14_400, "24 hours": 86_400}


def _incident(ops: Ops, incident_id: str) -> Incident | None:
    iv = incident_view(ops.redis, ops.clock)
    return next((i for i in iv.open + iv.quiet if i.id == incident_id), None)


def _quiet_target(ops: Ops, a: Args) -> Incident | Result:
    if not a["reason"]:
        return Result(False, "say why (the reason is required); nothing was changed", 400)
    inc = _incident(ops, a["id"])
    if inc is None:
        return Result(False, f"no open incident {a['id']!r} (it resolved?); nothing was "
                             "changed", 404)
    return inc


def incident_ack(ops: Ops, who: Actor, a: Args) -> Result:
    inc = _quiet_target(ops, a)
    if isinstance(inc, Result):
        return inc
    AlertQuiet(ops.redis, ops.clock).ack(inc.id, inc.since, who.name, a["reason"])
    return Result(True, f"{inc.title} ({inc.queue}) acknowledged until it resolves")


def incident_silence(ops: Ops, who: Actor, a: Args) -> Result:
    if a["for"] not in SILENCES:
        return Result(False, f"silence for one of: {', '.join(SILENCES)}; nothing was "
                             "changed", 400)
    inc = _quiet_target(ops, a)
    if isinstance(inc, Result):
        return inc
    q = AlertQuiet(ops.redis, ops.clock).silence(inc.id, SILENCES[a["for"]], who.name,
                                                 a["reason"])
    return Result(True, f"{inc.title} ({inc.queue}) silenced for {a['for']}: its webhook "
                        "waits until then", 200, {"until_ms": q.until_ms})


def incident_reopen(ops: Ops, who: Actor, a: Args) -> Result:
    if not AlertQuiet(ops.redis, ops.clock).clear(a["id"]):
        return Result(False, f"{a['id']} was neither acknowledged nor silenced", 404)
    return Result(True, f"{a['id']} is open again")


def alert_threshold(ops: Ops, who: Actor, a: Args) -> Result:
    queue, name, raw = a["queue"], a["field"], a["value"] or ""
    if queue not in ops.reads.queue_names():
        return Result(False, f"no queue named {queue!r}; nothing was changed", 400)
    try:
        value = AlertThresholds(ops.redis).set(queue, name, raw)
    except ValueError as exc:
        return Result(False, f"{exc}; nothing was changed", 400)
    said = "the default" if raw == "" else ("off" if value is None else f"{value:g}")
    return Result(True, f"alert threshold {name} of queue {queue} set to {said}; the next "
                        "alert check uses it", 200, {"field": name, "value": raw})


ENTRIES: list[Action] = [
    Action("incident.ack", "operator",
           "Acknowledge an incident until it resolves (who and why are shown and audited).",
           "/incidents/ack", "incident_ack",
           Html("/incident/ack", "incident.ack", "incident.index", follow_next=False),
           ("incident", "ack"), incident_ack, lambda a: str(a["id"]),
           (Param("id", help="the incident id (GET /api/incidents)", required=True,
                  default="", positional=True),),
           reason_required_on_cli=True),
    Action("incident.silence", "operator",
           "Silence an incident for a while: it leaves the count and its webhook waits.",
           "/incidents/silence", "incident_silence",
           Html("/incident/silence", "incident.silence", "incident.index", follow_next=False),
           ("incident", "silence"), incident_silence, lambda a: str(a["id"]),
           (Param("id", help="the incident id (GET /api/incidents)", required=True,
                  default="", positional=True),
            Param("for", help="how long", required=True, default="", cli_required=True,
                  choices=tuple(SILENCES))),
           reason_required_on_cli=True),
    Action("incident.unquiet", "operator",
           "Reopen an acknowledged or silenced incident.",
           "/incidents/reopen", "incident_reopen",
           Html("/incident/unquiet", "incident.unquiet", "incident.index", follow_next=False),
           ("incident", "reopen"), incident_reopen, lambda a: str(a["id"]),
           (Param("id", help="the incident id", required=True, default="", positional=True),)),
    Action("alerts.threshold", "admin",
           "Override an alert threshold for one queue (a number, 'off', or empty: the "
           "default from the environment or code).",
           "/alerts/thresholds", "alert_threshold",
           Html("/incident/thresholds", "incident.threshold", "incident.index",
                follow_next=False),
           ("alerts", "threshold"), alert_threshold,
           lambda a: f"{a['queue']}/{a['field']}",
           (Param("queue", help="the queue", required=True, default="", positional=True),
            Param("field", help="the AlertConfig field, e.g. dlq_growth_max", required=True,
                  default="", positional=True),
            Param("value", help="a number, off, or empty for the default", default=""))),
]
