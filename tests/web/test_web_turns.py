"""Per-key turns on the dashboard and the API: a job waiting behind its lock_key's
head says where it stands and behind which job; waiting jobs are browsable, searchable, counted
on the overview and deletable by an operator (the turn moves on)."""

from __future__ import annotations

from webtools import post


def line(web, n: int = 3) -> list[str]:
    return [web.q.enqueue("order", {"order_id": i}, idempotency_key=f"ord:{i}",
                          lock_key="order:42") for i in range(n)]


def test_the_job_page_says_what_a_waiting_job_waits_for(web):
    ids = line(web)
    c = web.client("viewer")
    page = c.get(f"/jobs/default/{ids[2]}").get_data(as_text=True)
    assert ">waiting<" in page
    assert "2nd behind job" in page and f"/jobs/default/{ids[0]}" in page
    assert "order:42" in page
    head = c.get(f"/jobs/default/{ids[0]}").get_data(as_text=True)
    assert "its turn on lock" in head and "2 job(s) wait behind it" in head


def test_the_api_gives_the_turn(web):
    ids = line(web)
    body = web.client("viewer").get(f"/api/queues/default/jobs/{ids[1]}").get_json()
    assert body["turn"]["place"] == 1 and body["turn"]["head"] == ids[0]
    assert body["turn"]["text"] == f"1st behind job {ids[0]} on lock order:42"
    free = web.q.enqueue("order", {}, idempotency_key="free")
    assert web.client("viewer").get(f"/api/queues/default/jobs/{free}").get_json()["turn"] is None


def test_waiting_jobs_are_browsable_and_counted_on_the_overview(web):
    ids = line(web, 4)
    c = web.client("viewer")
    page = c.get("/browse/default/waiting").get_data(as_text=True)
    assert all(i in page for i in ids[1:]) and ids[0] not in page
    assert "longest waiting first" in page
    assert "+3 waiting on 1 key(s)" in c.get("/").get_data(as_text=True)


def test_the_finder_searches_waiting_jobs(web):
    ids = line(web)
    html = web.client("viewer").get("/find", query_string={
        "q": "order_id=2", "state": "waiting", "queue": "default"}).get_data(as_text=True)
    assert ids[2] in html and "Search finished" in html


def test_an_operator_deletes_a_waiting_job_and_the_line_closes_up(web):
    ids = line(web)
    c = web.client("operator")
    resp = post(c, f"/queues/default/jobs/{ids[1]}/delete", {"reason": "bad order"})
    assert resp.status_code in (200, 302, 303)
    assert web.q.get(ids[1]) is None
    web.q.ack(web.q.reserve("w")[0])
    assert web.q.get(ids[2]).state == "ready"
