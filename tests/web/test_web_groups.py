"""The Groups page and API: busiest groups, held and why, paused, search, a group's
jobs in order; pause / resume and slot overrides by operators only, with CSRF, audited; bad
input answered with 400 saying what to pass; a waiting job's page says it waits for a slot."""

from __future__ import annotations

from webtools import basic, post

from antre.engine.queue import JobSpec


def fill(web, group: str, n: int, conc: int = 1) -> list[str]:
    return web.q.enqueue_many([JobSpec("order", {"i": i}, f"{group}:{i}", group=group,
                                       group_concurrency=conc) for i in range(n)])


def test_the_groups_page_ranks_groups_and_finds_one_by_name(web):
    fill(web, "tenant:big", 6)
    fill(web, "tenant:small", 2)
    c = web.client("viewer")
    page = c.get("/groups/?queue=default").get_data(as_text=True)
    assert page.index("tenant:big") < page.index("tenant:small")
    assert "all 1 slots taken" in page
    found = c.get("/groups/?queue=default&q=tenant:small").get_data(as_text=True)
    assert "Found" in found and "1 waiting" in found
    missing = c.get("/groups/?queue=default&q=nobody").get_data(as_text=True)
    assert "No group" in missing
    hostile = c.get("/groups/?queue=default&q=<script>x</script>").get_data(as_text=True)
    assert "<script>x</script>" not in hostile


def test_a_groups_page_lists_its_jobs_in_order_and_a_job_page_its_place(web):
    ids = fill(web, "tenant:7", 4)
    c = web.client("viewer")
    page = c.get("/groups/default/tenant:7").get_data(as_text=True)
    assert page.index(ids[1]) < page.index(ids[2]) < page.index(ids[3])
    job = c.get(f"/jobs/default/{ids[3]}").get_data(as_text=True)
    assert "3rd in line for a slot of group" in job and "tenant:7" in job


def test_an_operator_pauses_sets_slots_and_it_is_audited(web):
    ids = fill(web, "tenant:7", 3)
    c = web.client("operator")
    resp = post(c, "/groups/default/tenant:7/slots", {"slots": "3", "reason": "catch up",
                                                      "revert_after_s": "600"})
    assert resp.status_code == 303
    assert [web.q.get(i).state for i in ids] == ["ready"] * 3
    assert post(c, "/groups/default/tenant:7/pause", {"reason": "bad data"}).status_code == 303
    page = c.get("/groups/default/tenant:7").get_data(as_text=True)
    assert "paused" in page and "catch up" in page
    audit = c.get("/audit/").get_data(as_text=True)
    assert "group.slots" in audit and "group.pause" in audit


def test_viewers_may_not_and_csrf_is_required(web):
    fill(web, "g", 1)
    viewer = web.client("viewer")
    assert post(viewer, "/groups/default/g/pause", {"reason": "x"}).status_code == 403
    op = web.client("operator")
    assert post(op, "/groups/default/g/pause", {"reason": "x"}, csrf=False).status_code in (400, 403)


def test_the_api_reads_and_changes_groups(web):
    fill(web, "tenant:7", 3)
    c = web.app.test_client()
    auth = basic("operator")
    view = c.get("/api/queues/default/groups?q=tenant:7", headers=auth).get_json()
    assert view["by_waiting"][0]["name"] == "tenant:7" and view["found"]["waiting"] == 2
    resp = c.post("/api/queues/default/groups/tenant:7/slots", headers=auth,
                  json={"slots": 2, "reason": "more"})
    assert resp.status_code == 200 and resp.get_json()["slots"] == 2
    one = c.get("/api/queues/default/groups/tenant:7", headers=auth).get_json()
    assert len(one["holding"]) == 2 and len(one["waiting"]) == 1
    bad = c.post("/api/queues/default/groups/tenant:7/slots", headers=auth,
                 json={"slots": -1, "reason": "x"})
    assert bad.status_code == 400 and "bad slots" in bad.get_json()["message"]
    nothing = c.post("/api/queues/default/groups/tenant:7/slots", headers=auth,
                     json={"reason": "x"})
    assert nothing.status_code == 400 and "slots" in nothing.get_data(as_text=True)
    assert c.post("/api/queues/default/groups/bad%20name/pause", headers=auth,
                  json={"reason": "x"}).status_code == 400
    assert c.post("/api/queues/default/groups/tenant:7/slots/clear", headers=auth,
                  json={"reason": "done"}).get_json()["slots"] == 1


def test_metrics_count_waiting_jobs_and_groups_with_bounded_series(web):
    for n in range(15):
        fill(web, f"tenant:{n}", 2 + n)
    web.q.enqueue_many([JobSpec("order", {}, f"k{i}", lock_key="order:1") for i in range(3)])
    text = web.client("viewer").get("/metrics").get_data(as_text=True)
    assert 'antre_waiting_jobs{queue="default"} 122.0' in text  # 15 groups' lines + 2 on the key
    assert 'antre_lock_keys_held{queue="default"} 1.0' in text
    assert 'antre_groups_waiting{queue="default"} 15.0' in text
    series = [ln for ln in text.splitlines() if ln.startswith("antre_group_waiting_jobs{")]
    assert len(series) == 10 and 'group="tenant:14"' in text and 'group="tenant:0"' not in text


def test_a_groups_rate_is_shown_and_a_job_scheduled_for_it_says_so(web):
    ids = web.q.enqueue_many([JobSpec("order", {"i": i}, f"r:{i}", group="tenant:7",
                                      group_rate="10/s") for i in range(12)])
    c = web.client("viewer")
    job = c.get(f"/jobs/default/{ids[10]}").get_data(as_text=True)
    assert "tenant:7</code></a>'s rate 10/s (its start:" in job
    job = c.get(f"/jobs/default/{ids[11]}").get_data(as_text=True)
    assert "1st in line for group" in job and "tenant:7</code></a>'s rate 10/s" in job
    group = c.get("/groups/default/tenant:7").get_data(as_text=True)
    assert "10/s (its jobs' group_rate): 1 job(s) scheduled for a start" in group
    listing = c.get("/groups/?queue=default").get_data(as_text=True)
    assert "rate 10/s" in listing


def test_an_operator_overrides_a_groups_rate_on_the_page_the_api_and_it_is_audited(web):
    ids = web.q.enqueue_many([JobSpec("order", {"i": i}, f"r7:{i}", group="tenant:7",
                                      group_rate="1/h") for i in range(3)])
    assert [web.q.get(i).state for i in ids] == ["ready", "scheduled", "waiting"]
    c = web.client("operator")
    resp = post(c, "/groups/default/tenant:7/limit", {"rate": "10/s", "slots": "",
                                                      "reason": "their backlog is urgent",
                                                      "revert_after_s": "600"})
    assert resp.status_code == 303
    assert [web.q.get(i).state for i in ids] == ["ready"] * 3  # held at once, by the scripts
    page = c.get("/groups/default/tenant:7").get_data(as_text=True)
    assert "rate 10/s, set by" in page and "their backlog is urgent" in page
    assert "10/s (the operator's)" in page and "reverts at" in page
    audit = c.get("/audit/").get_data(as_text=True)
    assert "group.limit" in audit and "their backlog is urgent" in audit
    api = web.app.test_client()
    auth = basic("operator")
    resp = api.post("/api/queues/default/groups/tenant:7/limit", headers=auth,
                    json={"rate": "2/m", "slots": 4, "reason": "calmer"})
    assert resp.status_code == 200
    assert resp.get_json()["rate"] == "2/m" and resp.get_json()["slots"] == 4
    one = api.get("/api/queues/default/groups/tenant:7", headers=auth).get_json()
    assert one["group"]["rate"] == "2/m" and one["group"]["override"]["slots"] == 4
    for body, says in [({"rate": "fast", "reason": "x"}, "bad rate 'fast'"),
                       ({"reason": "x"}, "pass slots"),
                       ({"rate": "1/s", "slots": -2, "reason": "x"}, "bad slots"),
                       ({"rate": "1/s"}, "reason")]:
        bad = api.post("/api/queues/default/groups/tenant:7/limit", headers=auth, json=body)
        assert bad.status_code == 400 and says in bad.get_json()["message"], body
    assert api.post("/api/queues/default/groups/bad%20name/limit", headers=auth,
                    json={"rate": "1/s", "reason": "x"}).status_code == 400
    viewer = web.client("viewer")
    assert post(viewer, "/groups/default/tenant:7/limit", {"rate": "1/s", "reason": "x"}
                ).status_code == 403
    spec = api.get("/api/openapi.json", headers=auth).get_json()
    op = spec["paths"]["/api/queues/{queue}/groups/{group}/limit"]["post"]
    assert "rate" in str(op)
    assert api.post("/api/queues/default/groups/tenant:7/slots/clear", headers=auth,
                    json={"reason": "done"}).status_code == 200
    assert Groups_rate(web) == "1/h"  # its jobs' own again


def Groups_rate(web) -> str:
    return web.client("viewer").get("/api/queues/default/groups/tenant:7").get_json()[
        "group"]["rate"]
