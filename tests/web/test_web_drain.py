"""Time to drain on the dashboard: the overview's queue table and the Groups page show each
backlog's estimate (from the samples the pool takes, on a manual clock), its range and what
one more worker would make of it; nothing to drain, or too few samples, say so."""

from __future__ import annotations

import re

from antre.observe import sampling
from antre.observe.registry import WorkerInfo, WorkerRegistry

STEP_MS = 30_000


def drained_for_a_while(web, n_jobs: int = 120, per_step: int = 10, group: str = "") -> None:
    extra = {"group": group} if group else {}
    web.q.enqueue_many([web.producer.spec("import", {"n": i}, idempotency_key=f"d:{i}", **extra)
                        for i in range(n_jobs)])
    sampling.take(web.producer.redis, web.clock)
    for _ in range(4):
        for job in web.q.reserve("w1", count=per_step):
            web.q.ack(job)
        web.clock.advance(STEP_MS)
        sampling.take(web.producer.redis, web.clock)
        WorkerRegistry(web.producer.redis, web.clock).beat(WorkerInfo("w1", queues=["default"]))


def test_the_overview_shows_each_queues_time_to_drain(web):
    drained_for_a_while(web)  # 40 done in 2 min: 80 to go at 1/3 a second, 4 min
    page = web.client("viewer").get("/").get_data(as_text=True)
    assert "<th>Time to drain</th>" in page
    cell = page[page.index('class="drain-cell" data-queue="default"'):]
    cell = cell[:cell.index("</td>")]
    assert re.search(r'data-drain-s="240"', cell), cell
    assert "4m00s" in cell and "+1 worker: 2m00s" in cell


def test_an_empty_or_unsampled_queue_says_so(web):
    web.q.enqueue("import", {}, idempotency_key="one")
    page = web.client("viewer").get("/").get_data(as_text=True)
    cell = page[page.index('class="drain-cell" data-queue="default"'):]
    assert "—" in cell[:cell.index("</td>")]


def test_the_groups_page_shows_a_groups_time_to_drain(web):
    drained_for_a_while(web, group="tenant:a")
    page = web.client("viewer").get("/groups/?queue=default").get_data(as_text=True)
    assert "<th>Time to drain</th>" in page
    row = page[page.index('data-group="tenant:a"'):]
    row = row[:row.index("</tr>")]
    assert "data-drain-s=" in row
