"""The cost of one job log line (issue 14 item 2): ``antre.observe.logs`` formatters, per line.

    PYTHONPATH=$PWD python3 bench/experiments/log_format.py

For each format (json, text): µs per ``format()`` of the worker's job-outcome record (the
``extra=job_fields(...)`` the worker logs), and µs per whole ``logger.info(...)`` call through
``logs.configure`` into a file on /dev/null (record creation, the handler's lock, format,
write). CPU time (``time.process_time``), best of 7 repeats of 20,000 lines, so a busy machine
inflates the figures less.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from antre.observe import logs  # noqa: E402
from antre.engine.envelope import Job  # noqa: E402

JOB = Job(id="3f2a9c0d1e2b4a5f8c7d6e5f4a3b2c1d", type="send_email", queue="default",
          idempotency_key="email:welcome:42", payload={}, attempt=0, lock_key="",
          trace_id="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def _best_us(fn: object, n: int = 20_000) -> float:
    # CPU time of this process, not wall time: waiting for a core on a busy machine is left out
    return min(timeit.repeat(fn, number=n, repeat=7, timer=time.process_time)) / n * 1e6  # type: ignore[arg-type]


def measure(fmt: str) -> dict[str, float]:
    log = logging.getLogger("antre.worker")
    with open(os.devnull, "w") as sink:
        handler = logs.configure(fmt, "INFO", stream=sink)
        extra = logs.job_fields(JOB, "finished", duration_ms=0.41, worker_id="w-1:1234:0")
        record = log.makeRecord(log.name, logging.INFO, __file__, 1, "finished job %s",
                                (JOB.id,), None, extra=extra)
        formatter = handler.formatter
        assert formatter is not None
        return {
            "format_us": round(_best_us(lambda: formatter.format(record)), 2),
            "logger_info_us": round(_best_us(lambda: log.info(
                "finished job %s", JOB.id, extra=logs.job_fields(
                    JOB, "finished", duration_ms=0.41, worker_id="w-1:1234:0"))), 2),
        }


def main() -> int:
    saved = logging.getLogger("antre").handlers[:]
    for fmt in logs.FORMATS:
        print(fmt, measure(fmt))
    logging.getLogger("antre").handlers[:] = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
