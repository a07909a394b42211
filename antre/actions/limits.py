"""Operator actions on what holds jobs back: force-release a lock, close a circuit breaker,
resolve an abandoned idempotency record, and the fair-share groups (pause, resume,
override their slots and rate).
"""

from __future__ import annotations

from typing import Any

from antre.control.abandoned import RESOLUTIONS, ResolveError
from antre.groups.control import GroupError

from .base import Action, Actor, Args, describe_override, Html, Ops, Param, Result


def release_lock(ops: Ops, who: Actor, a: Args) -> Result:
    key, token = a["key"], a["token"] or ""
    if not token:
        return Result(False, "the holder token is required", 400)
    if not ops.locks.release_token(key, token):
        return Result(False, f"lock {key!r} is no longer held by that token (released, "
                             "expired or re-taken since); nothing was changed", 409)
    return Result(True, f"lock {key!r} released", 200, {"token": token})


def reset_breaker(ops: Ops, who: Actor, a: Args) -> Result:
    name = a["name"]
    flow = ops.flow
    known = {b.name: b for b in flow.breakers()}
    if name not in known:
        return Result(False, f"no circuit breaker named {name!r}; known: "
                             f"{', '.join(sorted(known)) or 'none'}", 404)
    state = known[name]
    flow.breaker(name, state.failure_threshold, state.window_s, state.cooldown_s).reset()
    return Result(True, f"circuit breaker {name} closed by hand (was {state.state})", 200,
                  {"before": state.state, "after": "closed"})

def resolve_abandoned(ops: Ops, who: Actor, a: Args) -> Result:
    """Mark an abandoned idempotency record failed, or reset it (``antre.control.abandoned``);
    SQL only: a Redis outage does not stop it."""
    key, to = a["key"], a["to"]
    records = ops.abandoned()
    if records is None:
        return Result(False, "idempotency records live in the database: set "
                             "ANTRE_DATABASE_URL", 503)
    try:
        was = records.resolve(key, to, by=who.name, reason=a["reason"])
    except ResolveError as exc:
        return Result(False, str(exc), 409 if to in RESOLUTIONS else 400)
    done = "marked failed" if to == "failed" else "reset: a resend runs afresh"
    return Result(True, f"abandoned idempotency record {key!r} {done}", 200,
                  {"to": to, "job_id": was.job_id, "fence": was.fence,
                   "abandoned_since_ms": was.since_ms})

# -- fair-share groups: pause / resume one, override its slots and rate ------------------------
def _group_target(a: Args) -> str:
    return f"{a['queue']}/{a['group']}"


def _group_back(a: Args) -> dict[str, Any]:
    return {"group": a["group"]}  # (the queue is added from the path)


def _group_refused(exc: GroupError) -> Result:
    text = str(exc)
    return Result(False, f"{text}; nothing was changed",
                  409 if "already" in text or "not paused" in text else 400)


def group_pause(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        ops.groups.pause(a["queue"], a["group"], who.name, a["reason"])
    except GroupError as exc:
        return _group_refused(exc)
    return Result(True, f"group {a['group']} in {a['queue']} paused: workers start none of its "
                        "jobs until it is resumed (running ones finish)")


def group_resume(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        moved = ops.groups.resume(a["queue"], a["group"])
    except GroupError as exc:
        return _group_refused(exc)
    return Result(True, f"group {a['group']} in {a['queue']} resumed ({moved} parked jobs back "
                        "in the ready list)", 200, {"unparked": moved})


def group_slots(ops: Ops, who: Actor, a: Args) -> Result:
    if a["slots"] is None:
        return Result(False, "pass slots: a whole number, 0 holds the group; nothing was "
                             "changed", 400)
    try:
        over = ops.groups.set_slots(a["queue"], a["group"], a["slots"], who.name, a["reason"],
                                    a["revert_after_s"])
    except GroupError as exc:
        return _group_refused(exc)
    until = f" for {a['revert_after_s']:g} s" if over.until_ms else " until cleared"
    return Result(True, f"group {a['group']} in {a['queue']}: {over.slots} slots{until}", 200,
                  {"slots": over.slots, "until_ms": over.until_ms})


def group_limit(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        over = ops.groups.set_override(a["queue"], a["group"], who.name, a["reason"],
                                       slots=a["slots"], rate=a["rate"] or None,
                                       revert_after_s=a["revert_after_s"])
    except GroupError as exc:
        return _group_refused(exc)
    return describe_override(over, f"group {a['group']} in {a['queue']}", a["revert_after_s"],
                             "held by every worker from its next slot and start")


def group_clear(ops: Ops, who: Actor, a: Args) -> Result:
    try:
        now = ops.groups.clear_slots(a["queue"], a["group"])
    except GroupError as exc:
        return _group_refused(exc)
    return Result(True, f"group {a['group']} in {a['queue']}: override ended, {now} slots (its "
                        "jobs' own)", 200, {"slots": now})


def _group_actions() -> list[Action]:
    base = "/queues/<queue>/groups/<group>"
    return [
        Action("group.pause", "operator",
               "Pause one fair-share group: workers start none of its jobs (running ones "
               "finish); 409 when it is paused already.",
               f"{base}/pause", "group_pause",
               Html("/groups/<queue>/<group>/pause", "groups.pause", "groups.group",
                    back_args=_group_back),
               ("group", "pause"), group_pause, _group_target, reason_required_on_cli=True),
        Action("group.resume", "operator",
               "Resume a paused group; its parked jobs go back to the ready list.",
               f"{base}/resume", "group_resume",
               Html("/groups/<queue>/<group>/resume", "groups.resume", "groups.group",
                    back_args=_group_back),
               ("group", "resume"), group_resume, _group_target),
        Action("group.slots", "operator",
               "Override a group's slots (how many of its jobs may be ready or running at "
               "once; 0 holds it), until cleared or for ``revert_after_s``; a raise starts "
               "waiting jobs at once.",
               f"{base}/slots", "group_slots",
               Html("/groups/<queue>/<group>/slots", "groups.slots", "groups.group",
                    back_args=_group_back),
               ("group", "slots"), group_slots, _group_target,
               (Param("slots", int, "slots: 0 holds the group", required=True,
                      cli_required=True),
                Param("revert_after_s", float, "the override ends by itself after this many "
                                               "seconds")),
               reason_required_on_cli=True),
        Action("group.limit", "operator",
               "Override a group's slots (0 holds it) and/or its rate ('10/s': replaces its "
               "jobs' group_rate, or gives the group one), until cleared or for "
               "``revert_after_s``; setting it again replaces both. A raise starts waiting "
               "jobs at once; the start the rate gave ahead is given again under the new one.",
               f"{base}/limit", "group_limit",
               Html("/groups/<queue>/<group>/limit", "groups.limit", "groups.group",
                    back_args=_group_back),
               ("group", "limit"), group_limit, _group_target,
               (Param("slots", int, "slots: 0 holds the group"),
                Param("rate", str, "starts per window: '10/s', '600/m', '5/10s'", default=""),
                Param("revert_after_s", float, "the override ends by itself after this many "
                                               "seconds")),
               reason_required_on_cli=True),
        Action("group.clear", "operator",
               "End the operator's override of a group's slots and rate (its jobs' own apply "
               "again).",
               f"{base}/slots/clear", "group_clear",
               Html("/groups/<queue>/<group>/slots/clear", "groups.clear", "groups.group",
                    back_args=_group_back),
               ("group", "clear"), group_clear, _group_target),
    ]


ENTRIES: list[Action] = [
    Action("locks.release", "operator",
           "Force-release a lock, only if still held by ``token`` (compare-and-delete).",
           "/locks/release", "release_lock",
           Html("/locks/release", "locks.release", "locks.index", follow_next=False,
                confirm=("key", "lock key", "release")),
           ("lock", "release"), release_lock, lambda a: str(a["key"]),
           (Param("key", help="the lock key", required=True, default="", positional=True),
            Param("token", help="the holder token (Locks page / API)", required=True,
                  default="", cli_required=True))),
    Action("flow.reset_breaker", "operator",
           "Close a circuit breaker by hand and forget its failures.",
           "/flow/breakers/<name>/reset", "reset_breaker",
           Html("/flow/breakers/<name>/reset", "overview.reset_breaker", "overview.index"),
           ("breaker", "reset"), reset_breaker, lambda a: str(a["name"])),
    Action("idempotency.resolve", "operator",
           "Resolve an abandoned idempotency record (stuck in processing, its owner's lease "
           "expired, no job with its key): ``to`` 'failed' (the result answers failed) or "
           "'reset' (forgotten: a resend runs afresh). 409 when it is not abandoned (nothing "
           "changed).",
           "/idempotency/resolve", "idempotency_resolve",
           Html("/idempotency/resolve", "idempotency.resolve", "idempotency.index",
                follow_next=False, back_args=lambda a: {"key": a["key"]}),
           ("idempotency", "resolve"), resolve_abandoned, lambda a: str(a["key"]),
           (Param("key", help="the idempotency key", required=True, default="",
                  positional=True),
            Param("to", help="failed: result answers failed; reset: forget it, a resend runs "
                             "afresh", required=True, default="", cli_required=True,
                  choices=RESOLUTIONS)),
           reason_required_on_cli=True,
           cli_help="resolve an abandoned idempotency record (stuck in processing, no job "
                    "left): --to failed | reset"),
    *_group_actions(),
]
