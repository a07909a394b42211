"""Performance per job type: ``/types/`` (every type's runs, failures,
duration and queue-wait percentiles over a window) and ``/types/<job_type>`` (the three
windows, a duration histogram, runs and p95 per slot with the deploys and the operators'
actions marked), with their JSON twins ``GET /api/types`` and ``GET /api/types/<job_type>``.
The figures are ``antre.observe.perf``'s (Redis, bounded); the markers add the audit log."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, jsonify, request
from flask.typing import ResponseReturnValue

from antre.engine.keys import valid_name
from antre.observe import perf

from . import api, services
from .common import arg_int, check_queue, render
from .overview import TICK_FORMATS, _markers
from .security import requires

bp = Blueprint("perf", __name__)
LABELS = {"1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days"}


def _type(name: str) -> str:
    if not valid_name(name):
        abort(400, "bad job type: use 1-100 of A-Z a-z 0-9 _ . : - (e.g. send_email)")
    return name


def _queue() -> str | None:
    raw = request.args.get("queue") or ""
    return check_queue(raw) if raw else None


def _reads() -> perf.Perf:
    svc = services.get()
    return perf.Perf(svc.redis, svc.clock)


def _page(job_type: str, window: str) -> perf.TypePerf:
    svc = services.get()
    since = svc.clock() - perf.WINDOWS[window][1] - perf.SLOT_MS["h"]
    audit = [perf.Marker(m["t"], "operator", m["text"]) for m in _markers(since)]
    page = _reads().type_perf(job_type, window, _queue(), audit)
    if not page.queues:
        abort(404, f"no job of type {job_type} ran in any queue yet")
    return page


def _types_page(window: str) -> perf.TypesPage:
    """The index's page of types: ``offset`` and ``limit`` (at most ``perf.PAGE_MAX``) from
    the query; its cost is the types shown, not the types that exist."""
    return _reads().page(window, _queue(),
                         arg_int("limit", perf.PAGE, 1, perf.PAGE_MAX),
                         arg_int("offset", 0, 0, 10**9))


@bp.get("/types/")
@requires("viewer")
def index() -> str:
    window = perf.window_arg(request.args.get("window"))
    page = _types_page(window)
    return render("types.html", "_types.html", rows=page.rows, page=page, window=window,
                  labels=LABELS, fmt=perf.fmt_ms, as_of=services.get().clock(),
                  queue=request.args.get("queue") or "")


@bp.get("/types/<job_type>")
@requires("viewer")
def type_page(job_type: str) -> str:
    window = perf.window_arg(request.args.get("window"))
    page = _page(_type(job_type), window)
    return render("type_perf.html", "_type_perf.html", page=page, window=window,
                  labels=LABELS, fmt=perf.fmt_ms,
                  buckets=[_bucket_label(b) for b in perf.BUCKET_NAMES],
                  charts=charts(page), as_of=page.as_of)


api.DOCS["perf.types_api"] = {"query": {"window": "string", "queue": "string",
                                          "offset": "integer", "limit": "integer"},
                               "body": {}, "required": ()}


@bp.get("/api/types")
@requires("viewer")
def types_api() -> ResponseReturnValue:
    """The job types that ran in a window, busiest first, a page of them (``offset``,
    ``limit`` up to 500; ``total``: how many ran): runs, failures and duration / queue-wait
    percentiles."""
    window = perf.window_arg(request.args.get("window"))
    page = _types_page(window)
    return jsonify({"window": window, "as_of": services.get().clock(), "total": page.total,
                    "offset": page.offset, "limit": page.limit,
                    "types": [{"job_type": r.job_type, "queues": list(r.queues),
                               **r.figures.to_dict()} for r in page.rows]})


@bp.get("/api/types/<job_type>")
@requires("viewer")
def type_api(job_type: str) -> ResponseReturnValue:
    """One job type over the last hour, 24 hours and 7 days, its series and its markers."""
    job_type = _type(job_type)
    window = perf.window_arg(request.args.get("window"))
    page = _page(job_type, window)
    return jsonify({"job_type": page.job_type, "queues": list(page.queues), "window": window,
                    "as_of": page.as_of,
                    "windows": {w: f.to_dict() for w, f in page.windows.items()},
                    "series": [{"t": p.t, "runs": p.runs, "failures": p.failures,
                                "p95_ms": p.p95_ms} for p in page.series],
                    "markers": [{"t": m.t, "kind": m.kind, "text": m.text}
                                for m in page.markers]})


def charts(page: perf.TypePerf) -> list[dict[str, Any]]:
    """The page's Plotly figures: the selected window's duration histogram, and runs and
    p95 per slot with the markers (x in epoch ms, as the overview's)."""
    f = page.selected
    label = LABELS[page.window]
    hist = {"data": [{"type": "bar", "name": "runs", "x": [_bucket_label(b)
                                                           for b in perf.BUCKET_NAMES],
                      "y": list(f.duration_hist)}],
            "layout": {"title": {"text": f"{page.job_type}: duration, {label}"}, "height": 260,
                       "margin": {"l": 50, "r": 10, "t": 40, "b": 60},
                       "xaxis": {"type": "category", "title": {"text": "handler run time up to"}},
                       "yaxis": {"title": {"text": "runs"}, "rangemode": "tozero"}},
            "summary": f"{page.job_type}: duration histogram, {label}: {f.runs} runs, "
                       f"p50 {perf.fmt_ms(f.duration.p50)}, p95 {perf.fmt_ms(f.duration.p95)}, "
                       f"p99 {perf.fmt_ms(f.duration.p99)}"}
    xs = [p.t for p in page.series]
    mx = [m.t for m in page.markers]
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "runs", "x": xs,
         "y": [p.runs for p in page.series]},
        {"type": "scatter", "mode": "lines", "name": "failures", "x": xs,
         "y": [p.failures for p in page.series]},
        {"type": "scatter", "mode": "lines+markers", "name": "p95 ms", "x": xs, "yaxis": "y2",
         "y": [p.p95_ms for p in page.series], "connectgaps": False}]
    if mx:
        data.append({"type": "scatter", "mode": "markers", "name": "deploys and actions",
                     "x": mx, "y": [0] * len(mx), "hoverinfo": "text+x",
                     "hovertext": [_safe(m.text) for m in page.markers],
                     "marker": {"symbol": "triangle-up", "size": 10}})
    series = {"data": data,
              "layout": {"title": {"text": f"{page.job_type}: runs and p95, {label}"},
                         "height": 280, "margin": {"l": 50, "r": 50, "t": 40, "b": 40},
                         "shapes": [{"type": "line", "xref": "x", "yref": "paper", "x0": x,
                                     "x1": x, "y0": 0, "y1": 1,
                                     "line": {"dash": "dot", "width": 1}} for x in mx],
                         "xaxis": {"type": "date", "tickformatstops": TICK_FORMATS,
                                   "nticks": 8},
                         "yaxis": {"title": {"text": "runs per slot"}, "rangemode": "tozero"},
                         "yaxis2": {"title": {"text": "p95 ms"}, "overlaying": "y",
                                    "side": "right", "rangemode": "tozero"},
                         "legend": {"orientation": "h", "y": -0.2}},
              "summary": f"{page.job_type}: {f.runs} runs, {f.failures} failures in the "
                         f"{label}, {len(mx)} deploys or operator actions marked"}
    return [hist, series]


def _bucket_label(bucket: str) -> str:
    """A bucket's upper bound: '5ms', '2.5s', '30m', 'more'."""
    if bucket == "inf":
        return "more"
    ms = int(bucket)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    return f"{ms // 60_000}m"


def _safe(text: str) -> str:
    return text.replace("<", "‹").replace(">", "›")[:200]
