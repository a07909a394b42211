"""The dashboard's routes for every entry of the table of operator actions
(``antre/actions.py``): a JSON API route ``POST /api<action.api>`` with its OpenAPI entry
(``api.DOCS``) and an HTML form route ``POST <action.html.path>`` (flash, then a 303 back),
each behind ``requires(action.role, action.name)`` like every other change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, abort, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from antre.actions import TABLE, Action, Args, BadInput, Result, parse

from . import actions, api, dlq
from .common import answer, check_queue, safe_next
from .security import audit, requires

# the refreshed pieces of page an htmx form gets back (``Html.partial``)
PARTIALS: dict[str, Callable[[dict[str, Any], Result], str]] = {"bulk": dlq.bulk_partial}
JSON_KIND = {str: "string", int: "integer", float: "number", bool: "boolean"}


def api_doc(action: Action) -> dict[str, Any]:
    """The action's OpenAPI body: its parameters (path ones aside) and ``reason``."""
    body = {p.name: JSON_KIND[p.kind] for p in action.params}
    return {"query": {}, "body": {**body, "reason": "string"},
            "required": tuple(p.name for p in action.params if p.required)}


def _args(action: Action, path: dict[str, Any], src: Any) -> Args:
    if "queue" in path:
        check_queue(path["queue"])
    try:
        return parse(action, path, src)
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


def _html_view(action: Action) -> Callable[..., Any]:
    def view(**path: Any) -> Any:
        args = _args(action, path, request.form)
        result = _not_confirmed(action, args) or actions.perform(action, args)
        back = url_for(action.html.back, **{k: v for k, v in path.items() if k == "queue"})
        back = safe_next(back) if action.html.follow_next else back
        if action.html.partial is not None:
            partial = PARTIALS[action.html.partial]
            return answer(result, lambda r: partial(path, r), back)
        flash(result.message, "ok" if result.ok else "error")
        return redirect(back, code=303)
    return view


def _guarded(action: Action, view: Callable[..., Any], name: str) -> Callable[..., Any]:
    view.__name__ = name
    view.__doc__ = action.summary
    guarded = requires(action.role, action.name)(view)
    guarded.table_action = action.name  # type: ignore[attr-defined]
    return guarded


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
