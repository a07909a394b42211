"""The dashboard's routes for every entry of the table of operator actions
(``antre/actions/``): a JSON API route ``POST /api<action.api>`` with its OpenAPI entry
(``api.DOCS``) and an HTML form route ``POST <action.html.path>`` (flash, then a 303 back),
each behind ``requires(action.role, action.name)`` like every other change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, abort, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from antre.actions import (
    MAX_SELECTED,
    SELECTIONS,
    TABLE,
    Action,
    Args,
    BadInput,
    Result,
    SelectOp,
    Selection,
    by_name,
    each,
    parse,
)

from . import actions, api, dlq, inflight, scheduled
from .common import answer, check_queue, lease_ref, safe_next, selected_ids
from .security import audit, requires

# the refreshed pieces of page an htmx form gets back (``Html.partial``)
PARTIALS: dict[str, Callable[[dict[str, Any], Result], str]] = {
    "bulk": dlq.bulk_partial, "dlq": dlq.selection_partial,
    "scheduled": scheduled.selection_partial, "inflight": inflight.selection_partial}
JSON_KIND = {str: "string", int: "integer", float: "number"}


def api_doc(action: Action) -> dict[str, Any]:
    """The action's OpenAPI body: its parameters (path ones aside) and ``reason``."""
    body = {p.name: JSON_KIND[p.kind] for p in action.params}
    return {"query": {}, "body": {**body, "reason": "string"},
            "required": tuple(p.name for p in action.params if p.required)}


def _args(action: Action, path: dict[str, Any], src: Any) -> Args:
    if "queue" in path:
        check_queue(path["queue"])
    try:
        args = parse(action, path, src)
        return args if action.prepare is None else action.prepare(actions.table_ops(), args)
    except BadInput as exc:
        abort(400, str(exc))


def _api_view(action: Action) -> Callable[..., Response]:
    def view(**path: Any) -> Response:
        body = api._body()
        return api._answer(actions.perform(action, _args(action, path, body)))
    return view


def _not_confirmed(action: Action, args: Args) -> Result | None:
    """The form's typed confirmation (``Html.confirm``), refused and audited when it is off."""
    if action.html.confirm is None:
        return None
    name, what, word = action.html.confirm
    typed = (request.form.get("confirm") or "").strip()
    if typed == args[name] or typed.lower() == word:
        return None
    result = Result(False, f"not confirmed: type the {what} ({args[name]}) or the word "
                           f"'{word}'; nothing was changed", 400)
    audit(action.name, action.target(args), "refused", args["reason"],
          {"message": result.message})
    return result


def _not_repeated(action: Action, args: Args) -> str | None:
    """What to say when the value typed twice (``Html.repeat``) differs the second time."""
    if action.html.repeat is None:
        return None
    field, name, what = action.html.repeat
    if (request.form.get(field) or "") == (args[name] or ""):
        return None
    return f"The {what} and its confirmation differ; nothing was changed."


def _html_view(action: Action) -> Callable[..., Any]:
    def view(**path: Any) -> Any:
        args = _args(action, path, request.form)
        extra = action.html.back_args(args) if action.html.back_args else {}
        back = url_for(action.html.back, **{k: v for k, v in path.items() if k == "queue"},
                       **extra)
        back = safe_next(back) if action.html.follow_next else back
        differs = _not_repeated(action, args)
        if differs:
            flash(differs, "error")
            return redirect(back, code=303)
        result = _not_confirmed(action, args) or actions.perform(action, args)
        if action.html.partial is not None:
            partial = PARTIALS[action.html.partial]
            return answer(result, lambda r: partial(path, r), back)
        flash(result.message, "ok" if result.ok else "error")
        return redirect(back, code=303)
    return view


def _guarded(action: Action | Selection, view: Callable[..., Any], name: str,
             summary: str | None = None) -> Callable[..., Any]:
    view.__name__ = name
    view.__doc__ = summary or getattr(action, "summary", "")
    guarded = requires(action.role, action.name)(view)
    guarded.table_action = action.name  # type: ignore[attr-defined]
    return guarded


# -- selections -------------------------------------------------------------------------------
def selection_doc(sel: Selection, op: SelectOp) -> dict[str, Any]:
    """The OpenAPI body of a selection's API route: ``ids`` and the entry's own parameters
    (but ``epoch``, which each in-flight row carries)."""
    doc = api_doc(by_name(op.action))
    skip = {"epoch"} if sel.leases else set()
    body = {k: v for k, v in doc["body"].items() if k not in skip}
    return {"query": {}, "body": {"ids": "string[]", **body},
            "required": ("ids", *(n for n in doc["required"] if n not in skip))}


def run_selected(sel: Selection, op: SelectOp, queue: str, ids: list[str], src: Any) -> Result:
    """``op``'s entry for each selected id (leases: ``<epoch>:<job id>``), one answer."""
    action = by_name(op.action)
    epochs: dict[str, int] = {}
    if sel.leases:
        epochs = {job_id: epoch for epoch, job_id in map(lease_ref, ids)}
        ids = list(epochs)

    def one(job_id: str) -> Result:
        args = _args(action, {"queue": queue, "job_id": job_id}, src)
        if job_id in epochs:
            args["epoch"] = epochs[job_id]
        return actions.perform(action, args)
    return each(op.verb, ids, one)


def _selection_api_view(sel: Selection, op: SelectOp) -> Callable[..., Response]:
    def view(queue: str) -> Response:
        check_queue(queue)
        body = api._body()
        return api._answer(run_selected(sel, op, queue, api._ids(), body))
    return view


def _selection_html_view(sel: Selection) -> Callable[..., Any]:
    def view(queue: str) -> Any:
        check_queue(queue)
        op = sel.op(request.form.get("op", sel.default_op or "") or "")
        if op is None:
            abort(400, "op must be " + " or ".join(f"'{o.op}'" for o in sel.ops))
        result = run_selected(sel, op, queue, selected_ids(MAX_SELECTED), request.form)
        back = url_for(sel.html.back, queue=queue)
        back = safe_next(back) if sel.html.follow_next else back
        partial = PARTIALS[sel.html.partial or ""]
        return answer(result, lambda r: partial({"queue": queue}, r), back)
    return view


def install_selections(app: Flask, selections: list[Selection]) -> None:
    for sel in selections:
        for op in sel.ops:
            if op.api is None or op.api_name is None:
                continue
            api.DOCS[f"api.{op.api_name}"] = selection_doc(sel, op)
            app.add_url_rule(f"/api{op.api}", endpoint=f"api.{op.api_name}",
                             view_func=_guarded(sel, _selection_api_view(sel, op),
                                                op.api_name, op.summary),
                             methods=["POST"])
        app.add_url_rule(sel.html.path, endpoint=sel.html.endpoint,
                         view_func=_guarded(sel, _selection_html_view(sel),
                                            sel.html.endpoint.rpartition(".")[2],
                                            f"The action bar of {sel.html.back}."),
                         methods=["POST"])


def install(app: Flask, table: list[Action] | None = None) -> None:
    """Add both routes of every table entry to ``app`` (dotted endpoint names such as
    ``dlq.replay`` keep their blueprint's hooks and the names templates use)."""
    for action in TABLE if table is None else table:
        api.DOCS[f"api.{action.api_name}"] = api_doc(action)
        app.add_url_rule(f"/api{action.api}", endpoint=f"api.{action.api_name}",
                         view_func=_guarded(action, _api_view(action), action.api_name),
                         methods=["POST"])
        app.add_url_rule(action.html.path, endpoint=action.html.endpoint,
                         view_func=_guarded(action, _html_view(action),
                                            action.html.endpoint.rpartition(".")[2]),
                         methods=["POST"])
    install_selections(app, SELECTIONS)
