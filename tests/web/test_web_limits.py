"""Live overrides of a job type's and a downstream's limits from the
dashboard, the API and the CLI: one table entry each (limit.set, limit.clear), operators only,
with CSRF, audited, reverting on the injected clock, held at the next reserve; an override of a
type or downstream no worker declared is refused saying so (400 / exit 1). The Groups page
lists the queue's limits with their overrides."""

from __future__ import annotations

import getpass

from webtools import basic, post

from antre.engine.queue import JobSpec
from antre.limits.gates import Declaration, Gates
from antre_cli.main import main


def declare(web) -> list[str]:
    Gates(web.q.redis, web.clock).declare("default", Declaration(
        cand={"order": "type:order ds:mail"}, conc={"type:order": 1}))
    return web.q.enqueue_many([JobSpec("order", {"i": i}, f"o:{i}") for i in range(4)])


def test_an_operator_overrides_a_types_slots_from_the_page_and_it_holds(web):
    declare(web)
    assert len(web.q.reserve("w", count=10)) == 1
    c = web.client("operator")
    page = c.get("/groups/?queue=default").get_data(as_text=True)
    assert 'data-gate="type:order"' in page and 'data-gate="ds:mail"' in page
    resp = post(c, "/groups/default/limits/type/order/set",
                {"slots": "3", "reason": "<b>catch up</b>", "revert_after_s": "600"})
    assert resp.status_code == 303
    assert len(web.q.reserve("w", count=10)) == 2  # the next reserve holds the new limit
    page = c.get("/groups/?queue=default").get_data(as_text=True)
    assert "&lt;b&gt;catch up&lt;/b&gt;" in page and "<b>catch up</b>" not in page
    web.clock.advance(600_001)  # the override reverts: 3 in flight, 1 slot again
    assert web.q.reserve("w", count=10) == []
    audit = c.get("/audit/").get_data(as_text=True)
    assert "limit.set" in audit


def test_viewers_may_not_and_csrf_is_required(web):
    declare(web)
    viewer = web.client("viewer")
    assert post(viewer, "/groups/default/limits/type/order/set",
                {"slots": "2", "reason": "x"}).status_code == 403
    op = web.client("operator")
    assert post(op, "/groups/default/limits/type/order/set", {"slots": "2", "reason": "x"},
                csrf=False).status_code in (400, 403)


def test_the_api_sets_and_clears_and_refuses_an_unknown_type_saying_so(web):
    declare(web)
    c = web.app.test_client()
    auth = basic("operator")
    ok = c.post("/api/queues/default/limits/downstream/mail", headers=auth,
                json={"slots": 0, "rate": "5/s", "reason": "provider throttles us"})
    assert ok.status_code == 200 and ok.get_json()["rate"] == "5/s"
    assert web.q.reserve("w", count=10) == []  # 0 slots for the downstream: nothing starts
    cleared = c.post("/api/queues/default/limits/downstream/mail/clear", headers=auth,
                     json={"reason": "fixed"})
    assert cleared.status_code == 200
    assert len(web.q.reserve("w", count=10)) == 1
    unknown = c.post("/api/queues/default/limits/type/nope", headers=auth,
                     json={"slots": 1, "reason": "x"})
    assert unknown.status_code == 400
    assert "unknown type 'nope' in queue default" in unknown.get_json()["message"]
    bad = c.post("/api/queues/default/limits/type/order", headers=auth,
                 json={"rate": "fast", "reason": "x"})
    assert bad.status_code == 400 and "bad rate" in bad.get_json()["message"]
    kind = c.post("/api/queues/default/limits/queue/order", headers=auth,
                  json={"slots": 1, "reason": "x"})
    assert kind.status_code == 400 and "'type' or 'downstream'" in kind.get_json()["message"]
    for body, says in [({"slots": -1, "reason": "x"}, "bad slots -1: an int from 0"),
                       ({"slots": "many", "reason": "x"}, "'slots' must be a JSON integer"),
                       ({"reason": "x"}, "pass slots"),
                       ({"slots": 1}, "reason")]:
        refused = c.post("/api/queues/default/limits/type/order", headers=auth, json=body)
        assert refused.status_code == 400 and says in str(refused.get_json()), body
    assert web.svc.gates.override("default", "type:order") is None  # nothing was changed


def test_the_cli_sets_a_limit_audited_and_refuses_an_unknown_downstream(web, monkeypatch,
                                                                         redis_url, sqlite_url,
                                                                         capsys):
    declare(web)
    monkeypatch.setenv("ANTRE_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTRE_DATABASE_URL", sqlite_url)
    assert main(["limit", "set", "default", "type", "order", "--slots", "2", "--reason",
                 "catch up"]) == 0
    assert len(web.q.reserve("w", count=10)) == 2
    assert main(["limit", "set", "default", "downstream", "sms", "--slots", "1",
                 "--reason", "x"]) == 1
    assert "unknown downstream 'sms' in queue default" in capsys.readouterr().err
    assert main(["limit", "clear", "default", "type", "order", "--reason", "done"]) == 0
    entries = [(e.action, e.user, e.outcome) for e in web.svc.audit.list()]
    assert ("limit.set", f"cli:{getpass.getuser()}", "ok") in entries
