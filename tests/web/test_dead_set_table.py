"""The DLQ's filtered-set actions as entries of the table: the paced bulk
replay, the replay-now and the filtered discard take their time window from the dashboard's
clock (``Action.prepare``, with the ``Ops`` that carries it), and the replay-now gets the HTML
route it lacked; audited under the names of before."""

from __future__ import annotations

from antre.actions import Ops, by_name, dead_filter, parse
from webtools import basic, post


def test_the_window_comes_from_the_dashboards_clock(web):
    old = web.dead_job("sms")
    web.clock.advance(2 * 3600 * 1000)  # two hours on the dashboard's clock
    new = web.dead_job("sms")
    c = web.app.test_client()
    resp = c.post("/api/queues/default/dead/discard", json={"window": "1h", "confirm": "1"},
                  headers=basic("operator"))
    assert resp.status_code == 200 and resp.get_json()["dry_run"] == 1
    dead = [m.decode() if isinstance(m, bytes) else m
            for m in web.svc.antre.redis.zrange(web.q.keys.dead, 0, -1)]
    assert dead == [old] and new != old  # only the last hour's went
    (entry,) = web.audit("dlq.discard_filtered")
    assert entry.outcome == "ok" and entry.target.startswith("default [")
    assert "since=" in entry.target


def test_prepare_reads_the_window_from_the_ops_clock(web):
    action = by_name("dlq.discard_filtered")
    assert action.prepare is dead_filter and by_name("dlq.bulk_replay.start").prepare
    args = parse(action, {"queue": "default"}, {"window": "1h", "since_ms": "", "type": "sms"})
    flt = dead_filter(Ops(web.svc.antre, web.clock), args)["filter"]
    assert (flt.since_ms, flt.until_ms, flt.job_type) == (web.clock() - 3_600_000, None, "sms")
    args = parse(action, {"queue": "default"}, {"window": "1h", "since_ms": "7"})
    assert dead_filter(Ops(web.svc.antre, web.clock), args)["filter"].since_ms == 7  # wins


def test_replay_now_has_an_html_route_audited_as_the_api(web):
    job_id = web.dead_job("email")
    c = web.client("operator")
    resp = post(c, "/dlq/default/replay-now", {"maximum": "5", "type": "email",
                                                "reason": "smtp back"}, follow_redirects=True)
    assert resp.status_code == 200
    assert "replayed 1 dead jobs" in resp.get_data(as_text=True)
    assert web.svc.reads.count_dead("default") == 0
    assert web.svc.antre.redis.lpos(web.q.keys.ready, job_id) is not None
    assert [(e.user, e.outcome, e.reason) for e in web.audit("dlq.replay_filtered_now")] == [
        ("operator", "ok", "smtp back")]
    assert post(web.client("viewer"), "/dlq/default/replay-now",
                {"maximum": "5"}).status_code == 403
    with web.app.test_request_context():
        from flask import url_for
        assert url_for("dlq.replay_filtered_now", queue="q") == "/dlq/q/replay-now"


def test_a_bad_window_bound_is_a_400_and_changes_nothing(web):
    web.dead_job()
    c = web.app.test_client()
    resp = c.post("/api/queues/default/dead/replay-now",
                  json={"maximum": 5, "since_ms": -1}, headers=basic("operator"))
    assert resp.status_code == 400 and b"since_ms must be epoch milliseconds" in resp.data
    assert web.svc.reads.count_dead("default") == 1
