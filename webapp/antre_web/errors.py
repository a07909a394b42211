"""Error groups, the dead-letter queue's second tab: every group of a queue,
most dead first, its signature in full (it wraps), counts and first/last seen, each a link to
the DLQ filtered by it (where it is replayed or discarded). Data: ``ReadModels.error_groups``."""

from __future__ import annotations

from flask import Blueprint

from . import services
from .common import queue_arg, render
from .security import requires

bp = Blueprint("errors", __name__, url_prefix="/errors")


@bp.get("/")
@requires("viewer")
def index() -> str:
    svc = services.get()
    queue = queue_arg(busiest="dead")
    return render("errors.html", "_errors.html", queue=queue,
                  groups=svc.reads.error_groups(queue), queues=svc.reads.queue_names(),
                  as_of=svc.clock())
