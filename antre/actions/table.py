"""The table of operator actions, ``TABLE``: the entries of the modules beside this one
(``jobs``, ``queues``, ``limits``, ``gates``, ``dead``, ``incidents``, ``users``, ``flows``) in one list,
and the selections (``SELECTIONS``: one entry run over the ticked rows of a dashboard page, or
over the job ids an ``antre`` command names).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from antre.observe.readmodels import DeadFilter

from . import dead, flows, gates, incidents, jobs, limits, queues, users
from .base import Action, Args, Html, Ops, Param, Result

TABLE: list[Action] = [
    *jobs.ENTRIES,
    *queues.ENTRIES,
    *limits.ENTRIES,
    *gates.ENTRIES,  # a type's or downstream's limits held at reserve
    *dead.ENTRIES,
    *incidents.ENTRIES,
    *users.ENTRIES,
    *flows.ENTRIES,  # a whole flow: cancel, replay its dead jobs
]


def by_name(name: str) -> Action:
    return next(a for a in TABLE if a.name == name)


# -- selections: one table entry over the ticked rows of a page --------------------------------
@dataclass(frozen=True)
class SelectOp:
    """One button of a selection: ``op`` (the form's value) runs the table entry ``action`` for
    each ticked row; ``api`` / ``api_name`` / ``summary``: its JSON route, when it has one;
    ``cli``: its ``antre`` words, when it has a command (job ids as positionals, ``--queue``
    from the command's group or its own, ``--all`` when the selection has ``cli_rows``; it
    prints ``<last word>: N of M jobs``)."""
    op: str
    action: str
    verb: str  # "3 jobs <verb>"
    api: str | None = None
    api_name: str | None = None
    summary: str = ""
    cli: tuple[str, ...] = ()
    cli_help: str = ""  # the command's help (else ``summary``)


@dataclass(frozen=True)
class Selection:
    """The action bar of a page's table: POST ``html.path`` with ``ids`` and ``op``, each id
    run through its entry (one audit entry per job, under the entry's name), one answer for
    all. A refusal of the whole request (role) is audited as ``name``."""
    name: str
    role: str
    html: Html
    ops: tuple[SelectOp, ...]
    default_op: str | None = None  # the op when the form names none (None: op is required)
    leases: bool = False  # rows are ``<epoch>:<job id>``: the lease the operator saw
    cli_rows: CliRows | None = None  # the CLI's ``--all``: the page's rows by a filter

    def op(self, name: str) -> SelectOp | None:
        return next((o for o in self.ops if o.op == name), None)


@dataclass(frozen=True)
class CliRows:
    """A selection's rows on the CLI, besides the ids it names: ``--all`` (``help``) lists
    them by the filter ``params`` (``--options``) with ``ids(ops, args)``."""
    help: str
    params: tuple[Param, ...]
    ids: Callable[[Ops, Args], list[str]]


def _dead_ids(ops: Ops, a: Args) -> list[str]:
    flt = DeadFilter(job_type=a["type"], group=a["group"])
    return [job_id for job_id, _ in ops.reads.dead_ids(a["queue"], flt, a["limit"])]


DEAD_ROWS = CliRows("every dead job matching the filter",
                    (Param("type", help="only this job type"),
                     Param("group", help="only this error group"),
                     Param("limit", int, "with --all: at most this many jobs", default=1000)),
                    _dead_ids)
MAX_SELECTED = 500  # rows one selection may act on (a page holds at most 500)


def each(verb: str, ids: list[str], one: Callable[[str], Result]) -> Result:
    """``one`` per selected job (each writes its own audit entry), summed up in one result:
    ``"3 jobs replayed"``, with what went wrong for the others."""
    results = [(job_id, one(job_id)) for job_id in ids]
    done = [job_id for job_id, r in results if r.ok]
    problems = [r.message for _, r in results if not r.ok]
    message = f"{_jobs(len(done))} {verb}"
    if problems:
        message += f"; {_jobs(len(problems))} not"
    status = 200 if not problems else max(r.status for _, r in results if not r.ok)
    return Result(not problems, message, status, {"done": done, "problems": problems})


def _jobs(n: int) -> str:
    return "1 job" if n == 1 else f"{n} jobs"


SELECTIONS: list[Selection] = [
    Selection("dlq.selected", "operator",
              Html("/dlq/<queue>/selected", "dlq.selected", "dlq.index", partial="dlq"),
              (SelectOp("replay", "dlq.replay", "replayed",
                        "/queues/<queue>/selection/replay", "replay_selected",
                        "Replay the listed dead jobs; ``done`` and ``problems`` say which "
                        "were and were not.", cli=("dlq", "replay"),
                        cli_help="replay dead jobs by id, or --all by a filter (audited per "
                                 "job)"),
               SelectOp("discard", "dlq.discard", "discarded",
                        "/queues/<queue>/selection/discard", "discard_selected",
                        "Discard the listed dead jobs.", cli=("dlq", "discard"),
                        cli_help="discard dead jobs by id, or --all by a filter (audited "
                                 "per job)")),
              cli_rows=DEAD_ROWS),
    Selection("scheduled.selected", "operator",
              Html("/scheduled/<queue>/selected", "scheduled.selected", "scheduled.index",
                   follow_next=False, partial="scheduled"),
              (SelectOp("run_now", "scheduled.run_now", "moved to the ready list",
                        "/queues/<queue>/selection/run-now", "run_now_selected",
                        "Move the listed scheduled jobs to the ready list now."),
               SelectOp("delete", "job.delete", "deleted")),
              default_op="run_now"),
    Selection("inflight.selected", "operator",
              Html("/inflight/<queue>/selected", "inflight.selected", "inflight.index",
                   follow_next=False, partial="inflight"),
              (SelectOp("extend", "inflight.extend", "extended",
                        "/queues/<queue>/selection/extend", "extend_selected",
                        "Extend the listed leases (``ids``: ``<epoch>:<job id>``) by N "
                        "seconds each."),
               SelectOp("cancel", "job.cancel", "asked to stop")),
              default_op="extend", leases=True),
]
