"""``antre flow``: a queue's flows: ``list`` (one state's, newest first, with the
counts) and ``show FLOW_ID`` (its state, progress, why it stopped, its jobs as a text tree by
depth, or ``--json``). Replaying a flow's dead jobs (``antre flow replay-failed``) and
cancelling a flow are entries of the table of actions that join this group (audited as
``cli:NAME``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from antre import Antre
from antre.flows import FLOW_STATES, FlowError, FlowReader, FlowRow
from antre.flows.layout import depths, text_tree
from antre_worker.loader import load_app

SHOW_LIMIT = 1000  # jobs of one flow shown (FlowReader's bound per read)


def add_flow(sub: Any) -> Any:
    """The ``flow`` group with ``list`` and ``show``; returns its subparsers for the table's
    entries to join."""
    g = sub.add_parser("flow", help="flows (chains, parallel fan-outs, chords, batches): "
                                    "list | show | replay-failed | ...")
    g.add_argument("--app", default=None, help="pkg.module:app (default: from environment)")
    gsub = g.add_subparsers(dest="flow_cmd", required=True)
    ls = gsub.add_parser("list", help="a queue's flows of one state, newest first, and the "
                                      "count of each state")
    ls.add_argument("--queue", default=None, help="the queue (default: the app's default)")
    ls.add_argument("--state", default="running", choices=list(FLOW_STATES))
    ls.add_argument("--limit", type=int, default=50, help="at most this many (1-1000)")
    ls.add_argument("--offset", type=int, default=0)
    ls.add_argument("--json", action="store_true", help="JSON output")
    show = gsub.add_parser("show", help="one flow: state, progress, why it stopped, its jobs "
                                        "as a tree")
    show.add_argument("flow_id")
    show.add_argument("--queue", default=None,
                      help="the flow's queue (default: looked for in the app's queues)")
    show.add_argument("--json", action="store_true", help="JSON output")
    return gsub


def _progress(row: FlowRow) -> str:
    failed = f", {row.failed} failed" if row.failed else ""
    return f"{row.done} done{failed}, {row.to_go} to go of {row.total}"


def _why(row: FlowRow) -> str:
    if row.cancelled_by:
        return f"cancelled by {row.cancelled_by}" + (f": {row.cancel_reason}"
                                                      if row.cancel_reason else "")
    if row.failed_job:
        gave_up = f"; given up: {row.given_up_by}" if row.given_up else ""
        return f"member {row.failed_job} died: {row.failed_reason}{gave_up}"
    return ""


def cmd_flow(args: argparse.Namespace) -> int:
    """``antre flow list`` / ``antre flow show FLOW_ID``."""
    app = load_app(args.app) if args.app else Antre()
    return _list(app, args) if args.flow_cmd == "list" else _show(app, args)


def _list(app: Antre, args: argparse.Namespace) -> int:
    queue = args.queue or app.default_queue
    if not 1 <= args.limit <= 1000 or args.offset < 0:
        print("error: pass --limit from 1 to 1000 and --offset >= 0", file=sys.stderr)
        return 2
    reader = FlowReader(app.redis)
    counts, page = reader.counts(queue), reader.list_flows(queue, args.state, args.offset,
                                                           args.limit)
    if args.json:
        print(json.dumps({"queue": queue, "counts": counts, **dataclasses.asdict(page)},
                         indent=1))
        return 0
    print(f"{queue}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for row in page.rows:
        why = _why(row)
        print(f"  {row.id}  {row.kind}  {_progress(row)}  policy {row.policy}"
              f"{f'  {row.description!r}' if row.description else ''}{f'  ({why})' if why else ''}")
    if page.total > page.offset + len(page.rows):
        print(f"  ... {page.total - page.offset - len(page.rows)} more (--offset "
              f"{page.offset + len(page.rows)})")
    return 0


def _show(app: Antre, args: argparse.Namespace) -> int:
    try:
        queue = args.queue or app.flow(args.flow_id).queue
    except FlowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    tree = FlowReader(app.redis).tree(queue, args.flow_id, 0, SHOW_LIMIT)
    if tree is None:
        print(f"error: no flow {args.flow_id} in queue {queue!r}", file=sys.stderr)
        return 1
    row = tree.flow
    if args.json:
        d = depths(tree.jobs)
        print(json.dumps({"flow": dataclasses.asdict(row), "total_jobs": tree.total_jobs,
                          "jobs": [{**dataclasses.asdict(j), "depth": d[j.id]}
                                   for j in tree.jobs]}, indent=1))
        return 0
    why = _why(row)
    print(f"flow {row.id} ({row.kind}) in {queue}: {row.state}; {_progress(row)}; "
          f"policy {row.policy}")
    if row.description:
        print(f"  {row.description}")
    if why:
        print(f"  {why}")
    for line in text_tree(tree.jobs):
        print(f"  {line}")
    if tree.total_jobs > len(tree.jobs):
        print(f"  ... and {tree.total_jobs - len(tree.jobs)} more jobs (see the dashboard or "
              "the API's paging)")
    return 0
