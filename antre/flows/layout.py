"""A flow's jobs laid out by depth, for the flow page, its JSON and ``antre flow show`` (pure).

A job's depth is 0 when none of its parents is among the jobs given, else one more than its
deepest parent's: a chain's steps get depths 0, 1, 2, ..., a group's members side by side at
one depth, a chord's callback one below its group. A batch's callbacks (``hook``) wait for
every member, so they come last. Jobs are given in the order they were made (parents before
children, ``FlowReader.tree``); a parent made later (it cannot be, but a record may be bad)
counts as absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from antre.flows.read import FlowJob


@dataclass(frozen=True)
class Level:
    """The jobs of one depth, in the order they were made."""

    depth: int
    jobs: list[FlowJob]


def depths(jobs: list[FlowJob]) -> dict[str, int]:
    """Each job's depth (see the module). A job whose record is gone (discarded, dropped
    with its given-up flow) has no parents of its own to say: those naming it as a child do."""
    named: dict[str, list[str]] = {}
    for job in jobs:
        for child in job.children:
            named.setdefault(child, []).append(job.id)
    out: dict[str, int] = {}
    for job in jobs:
        if job.hook:
            continue
        parents = job.parents or (named.get(job.id, ()) if job.state == "gone" else ())
        known = [out[p] for p in parents if p in out]
        out[job.id] = 1 + max(known) if known else 0
    last = 1 + max(out.values()) if out else 0
    for job in jobs:
        if job.hook:
            out[job.id] = last
    return out


def levels(jobs: list[FlowJob]) -> list[Level]:
    """The jobs grouped by depth, shallowest first."""
    by_depth: dict[int, list[FlowJob]] = {}
    d = depths(jobs)
    for job in jobs:
        by_depth.setdefault(d[job.id], []).append(job)
    return [Level(depth, by_depth[depth]) for depth in sorted(by_depth)]


def text_tree(jobs: list[FlowJob]) -> list[str]:
    """``antre flow show``'s lines: one per job, indented by depth, with its state, attempt
    and last error (cut to one line)."""
    lines: list[str] = []
    for level in levels(jobs):
        for job in level.jobs:
            error = job.last_error.strip().splitlines()[-1][:120] if job.last_error.strip() else ""
            hook = f" ({job.hook})" if job.hook else ""
            lines.append(f"{'  ' * level.depth}- {job.type}{hook} [{job.state}] {job.id}"
                         f" {job.attempt_text}{f'  error: {error}' if error else ''}")
    return lines
