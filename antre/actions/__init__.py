"""The table of operator actions: each change an operator makes (pause, cancel, extend,
release, ...) declared once, with its audit name, minimum role, arguments (typed, with help
text), target and ``run`` against the core objects. The dashboard's HTML route, its JSON API
route with the OpenAPI entry (``webapp/antre_web/table_routes.py``) and the ``antre`` subcommand
(``antre_cli/actions.py``) are all built from ``TABLE``: a new action is one ``Action`` in it.

The package knows no Flask and no argparse; a surface parses its input into ``Args`` (with
``parse``), runs the action with ``Ops`` and the ``Actor`` who asked, and writes the audit
entry with ``perform`` (the one runner: the entry written first, the action run only once it
is). Its modules:

- ``base``: the declaration machinery (``Action``, ``Param``, ``Html``, ``Ops``, ``Result``,
  ``Actor``, ``parse``, ``record``) and the helpers several entries share;
- the entries, by what they act on, each module's ``ENTRIES``: ``jobs`` (one job: replay,
  discard, delete, run now, extend, cancel, edited replay), ``queues`` (pause / resume, purge,
  schedules), ``limits`` (locks, breakers, idempotency records, fair-share groups), ``dead``
  (the DLQ's filtered set, paced bulk replays and purges as tasks), ``incidents`` (incidents,
  alert thresholds), ``users`` (dashboard users);
- ``table``: ``TABLE`` (every module's entries), ``by_name`` and the page selections.

A new action is one ``Action`` in the ``ENTRIES`` of the module of what it acts on (a new
module's ``ENTRIES`` joins ``TABLE`` in ``table``). Every name is importable from
``antre.actions``.
"""

from __future__ import annotations

from .base import (
    AUDIT_UNWRITTEN_STATUS,
    MAX_BULK,
    MAX_REASON_CHARS,
    PATH_HELP,
    Action,
    Actor,
    Args,
    audit_unwritten,
    audited,
    BadInput,
    confirmed,
    Html,
    Ops,
    outcome_of,
    Param,
    parse,
    parse_params,
    perform,
    record,
    Result,
)
from .jobs import (
    MAX_EXTEND_S,
    cancel_job,
    delete_job,
    discard,
    edit_plan,
    extend,
    replay,
    replay_edited,
    replay_edited_dry_run,
    run_now,
)
from .queues import (
    TYPE,
    pause,
    purge_dry_run,
    purge_filter,
    purge_start,
    resume,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
)
from .limits import (
    group_clear,
    group_limit,
    group_pause,
    group_resume,
    group_slots,
    release_lock,
    reset_breaker,
    resolve_abandoned,
)
from .dead import (
    DEAD_FILTER,
    bulk_start,
    dead_filter,
    discard_filtered,
    discard_filtered_dry_run,
    replay_filtered_now,
)
from .incidents import (
    SILENCES,
    alert_threshold,
    incident_ack,
    incident_reopen,
    incident_silence,
)
from .users import (
    password_change,
    password_reset,
    user_add,
    user_delete,
    user_disable,
    user_enable,
    user_end_sessions,
    user_set_role,
)
from .table import (
    DEAD_ROWS,
    CliRows,
    MAX_SELECTED,
    SELECTIONS,
    TABLE,
    by_name,
    each,
    Selection,
    SelectOp,
)

__all__ = [
    "Action", "Actor", "alert_threshold", "Args", "AUDIT_UNWRITTEN_STATUS", "audit_unwritten",
    "audited", "BadInput", "bulk_start", "by_name",
    "cancel_job", "CliRows", "confirmed", "dead_filter", "DEAD_FILTER", "DEAD_ROWS", "delete_job",
    "discard", "discard_filtered", "discard_filtered_dry_run", "each", "edit_plan", "extend",
    "group_clear", "group_limit", "group_pause", "group_resume", "group_slots", "Html",
    "incident_ack",
    "incident_reopen", "incident_silence", "MAX_BULK", "MAX_EXTEND_S", "MAX_REASON_CHARS",
    "MAX_SELECTED", "Ops", "outcome_of", "Param", "parse", "parse_params", "password_change",
    "password_reset", "PATH_HELP", "pause", "perform", "purge_dry_run", "purge_filter", "purge_start",
    "record", "release_lock", "replay", "replay_edited", "replay_edited_dry_run",
    "replay_filtered_now", "reset_breaker", "resolve_abandoned", "Result", "resume", "run_now",
    "schedule_pause", "schedule_resume", "schedule_run_now", "Selection", "SELECTIONS", "SelectOp",
    "SILENCES", "TABLE", "TYPE", "user_add", "user_delete", "user_disable", "user_enable",
    "user_end_sessions", "user_set_role",
]
