"""A batch with a report: a nightly import adds its rows to an open batch
(``app.batch``) as they are read, then closes it; ``import_report``, its ``on_complete``
callback, runs once every row has settled and reports how many were imported and how many
died (a row with a bad SKU, now and then: a permanent failure; a retryable one is retried).
All on the ``batch`` queue; the report reads its batch's counters through the app's handle.
"""

from __future__ import annotations

from typing import Any

from antre import Antre, Permanent, Retryable
from antre.engine.envelope import new_job_id
from antre.flows import Batch

from .handlers import faults, rng_for


def import_batch(app: Antre, name: str, rows: int) -> tuple[Batch, list[str]]:
    """Open the batch of import ``name``, add ``rows`` rows, close it; its job ids."""
    report = app.spec("import_report", {"import": name}, idempotency_key=f"report:{name}",
                      job_id=new_job_id())
    batch = app.batch(on_complete=report, queue="batch",
                      description=f"nightly import {name}: {rows} rows, then a report")
    ids = batch.add(*[app.spec("import_row", {"import": name, "row": n},
                               idempotency_key=f"import:{name}:{n}") for n in range(rows)])
    batch.close()
    return batch, [*ids, report.job_id or ""]


def import_row(ctx: Any, payload: Any) -> dict[str, Any]:
    rng = rng_for(ctx, "import")
    if rng.random() < faults.flaky_rate / 5:
        raise Retryable("catalog-api answered 503 while checking the row")
    if rng.random() < faults.bad_row_rate:
        raise Permanent(f"row {payload.get('row')} of {payload.get('import')}: unknown SKU "
                        "'SKU-???' (fix the file and replay the row)")
    return {"row": payload.get("row"), "imported": True}


def register_imports(app: Antre) -> Antre:
    def import_report(ctx: Any, payload: Any) -> dict[str, Any]:
        status = app.flow(ctx.flow_id, "batch").status()
        return {"import": (payload or {}).get("import"), "rows": status.total,
                "imported": status.done, "failed": status.failed}

    app.handler("import_row", queue="batch", max_attempts=4)(import_row)
    app.handler("import_report", queue="batch", max_attempts=3)(import_report)
    return app
