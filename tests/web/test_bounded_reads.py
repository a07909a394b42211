"""No viewer request walks a whole queue: a purge count stops after a bounded number of
script calls and goes on with a cursor to the exact count, the purge page says "at least" and
its poll never counts, and the dead-letter dry run filtered by type and group is bounded the
same way."""

from __future__ import annotations

from helpers import script_calls
from webtools import htmx

from antre.control.bulk import BulkReplays
from antre.control.purge import CHUNK, COUNT_CHUNKS
from antre.engine.envelope import JobSpec
from antre.observe.readmodels import DeadFilter


def _evalsha_calls(r):
    return script_calls(r)


def _fill_ready(web, n, job_type=lambda i: "email"):
    web.q.enqueue_many([JobSpec(job_type(i), {"i": i}, f"k{i}") for i in range(n)])


def test_a_purge_count_is_bounded_and_goes_on_with_a_cursor(web):
    n = COUNT_CHUNKS * CHUNK + 1_500
    _fill_ready(web, n)
    c = web.client("viewer")
    r = web.producer.redis
    before = _evalsha_calls(r)
    first = c.get("/api/queues/default/purge/count?source=ready").get_json()
    assert _evalsha_calls(r) - before <= COUNT_CHUNKS + 1
    assert first["exact"] is False and 0 < first["count"] < n and first["cursor"]
    assert first["count"] == first["looked"]
    # each step stops at COUNT_CHUNKS chunks or its time budget, whichever comes first (a
    # loaded machine ends steps early): going on with the cursor reaches the exact count
    rest, steps = first, 1
    while rest["cursor"]:
        before = _evalsha_calls(r)
        rest = c.get("/api/queues/default/purge/count?source=ready&count_cursor="
                     + rest["cursor"]).get_json()
        assert _evalsha_calls(r) - before <= COUNT_CHUNKS + 1
        steps += 1
        assert steps <= n // CHUNK + 2, "the cursor never ends"
    assert rest["exact"] is True and rest["count"] == n and rest["cursor"] is None
    small = c.get("/api/queues/default/purge/count?source=scheduled").get_json()
    assert small == {**small, "count": 0, "exact": True}
    resp = c.get("/api/queues/default/purge/count?source=ready&count_cursor=bm9wZQ")
    assert resp.status_code == 400 and "count again" in resp.get_json()["error"]


def test_the_purge_page_says_at_least_and_its_poll_never_counts(web):
    _fill_ready(web, COUNT_CHUNKS * CHUNK + 200)
    c = web.client("viewer")
    page = c.get("/purge/?queue=default&source=ready").get_data(as_text=True)
    assert "at least" in page and "Count further" in page and "count_cursor=" in page
    r = web.producer.redis
    before = _evalsha_calls(r)
    for _ in range(3):
        assert c.get("/purge/?queue=default&source=ready", headers=htmx()).status_code == 200
    assert _evalsha_calls(r) == before


def test_the_dlq_dry_run_with_type_and_group_is_bounded(web):
    n = COUNT_CHUNKS * CHUNK + 300
    q = web.q
    _fill_ready(web, n, lambda i: "email" if i % 3 else "sms")
    while jobs := q.reserve("w", 500):
        for job in jobs:
            q.bury(job, reason="permanent failure", error="smtp down")
    (group,) = [g.group for g in web.svc.reads.error_groups("default")]  # both types: one error
    c = web.client("viewer")
    url = f"/api/queues/default/dead/count?type=email&group={group}"
    first = c.get(url).get_json()
    assert first["exact"] is False and first["looked"] <= COUNT_CHUNKS * CHUNK
    total, cursor, rounds = first["count"], first["cursor"], 1
    while cursor:
        step = c.get(f"{url}&count_cursor={cursor}").get_json()
        total, cursor, rounds = step["count"], step["cursor"], rounds + 1
    assert rounds == 2
    assert total == BulkReplays(web.producer.redis).dry_run(
        "default", DeadFilter(job_type="email", group=group)) == n - len(range(0, n, 3))
