"""Overview: depth per queue, rates from the sampler's diffs, lease expirations, lock conflicts,
and the charts (Plotly) with operator actions from the audit log as vertical markers."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from flask import Blueprint, request
from sqlalchemy.exc import SQLAlchemyError

from antre.observe import perf, sampling
from antre.observe.readmodels import StatusSummary
from antre.observe.status import status_summary

from . import services
from .common import WINDOWS_MS, check_queue, render
from .security import database_seen, requires

bp = Blueprint("overview", __name__)

CHART_WINDOWS = ("1h", "6h", "24h")
MAX_POINTS = 720


def overview_data() -> StatusSummary:
    svc = services.get()
    return status_summary(svc.redis, svc.clock, locks=svc.locks)


@bp.get("/")
@requires("viewer")
def index() -> str:
    summary = overview_data()
    names = [q.name for q in summary.overview.queues]
    window = _window_arg()
    queue = request.args.get("queue") or (names[0] if names else "default")
    types = sorted(perf.Perf(services.get().redis).queue_types())[:50]  # (linked: /types/)
    return render("overview.html", "_overview.html", window=window, chart_queue=check_queue(queue),
                  queues=names, s=summary, as_of=summary.as_of, job_types=types)


def _thin(samples: list[dict[str, int]]) -> list[dict[str, int]]:
    step = max(1, len(samples) // MAX_POINTS)
    return samples[::step]


def _markers(since: int) -> list[dict[str, Any]]:
    """Operator actions in the window (newest 500), for vertical lines on the charts."""
    svc = services.get()
    try:
        rows = svc.audit.list(limit=500)
    except SQLAlchemyError as exc:
        database_seen(exc)
        return []
    out = []
    for row in rows:
        at = int(row.at.timestamp() * 1000)
        if at >= since and row.action != "login" and row.outcome == "ok":
            text = f"{row.user}: {row.action} {row.target or ''}"
            out.append({"t": at, "text": text.replace("<", "‹").replace(">", "›")[:200]})
    return out


# tick labels by zoom level: seconds only when ticks are under a minute apart, dates only when a
# day or more apart, so no two ticks read the same
TICK_FORMATS = [{"dtickrange": [None, 60_000], "value": "%H:%M:%S"},
                {"dtickrange": [60_000, 86_400_000], "value": "%H:%M"},
                {"dtickrange": [86_400_000, None], "value": "%b %d"}]


GAP_FACTOR = 3  # samples further apart than 3 typical intervals: nobody sampled in between
MIN_GAP_MS = 60_000


def gap_after(xs: list[int]) -> int:
    """The spacing (ms) beyond which two neighbouring samples have a gap between them: three
    times the median spacing, at least a minute (0: too few samples to tell)."""
    steps = sorted(b - a for a, b in pairwise(xs))
    if not steps:
        return 0
    return max(MIN_GAP_MS, GAP_FACTOR * steps[len(steps) // 2])


def with_gaps(xs: list[int], traces: list[tuple[str, list[Any]]]
              ) -> tuple[list[int], list[tuple[str, list[Any]]]]:
    """``xs`` and each trace with a ``None`` point inside every gap, so Plotly breaks the
    line there instead of drawing a trend across a stopped period; a per-minute rate right
    after a gap (spread over the gap) is ``None`` too."""
    limit = gap_after(xs)
    if not limit:
        return xs, traces
    gaps = {i for i in range(1, len(xs)) if xs[i] - xs[i - 1] > limit}
    out_x: list[int] = []
    out_y: list[list[Any]] = [[] for _ in traces]
    for i, x in enumerate(xs):
        if i in gaps:
            out_x.append((xs[i - 1] + x) // 2)
            for ys in out_y:
                ys.append(None)
        out_x.append(x)
        for ys, (_, values) in zip(out_y, traces):
            ys.append(values[i])
    return out_x, [(name, ys) for (name, _), ys in zip(traces, out_y)]


def _figure(title: str, samples: list[dict[str, int]], traces: list[tuple[str, list[Any]]],
            markers: list[dict[str, Any]], ytitle: str) -> dict[str, Any]:
    """A Plotly figure; x values are epoch ms (antre.js shifts them for local time). A gap in
    the samples breaks the lines (``with_gaps``)."""
    xs, gapped = with_gaps([s["t"] for s in samples], traces)
    data: list[dict[str, Any]] = [{"type": "scatter", "mode": "lines", "name": name, "x": xs,
                                   "y": ys, "connectgaps": False} for name, ys in gapped]
    mx = [m["t"] for m in markers]
    if markers:
        data.append({"type": "scatter", "mode": "markers", "name": "operator actions",
                     "x": mx, "y": [0] * len(mx), "hovertext": [m["text"] for m in markers],
                     "hoverinfo": "text+x", "marker": {"symbol": "triangle-up", "size": 10}})
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
               "line": {"dash": "dot", "width": 1}} for x in mx]
    layout = {"title": {"text": title}, "height": 280, "margin": {"l": 50, "r": 10, "t": 40,
              "b": 40}, "shapes": shapes, "yaxis": {"title": {"text": ytitle}, "rangemode":
              "tozero"}, "xaxis": {"type": "date", "tickformatstops": TICK_FORMATS,
                                   "nticks": 8},
              "legend": {"orientation": "h", "y": -0.2}}
    return {"data": data, "layout": layout, "summary": _summary(title, traces)}


def _summary(title: str, traces: list[tuple[str, list[Any]]]) -> str:
    """The chart in words (its accessible name): the latest value and the peak of each line."""
    parts = []
    for name, values in traces:
        ys = [y for y in values if y is not None]
        if ys:
            parts.append(f"{name} {_num(ys[-1])} now, peak {_num(max(ys))}")
    return f"{title}: " + ("; ".join(parts) if parts else "no samples yet")


def _num(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def _diffs(samples: list[dict[str, int]], name: str) -> list[float | None]:
    """Per-minute growth of counter ``name`` between neighbouring samples; None across a gap
    (the average over a stopped period is no rate anybody saw)."""
    limit = gap_after([s["t"] for s in samples])
    out: list[float | None] = [0.0]
    for a, b in pairwise(samples):
        dt = (b["t"] - a["t"]) / 60_000
        if limit and b["t"] - a["t"] > limit:
            out.append(None)
        else:
            out.append(max(0, b.get(name, 0) - a.get(name, 0)) / dt if dt > 0 else 0.0)
    return out


def chart_data(queue: str, window: str) -> dict[str, Any]:
    svc = services.get()
    now = svc.clock()
    since = now - WINDOWS_MS[window]
    samples = _thin(sampling.series(svc.redis, queue, since))
    markers = _markers(since)
    depth = _figure(f"{queue}: depth", samples,
                    [(n, [s.get(n, 0) for s in samples])
                     for n in ("ready", "scheduled", "inflight", "dead")], markers, "jobs")
    rates = _figure(f"{queue}: per minute", samples,
                    [(n, _diffs(samples, n)) for n in ("acked", "retried", "buried", "expired")],
                    markers, "jobs/min")
    return {"charts": [depth, rates], "samples": len(samples), "as_of": now,
            "markers": len(markers)}


def _window_arg() -> str:
    window = request.args.get("window") or ""
    return window if window in CHART_WINDOWS else "1h"


@bp.get("/charts")
@requires("viewer")
def charts() -> str:
    window = _window_arg()
    queue = check_queue(request.args.get("queue") or "default")
    return render("_charts.html", "_charts.html", window=window, chart_queue=queue,
                  **chart_data(queue, window))


