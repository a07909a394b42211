"""One damaged flow or group record (not of its Redis type) does not break its listing: the
Flows and Groups pages and their API answer, list the sound ones and mark the bad one."""

from __future__ import annotations

import pytest

from antre.engine import keys

DAMAGE = {"a string": lambda r, k: r.set(k, "x"), "a list": lambda r, k: r.rpush(k, "x")}


def chain(app, n: int):
    return app.chain(app.spec("t", {"n": n}, idempotency_key=f"a{n}"),
                     app.spec("t", {"n": n}, idempotency_key=f"b{n}")).enqueue()


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_flow_is_marked_and_the_others_listed(web, how):
    app = web.producer
    good, bad = chain(app, 1), chain(app, 2)
    r = app.redis
    key = keys.QueueKeys("default").flow(bad.id)
    r.delete(key)
    DAMAGE[how](r, key)
    c = web.client("viewer")
    res = c.get("/api/queues/default/flows?state=running")
    assert res.status_code == 200
    rows = {row["id"]: row for row in res.get_json()["rows"]}
    assert set(rows) == {good.id, bad.id}
    assert rows[bad.id]["damaged"] == "not a hash" and rows[good.id]["damaged"] == ""
    assert c.get(f"/api/queues/default/flows/{bad.id}").status_code in (200, 404)
    page = c.get("/flows/?queue=default&state=running")
    assert page.status_code == 200 and good.id in page.get_data(as_text=True)
    assert c.get(f"/flows/default/{bad.id}").status_code in (200, 404)


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_group_is_marked_and_the_others_listed(web, how):
    app = web.producer
    for g in ("g1", "g2"):
        for i in range(2):
            app.enqueue("t", {}, idempotency_key=f"{g}-{i}", group=g, group_concurrency=1)
    r = app.redis
    key = keys.QueueKeys("default").group_held("g2")
    r.delete(key)
    DAMAGE[how](r, key)
    c = web.client("viewer")
    res = c.get("/api/queues/default/groups")
    assert res.status_code == 200, res.get_data(as_text=True)
    body = res.get_json()
    rows = {row["name"]: row for row in body["by_waiting"] + body["by_slots"]}
    assert {"g1", "g2"} <= set(rows)
    assert rows["g2"]["damaged"] and not rows["g1"]["damaged"]
    assert c.get("/groups/?queue=default").status_code == 200
