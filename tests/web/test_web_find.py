"""Dashboard and API of the finder: id / key straight to the job page, payload search in steps,
the job page's timeline with operators and audit links, browse pages, bad input answered."""

from __future__ import annotations

import re

import pytest
from webtools import basic, htmx, post



def states(web):
    """One job in each state, with an order id in its payload."""
    q = web.q
    ids = {}
    ids["done"] = q.enqueue("order", {"order_id": 1}, idempotency_key="ord:1")
    q.ack(q.reserve("w1")[0], {"ok": True})
    ids["dead"] = web.dead_job("order", {"order_id": 2}, key="ord:2")
    ids["inflight"] = q.enqueue("order", {"order_id": 3}, idempotency_key="ord:3")
    q.reserve("w1")
    ids["scheduled"] = q.enqueue("order", {"order_id": 4}, idempotency_key="ord:4", delay_s=60)
    ids["ready"] = q.enqueue("order", {"order_id": 5, "customer": {"id": 9}},
                             idempotency_key="ord:5")
    return ids


def test_finder_box_on_every_page_with_its_script(web):
    c = web.client("viewer")
    for url in ("/", "/inflight/", "/dlq/", "/locks/", "/audit/", "/find"):
        html = c.get(url).get_data(as_text=True)
        assert 'data-finder' in html and 'action="/find"' in html, url
        assert "finder.js" in html
    assert "evt.key !== \"/\"" in c.get("/static/finder.js").get_data(as_text=True)


def test_job_id_and_key_go_straight_to_the_job_page_in_each_state(web):
    ids = states(web)
    c = web.client("viewer")
    for i, state in enumerate(["done", "dead", "inflight", "scheduled", "ready"], start=1):
        for text in (ids[state], f"ord:{i}"):
            resp = c.get("/find", query_string={"q": f" {text} "})
            assert resp.status_code == 303, text
            assert resp.headers["Location"].endswith(f"/jobs/default/{ids[state]}")
        page = c.get(f"/jobs/default/{ids[state]}").get_data(as_text=True)
        assert "Timeline" in page and f">{state}<" in page


def test_payload_search_shows_first_hits_then_steps_to_the_end(web):
    ids = states(web)
    c = web.client("viewer")
    page = c.get("/find", query_string={"q": "order_id=5"}).get_data(as_text=True)
    assert ids["ready"] in page and 'id="search-more"' in page
    # across states; each step's row carries the next step until the search is done
    for state in ("done", "dead", "inflight", "scheduled", "ready"):
        i = {"done": 1, "dead": 2, "inflight": 3, "scheduled": 4, "ready": 5}[state]
        html = c.get("/find", query_string={"q": f"order_id={i}", "state": state,
                                             "queue": "default"}).get_data(as_text=True)
        assert ids[state] in html and "Search finished" in html
    nested = c.get("/find", query_string={"q": "customer.id=9"}).get_data(as_text=True)
    assert ids["ready"] in nested
    none = c.get("/find", query_string={"q": "order_id=77"}).get_data(as_text=True)
    assert "No job matches" in none


def test_search_steps_follow_the_cursor(web):
    from antre.observe.finder import CHUNK
    from antre.engine.queue import JobSpec
    web.q.enqueue_many([JobSpec("t", {"n": i}, f"k{i}") for i in range(CHUNK + 10)])
    c = web.client("viewer")
    found = set()
    cursor = "default|ready|0"
    for _ in range(10):
        resp = c.get("/find/more", query_string={"q": "n=3", "queue": "default",
                                                   "state": "ready", "cursor": cursor},
                     headers=htmx())
        assert resp.status_code == 200
        html = resp.get_data(as_text=True)
        found |= set(re.findall(r"/jobs/default/([0-9a-f]{32})", html))
        m = re.search(r'hx-get="([^"]+)"', html)
        if not m:
            break
        cursor = re.search(r"cursor=([^&]+)", m.group(1).replace("&amp;", "&")).group(1)
        cursor = cursor.replace("%7C", "|")
    assert len(found) == 1


@pytest.mark.parametrize("query,status,text", [
    ({"q": "nope-no-such-thing"}, 404, "No job has the id or the idempotency key"),
    ({"q": "a..b=1"}, 400, "cannot read"),
    ({"q": "x=1", "state": "lost"}, 400, "state must be one of"),
    ({"q": "x=1", "queue": "{bad}"}, 400, "bad queue name"),
])
def test_bad_finder_input_gets_a_clear_answer(web, query, status, text):
    resp = web.client("viewer").get("/find", query_string=query)
    assert resp.status_code == status
    assert text in resp.get_data(as_text=True)


def test_find_more_without_cursor_or_with_a_bad_one_is_400(web):
    c = web.client("viewer")
    assert c.get("/find/more?q=a=1").status_code == 400
    resp = c.get("/find/more", query_string={"q": "a=1", "cursor": "zzz"})
    assert resp.status_code == 400 and "cursor" in resp.get_data(as_text=True)


def test_job_page_timeline_names_the_operator_and_links_audit(web):
    job_id = web.dead_job("order", {"order_id": 8}, key="ord:8")
    c = web.client("operator")
    resp = post(c, f"/dlq/default/{job_id}/replay", {"reason": "fixed the smtp relay"})
    assert resp.status_code == 303
    page = c.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    kinds = re.findall(r'data-kind="([a-z_]+)"', page)
    assert kinds == ["enqueued", "reserved", "buried", "replayed"]
    assert re.search(r'data-kind="replayed".*?class="actor">operator<', page, re.S)
    assert "fixed the smtp relay" in page
    audit_link = re.search(r'href="(/audit/\?target=[^"]+)"', page).group(1)
    audit_page = c.get(audit_link.replace("&amp;", "&")).get_data(as_text=True)
    assert "dlq.replay" in audit_page
    # the old DLQ URL shows the same page
    assert "Timeline" in c.get(f"/dlq/default/{job_id}").get_data(as_text=True)


def test_discarded_job_keeps_its_timeline_page(web):
    job_id = web.dead_job()
    c = web.client("operator")
    post(c, f"/dlq/default/{job_id}/discard", {"reason": "junk"})
    resp = c.get("/find", query_string={"q": job_id})
    assert resp.status_code == 303
    page = c.get(resp.headers["Location"]).get_data(as_text=True)
    assert "only its timeline is kept" in page
    assert re.findall(r'data-kind="([a-z_]+)"', page)[-1] == "discarded"
    assert c.get("/jobs/default/never-was").status_code == 404


def test_trace_link_when_configured(web, monkeypatch):
    job_id = web.q.enqueue("t", {}, idempotency_key="tr:1")
    trace = web.q.get(job_id).trace_id.split("-")[1]
    c = web.client("viewer")
    assert "set ANTRE_TRACE_URL" in c.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    monkeypatch.setenv("ANTRE_TRACE_URL", "https://traces.example/t/{trace_id}")
    html = c.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert f'href="https://traces.example/t/{trace}"' in html


def test_browse_every_state_and_overview_links(web):
    ids = states(web)
    web.q.enqueue("other", {}, idempotency_key="o:x")
    c = web.client("viewer")
    for state, job_id in ids.items():
        html = c.get(f"/browse/default/{state}").get_data(as_text=True)
        assert f"/jobs/default/{job_id}" in html, state
    ready = c.get("/browse/default/ready?type=other").get_data(as_text=True)
    assert ids["ready"] not in ready and "of type other" in ready
    overview = c.get("/").get_data(as_text=True)
    assert "/browse/default/ready" in overview and "/browse/default/done" in overview
    assert c.get("/browse/default/lost").status_code == 404


def test_api_find_timeline_job_and_result(web):
    ids = states(web)
    c = web.app.test_client()
    h = basic("viewer")
    got = c.get("/api/find", query_string={"key": "ord:5"}, headers=h).get_json()
    assert got["found"] == {"queue": "default", "job_id": ids["ready"], "state": "ready"}
    got = c.get("/api/find", query_string={"id": ids["dead"]}, headers=h).get_json()
    assert got["found"]["state"] == "dead"
    step = c.get("/api/find", query_string={"field": "order_id=4"}, headers=h).get_json()
    assert [x["job_id"] for x in step["hits"]] == [ids["scheduled"]] and step["done"]
    tl = c.get(f"/api/queues/default/jobs/{ids['done']}/timeline", headers=h).get_json()
    assert [e["kind"] for e in tl["events"]] == ["enqueued", "reserved", "completed"]
    status = c.get(f"/api/jobs/{ids['done']}", headers=h).get_json()
    assert (status["state"], status["result"]) == ("done", {"ok": True})
    assert c.get("/api/result?key=ord:1", headers=h).get_json()["status"] == "completed"
    assert c.get("/api/result?key=ord:3", headers=h).get_json()["status"] == "pending"
    assert c.get("/api/result?key=ord:2", headers=h).get_json()["status"] == "failed"
    assert c.get("/api/result?key=zzz", headers=h).get_json()["status"] == "unknown"
    browse = c.get("/api/queues/default/browse/ready", headers=h).get_json()
    assert [r["id"] for r in browse["rows"]] == [ids["ready"]]
    doc = c.get("/api/openapi.json", headers=h).get_json()
    assert "/api/find" in doc["paths"] and "/api/result" in doc["paths"]


@pytest.mark.parametrize("url,status", [
    ("/api/find", 400), ("/api/find?id=nope", 404), ("/api/find?key=nope", 404),
    ("/api/find?field=oops", 400), ("/api/find?field=a=1&state=x", 400),
    ("/api/find?field=a=1&cursor=bad", 400), ("/api/result", 400), ("/api/jobs/nope", 404),
    ("/api/queues/default/jobs/nope/timeline", 404), ("/api/queues/default/browse/x", 404),
])
def test_api_bad_input_is_a_clear_4xx(web, url, status):
    resp = web.app.test_client().get(url, headers=basic("viewer"))
    assert resp.status_code == status
    assert resp.get_json()["error"]


# -- stuck-job views -----------------------------------------------------------------------------
def test_inflight_page_shows_running_silence_checkpoint_sorted_worst_first(web):
    q = web.q
    old = q.enqueue("slow", {}, idempotency_key="s:old")
    (a,) = q.reserve("w1")
    web.clock.advance(60_000)
    new = q.enqueue("slow", {}, idempotency_key="s:new")
    (b,) = q.reserve("w1")
    q.extend(b.id, b.epoch, 600_000, mode="at_least")  # b's deadline is later, heartbeat now
    q.checkpoint(b, {"step": 2})
    web.clock.advance(10_000)
    q.extend(a.id, a.epoch, 900_000, mode="add", actor="op")  # a: later deadline than b
    c = web.client("viewer")
    order = lambda html: re.findall(r'data-row="([0-9a-f]{32})"', html)  # noqa: E731
    by_deadline = c.get("/inflight/?queue=default").get_data(as_text=True)
    assert order(by_deadline) == [new, old]
    running = c.get("/inflight/?queue=default&sort=running").get_data(as_text=True)
    assert order(running) == [old, new]
    assert "1m10s" in running  # old has run 70 s
    silent = c.get("/inflight/?queue=default&sort=silent").get_data(as_text=True)
    assert order(silent) == [new, old]  # b's last heartbeat is 10 s old, a's extension is fresh
    assert "10.0s ago" in silent  # b's checkpoint
    assert c.get("/inflight/?queue=default&sort=bogus").status_code == 400


def test_locks_page_shows_since_when_and_which_job_holds_each_lock(web):
    locks = web.producer.locks
    locks.acquire("customer:1", 60_000, owner="host:1:aa", holder_job="default/job-one")
    web.clock.advance(30_000)
    locks.acquire("customer:2", 60_000, owner="host:2:bb")
    html = web.client("viewer").get("/locks/").get_data(as_text=True)
    assert html.index("customer:1") < html.index("customer:2")  # held longest first
    assert "30.0s" in html and 'href="/jobs/default/job-one"' in html
    assert "not recorded" in html
    held = {h.key: h for h in locks.held()}
    assert held["customer:1"].holder_job == "default/job-one"
    assert held["customer:1"].holder_worker == "host:1:aa"
    assert locks.release_token("customer:1", held["customer:1"].holder)
    from antre.engine import keys
    assert web.producer.redis.hget(keys.locks_since(), "customer:1") is None


def test_search_page_stops_adding_rows_at_the_cap(web, monkeypatch):
    from antre_web import find
    from antre.engine.queue import JobSpec
    monkeypatch.setattr(find, "NEXT_STEP_MS", 0)  # one chunk per step: not done after it
    web.q.enqueue_many([JobSpec("t", {"v": 1}, f"cap{i}") for i in range(5)])
    c = web.client("viewer")
    query = {"q": "v=1", "cursor": "default|ready|0", "n": 0}
    html = c.get("/find/more", query_string=query).get_data(as_text=True)
    assert "hx-get" in html and "Stopped at" not in html  # under the cap: goes on
    monkeypatch.setattr(find, "PAGE_HITS", 3)
    html = c.get("/find/more", query_string=query).get_data(as_text=True)
    assert "Stopped at 5 hits" in html and "hx-get" not in html
    api = c.get("/api/find", query_string={"q": "v=1"}, headers=basic("viewer")).get_json()
    assert len(api["hits"]) == 5 and api["done"]
