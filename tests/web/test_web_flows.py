"""The Flows pages and API: flows by state with counts, progress and paging, search
by flow id, one flow's jobs laid out by depth linking to their job pages, the job page's links
to its flow, parents and children; replaying a flow's dead jobs by operators only, with CSRF,
audited, after which the flow goes on; everything user-supplied escaped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from antre import Antre, Permanent
from antre.flows import FlowReader
from helpers import burst
from webtools import basic, csrf_of, post

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def shop(web: Any, redis_url: str) -> dict[str, Any]:
    """An app on the dashboard's Redis and clock with the invoice chord's handlers; ``fail``
    holds the job types that fail permanently (with a hostile error text)."""
    app = Antre(redis_url=redis_url, clock=web.clock)
    fail: set[str] = set()

    def handler(name: str) -> None:
        @app.handler(name)
        def run(ctx: Any, payload: Any) -> Any:
            if name in fail:
                raise Permanent(f"{name} refused: {HOSTILE}")
            return {"step": name, "seen": len(ctx.flow_results)}

    for name in ("ledger", "email", "stock", "close_order"):
        handler(name)
    return {"app": app, "fail": fail}


def chord(app: Antre, order: str, description: str = "") -> Any:
    kids = [app.spec(t, {"order": order}, idempotency_key=f"{t}:{order}")
            for t in ("ledger", "email", "stock")]
    close = app.spec("close_order", {"order": order}, idempotency_key=f"close:{order}")
    return app.chord(kids, close).enqueue(description=description or f"invoice {order}")


def test_the_flows_page_counts_states_pages_and_finds_a_flow(web, shop):
    app = shop["app"]
    done = chord(app, "A")
    burst(app, web.clock)
    shop["fail"].add("email")
    failed = chord(app, "B")
    burst(app, web.clock)
    running = []
    for i in range(3):  # newest first: each a little later
        web.clock.advance(5)
        running.append(chord(app, f"R{i}"))
    c = web.client("viewer")
    page = c.get("/flows/?queue=default&state=running&limit=2").get_data(as_text=True)
    assert 'data-state="running" aria-current="page">Running <span class="count">3</span>' in page
    assert 'Failed <span class="count">1</span>' in page
    assert 'Succeeded <span class="count">1</span>' in page
    assert running[2].id in page and running[1].id in page and running[0].id not in page
    assert "1–2 of 3" in page and "older →" in page
    assert "0 done, 4 to go of 4" in page
    older = c.get("/flows/?queue=default&state=running&limit=2&offset=2").get_data(as_text=True)
    assert running[0].id in older and running[2].id not in older
    bad = c.get("/flows/?queue=default&state=failed").get_data(as_text=True)
    assert failed.id in bad and done.id not in bad and "died" in bad and HOSTILE not in bad
    found = c.get(f"/flows/?queue=default&q={done.id}").get_data(as_text=True)
    assert "Found" in found and f"/flows/default/{done.id}" in found
    assert "No flow" in c.get("/flows/?queue=default&q=nope").get_data(as_text=True)
    hostile = c.get(f"/flows/?queue=default&q={HOSTILE}").get_data(as_text=True)
    assert HOSTILE not in hostile
    assert c.get("/flows/?queue=default&state=bogus").status_code == 400
    web.producer.queue("aaa").enqueue("x", {}, idempotency_key="x")  # listed first, no flows
    opened = c.get("/flows/?state=failed")  # no queue named: the one with the flows
    assert opened.status_code == 302 and "queue=default" in opened.headers["Location"]


def test_a_flow_page_lays_its_jobs_out_by_depth_and_escapes_what_users_wrote(web, shop):
    app = shop["app"]
    shop["fail"].add("stock")
    flow = chord(app, "C", description=f"order <b>C</b> {HOSTILE}")
    burst(app, web.clock)
    c = web.client("viewer")
    page = c.get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert HOSTILE not in page and "<b>C</b>" not in page and "&lt;b&gt;C&lt;/b&gt;" in page
    step1, step2 = page.index('data-depth="0"'), page.index('data-depth="1"')
    assert step1 < page.index(">ledger<") < page.index(">stock<") < step2
    assert step2 < page.index(">close_order<")
    assert "3 side by side" in page
    tree = FlowReader(web.svc.redis).tree("default", flow.id)
    stock = next(j for j in tree.jobs if j.type == "stock")
    assert f'href="/jobs/default/{stock.id}"' in page
    assert "stock refused" in page and "died" in page
    assert c.get(f"/flows/default/{flow.id}x").status_code == 404
    assert c.get("/flows/default/bad%20id").status_code == 400


def test_a_job_page_links_its_flow_parents_and_children(web, shop):
    app = shop["app"]
    flow = chord(app, "D")
    tree = FlowReader(web.svc.redis).tree("default", flow.id)
    ledger = next(j for j in tree.jobs if j.type == "ledger")
    close = next(j for j in tree.jobs if j.type == "close_order")
    c = web.client("viewer")
    child = c.get(f"/jobs/default/{ledger.id}").get_data(as_text=True)
    assert f'href="/flows/default/{flow.id}"' in child and f"/jobs/default/{close.id}" in child
    callback = c.get(f"/jobs/default/{close.id}").get_data(as_text=True)
    assert "Waits for (parents)" in callback and f"/jobs/default/{ledger.id}" in callback
    api = c.get(f"/api/queues/default/jobs/{close.id}").get_json()
    assert api["flow"]["flow_id"] == flow.id and ledger.id in api["flow"]["parents"]


def test_an_operator_replays_a_flows_dead_jobs_and_the_flow_goes_on(web, shop):
    app = shop["app"]
    shop["fail"].update({"email", "stock"})
    flow = chord(app, "E", description="on_failure=wait")
    burst(app, web.clock)
    assert flow.status().state == "failed"
    op = web.client("operator")
    page = op.get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert "Replay the failed jobs" in page
    resp = post(op, f"/flows/default/{flow.id}/replay-failed", {"reason": "smtp is back"})
    assert resp.status_code == 303 and resp.headers["Location"].endswith(f"/flows/default/{flow.id}")
    states = {j.type: j.state for j in FlowReader(web.svc.redis).tree("default", flow.id).jobs}
    assert states["email"] == "ready" and states["stock"] == "ready"
    (entry,) = web.audit("flow.replay_failed")
    assert entry.target == f"default/flow/{flow.id}" and entry.reason == "smtp is back"
    assert entry.outcome == "ok" and entry.detail["replayed"] == 2
    shop["fail"].clear()
    burst(app, web.clock)
    assert flow.status().state == "succeeded" and flow.results()[0]["seen"] == 3
    again = op.post(f"/api/queues/default/flows/{flow.id}/replay-failed", json={},
                    headers={"X-CSRF-Token": _csrf(op)})
    assert again.status_code == 409 and "no dead job" in again.get_json()["message"]


def _csrf(client: Any) -> str:
    return csrf_of(client)


def test_replaying_a_flow_needs_an_operator_and_csrf(web, shop):
    app = shop["app"]
    shop["fail"].add("email")
    flow = chord(app, "F")
    burst(app, web.clock)
    viewer = web.client("viewer")
    assert "Replay the failed jobs" not in viewer.get(f"/flows/default/{flow.id}").get_data(
        as_text=True)
    assert post(viewer, f"/flows/default/{flow.id}/replay-failed", {}).status_code == 403
    op = web.client("operator")
    assert post(op, f"/flows/default/{flow.id}/replay-failed", {}, csrf=False).status_code in (
        400, 403)
    api = web.app.test_client().post(f"/api/queues/default/flows/{flow.id}/replay-failed",
                                     json={}, headers=basic("viewer"))
    assert api.status_code == 403
    assert web.q.get(next(j.id for j in FlowReader(web.svc.redis).tree(
        "default", flow.id).jobs if j.type == "email")).state == "dead"
    gone = web.app.test_client().post("/api/queues/default/flows/nope/replay-failed",
                                      json={}, headers=basic("operator"))
    assert gone.status_code == 404


def test_the_flows_api_lists_counts_and_shows_a_flow_with_depths(web, shop):
    app = shop["app"]
    shop["fail"].add("ledger")
    failed = chord(app, "G", description=HOSTILE)
    burst(app, web.clock)
    c = web.app.test_client()
    got = c.get("/api/queues/default/flows?state=failed", headers=basic("viewer")).get_json()
    assert got["counts"]["failed"] == 1 and got["rows"][0]["id"] == failed.id
    assert got["rows"][0]["description"] == HOSTILE and got["total"] == 1
    one = c.get(f"/api/queues/default/flows/{failed.id}", headers=basic("viewer")).get_json()
    assert one["flow"]["state"] == "failed" and "ledger refused" in one["flow"]["failed_reason"]
    assert {j["type"]: j["depth"] for j in one["jobs"]} == {
        "ledger": 0, "email": 0, "stock": 0, "close_order": 1}
    found = c.get(f"/api/queues/default/flows?q={failed.id}", headers=basic("viewer"))
    assert found.get_json()["found"]["id"] == failed.id
    assert c.get("/api/queues/default/flows?state=x", headers=basic("viewer")).status_code == 400
    assert c.get("/api/queues/default/flows/nope", headers=basic("viewer")).status_code == 404
    paths = c.get("/api/openapi.json", headers=basic("viewer")).get_json()["paths"]
    assert "/api/queues/{queue}/flows" in paths and "/api/queues/{queue}/flows/{flow_id}" in paths
    post_doc = paths["/api/queues/{queue}/flows/{flow_id}/replay-failed"]["post"]
    assert "operator" in post_doc["description"]
    assert json.dumps(one)  # plain JSON all through


def test_an_operator_cancels_a_flow_from_its_page_and_it_is_audited(web, shop):
    app = shop["app"]
    flow = chord(app, "H")
    op = web.client("operator")
    page = op.get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert "Cancel this flow" in page and "data-confirm" in page
    viewer = web.client("viewer")
    assert post(viewer, f"/flows/default/{flow.id}/cancel", {"reason": "x"}).status_code == 403
    assert flow.status().state == "running"
    resp = post(op, f"/flows/default/{flow.id}/cancel",
                {"reason": "duplicate order", "next": f"/flows/default/{flow.id}"})
    assert resp.status_code == 303 and resp.headers["Location"].endswith(f"/flows/default/{flow.id}")
    assert flow.status().state == "cancelled"
    after = op.get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert "by operator: duplicate order" in after and "Cancel this flow" not in after
    assert sorted(e.outcome for e in web.audit("flow.cancel")) == ["ok", "refused"]


def test_a_flow_page_shows_its_in_flight_jobs_progress_escaped(web, shop):
    """A member's ``ctx.progress`` (read with the tree's per-job read: no extra round trip)
    shows next to it while it is in flight, its message escaped; the flow's own bar stays."""
    app = shop["app"]
    flow = chord(app, "P")
    q = app.queue()
    jobs = {j.type: j for j in q.reserve("w", count=3)}
    q.progress(jobs["ledger"], 0.4, f"rows 4,000/10,000 {HOSTILE}")
    q.ack(jobs["email"], {"sent": 1})  # a settled member shows no progress of its own
    c = web.client("viewer")
    page = c.get(f"/flows/default/{flow.id}").get_data(as_text=True)
    ledger = page[page.index(f'data-job="{jobs["ledger"].id}"'):]
    ledger = ledger[:ledger.index("</li>")]
    assert 'class="flow-job-progress"' in ledger and 'data-progress="0.4000"' in ledger
    assert "<strong>40%</strong>" in ledger and "rows 4,000/10,000" in ledger
    assert HOSTILE not in page and "&lt;img src=x onerror=alert(1)&gt;" in ledger
    stock = page[page.index(f'data-job="{jobs["stock"].id}"'):]
    assert "flow-job-progress" not in stock[:stock.index("</li>")]  # in flight, no progress said
    assert page.count("flow-job-progress") == 1
    assert "1 done, 3 to go of 4" in page  # the flow's own bar
    api = c.get(f"/api/queues/default/flows/{flow.id}", headers=basic("viewer")).get_json()
    (row,) = [j for j in api["jobs"] if j["id"] == jobs["ledger"].id]
    assert row["progress"]["fraction"] == 0.4


def test_a_flow_given_up_by_a_discard_says_so_and_offers_no_replay(web, shop):
    app = shop["app"]
    shop["fail"].add("email")
    flow = chord(app, "G")
    burst(app, web.clock)
    op = web.client("operator")
    email = [j for j in FlowReader(web.svc.redis).tree("default", flow.id).jobs
             if j.type == "email"][0]
    resp = post(op, f"/dlq/default/{email.id}/discard", {"reason": "not needed"})
    assert resp.status_code == 303
    page = op.get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert "Given up" in page and "discarded by operator" in page
    assert "Replay the failed jobs" not in page
    assert "Cancel this flow" in page  # its jobs still running may still be stopped
    assert HOSTILE not in page  # the member's error text, escaped
    listed = op.get("/flows/?queue=default&state=failed").get_data(as_text=True)
    assert "given up: discarded by operator" in listed


def test_a_flows_jobs_count_attempts_from_one(web, shop):
    flow = chord(shop["app"], "W")
    page = web.client("viewer").get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert "not run yet" in page and "attempt 0" not in page
    burst(shop["app"], web.clock)
    done = web.client("viewer").get(f"/flows/default/{flow.id}").get_data(as_text=True)
    assert "attempt 1" in done and "not run yet" not in done and "attempt 0" not in done
    from antre.flows.layout import text_tree
    lines = text_tree(FlowReader(web.svc.redis).tree("default", flow.id).jobs)
    assert all(line.endswith("attempt 1") for line in lines), lines
