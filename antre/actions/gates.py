"""Operator actions on a job type's or downstream's flow limits held at reserve: override its
slots and/or rate in one queue with a reason, until cleared or for a while,
and end the override (``antre.limits.gates``). An unknown type or downstream is refused
saying so (400 / exit 1), nothing changed."""

from __future__ import annotations

from antre.limits.gates import GateError

from .base import Action, Actor, Args, describe_override, Html, Ops, Param, Result


def _target(a: Args) -> str:
    return f"{a['queue']}/{a['kind']}:{a['name']}"


def _refused(exc: GateError) -> Result:
    return Result(False, f"{exc}; nothing was changed", 400)


def limit_set(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        over = ops.gates.set_override(a["queue"], a["kind"], a["name"], who.name, a["reason"],
                                      slots=a["slots"], rate=a["rate"] or None,
                                      revert_after_s=a["revert_after_s"])
    except GateError as exc:
        return _refused(exc)
    return describe_override(over, f"{a['kind']} {a['name']} in {a['queue']}",
                             a["revert_after_s"], "held on every worker at its next reserve")


def limit_clear(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        started = ops.gates.clear(a["queue"], a["kind"], a["name"])
    except GateError as exc:
        return _refused(exc)
    return Result(True, f"{a['kind']} {a['name']} in {a['queue']}: override ended, its declared "
                        f"limits apply ({started} waiting jobs started)", 200,
                  {"started": started})


_BASE = "/queues/<queue>/limits/<kind>/<name>"
_HTML = "/groups/<queue>/limits/<kind>/<name>"

ENTRIES: list[Action] = [
    Action("limit.set", "operator",
           "Override a job type's or downstream's limits in a queue (kind 'type' or "
           "'downstream'): ``slots`` (in flight at once; 0 holds it) and/or ``rate`` ('10/s'), "
           "until cleared or for ``revert_after_s``; held at every worker's next reserve; 400 "
           "for a type or downstream no worker serving the queue declared.",
           _BASE, "limit_set",
           Html(f"{_HTML}/set", "groups.limit_set", "groups.index"),
           ("limit", "set"), limit_set, _target,
           (Param("slots", int, "in flight at once; 0 holds it"),
            Param("rate", str, "starts per window: '10/s', '600/m', '5/10s'", default=""),
            Param("revert_after_s", float, "the override ends by itself after this many "
                                           "seconds")),
           reason_required_on_cli=True),
    Action("limit.clear", "operator",
           "End the operator's override of a job type's or downstream's limits in a queue "
           "(the declared ones apply again; a raise starts waiting jobs at once).",
           f"{_BASE}/clear", "limit_clear",
           Html(f"{_HTML}/clear", "groups.limit_clear", "groups.index"),
           ("limit", "clear"), limit_clear, _target),
]
