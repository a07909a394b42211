"""``GET /metrics``: Prometheus text format, derived from Redis at scrape time (see
``antre.observe.metrics``), so the figures are right however many workers and hosts there are.
Scrapers authenticate like scripts do: HTTP Basic with a dashboard user (viewer is enough)."""

from __future__ import annotations

from flask import Blueprint, Response

from antre.observe import metrics

from . import services
from .security import requires

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
@requires("viewer")
def scrape() -> Response:
    svc = services.get()
    body, content_type = metrics.render(svc.redis, svc.clock)
    return Response(body, mimetype=None, content_type=content_type)
