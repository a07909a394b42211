"""A queue spread over 3 partitions in a real Chromium: the overview shows it as one
queue (its counts summed) and its dead-letter page lists the dead jobs of every partition."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from antre import Antre
from antre.engine import keys

from .conftest import screenshot

pytestmark = pytest.mark.browser


def test_a_partitioned_queue_reads_as_one_in_the_browser(stack, login):
    producer = Antre(redis_url=stack.redis_url, partitions=3)
    name = f"parts{stack.new_ref('q')[-6:]}"  # served by no worker: its jobs stay put
    ready = [producer.enqueue("nohandler", {"i": i}, idempotency_key=f"pr{i}", queue=name)
             for i in range(6)]
    dead = []
    for i in range(3):
        job_id = producer.enqueue("nohandler", {"to": f"d{i}"}, idempotency_key=f"pd{i}",
                                  queue=name)
        q = producer.job_queue(name, job_id)
        job = next(j for j in q.reserve("browser", count=10) if j.id == job_id)
        q.bury(job, reason="permanent failure", error=f"smtp down {i}")
        dead.append(job_id)
    assert sorted(keys.id_partition(i) for i in dead) == [0, 1, 2]
    assert len({keys.id_partition(i) for i in ready}) == 3

    page = login("viewer")
    page.goto(f"/?queue={name}")
    row = page.locator("table tr", has=page.locator(f"text={name}")).first
    expect(row).to_be_visible()
    expect(row).to_contain_text("6")  # ready, the 3 partitions' summed
    screenshot(page, "partitions-overview")

    page.goto(f"/dlq/?queue={name}")
    for job_id in dead:  # every partition's dead job, on one page
        expect(page.locator(f"code:text-is('{job_id}')")).to_be_visible()
    expect(page.locator("#live")).to_contain_text("3 dead job")
    screenshot(page, "partitions-dlq")
    far = next(d for d in dead if keys.id_partition(d) == 2)
    page.locator(f"a:has-text('{far}')").first.click()
    expect(page.get_by_role("heading", name=f"Job {far}")).to_be_visible()
    expect(page.locator("#live")).to_contain_text("smtp down")
