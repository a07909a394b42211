"""Bad input is a 400 with a message, never a 500: user names outside the allowed set, non
numbers in queries, forms and JSON bodies, Unicode digits and huge cursors, an in-flight
selection with Unicode digits, query arguments that would be ``url_for`` arguments, a JSON body
nested 100,000 deep; nothing is changed."""

from __future__ import annotations

import pytest
from webtools import basic, post


def _is_400(resp, *words):
    body = resp.get_data(as_text=True)
    assert resp.status_code == 400, (resp.status_code, body[:300])
    assert all(w in body for w in words), body[:300]


@pytest.mark.parametrize("name", ["ghost/admin", "a b", "x:y", " ", "-lead", "é", "a" * 65,
                                  "<b>", "..", "a\tb"])
def test_bad_user_names_are_refused(web, name):
    resp = web.app.test_client().post("/api/users", json={
        "name": name, "role": "viewer", "password": "a-good-password-1"}, headers=basic("admin"))
    assert resp.status_code == 400 and "user name must be" in resp.get_json()["message"]
    assert [u.name for u in web.svc.users.list()] == ["admin", "operator", "viewer"]


def test_good_names_work_end_to_end(web):
    c = web.app.test_client()
    for name in ("alice.smith", "bob_2", "ops@example.org", "x-y"):
        resp = c.post("/api/users", json={"name": name, "role": "viewer",
                                          "password": "a-good-password-1"}, headers=basic("admin"))
        assert resp.status_code == 200
        assert c.post(f"/api/users/{name}/delete", json={}, headers=basic("admin")).status_code == 200


@pytest.mark.parametrize("url", [
    "/api/audit?limit=inf", "/api/audit?offset=-1e400", "/api/audit?limit=nan",
    "/api/queues/default/dead?limit=1e400", "/api/queues/default/inflight?offset=abc",
    "/audit/?limit=inf", "/dlq/?queue=default&offset=-1e400"])
def test_non_numbers_in_the_query_are_400(web, url):
    c = web.client("viewer")
    resp = c.get(url)
    assert resp.status_code == 400, url
    assert "whole number" in resp.get_data(as_text=True)


def test_non_numbers_in_forms_and_bodies_are_400(web):
    web.dead_job()
    op = web.client("operator")
    for data in ({"maximum": "abc", "rate": "1"}, {"maximum": "1", "rate": "inf"},
                 {"maximum": "1e400", "rate": "1"}):
        assert post(op, "/dlq/default/bulk", data).status_code == 400, data
    assert post(op, "/dlq/default/discard-filtered", {"maximum": "abc",
                                                      "confirm": "1"}).status_code == 400
    c = web.app.test_client()
    for body in ({"maximum": "abc"}, {"maximum": 1e300}):
        resp = c.post("/api/queues/default/dead/replay-now", json=body, headers=basic("operator"))
        assert resp.status_code == 400, body
    resp = c.post("/api/queues/default/replays", data='{"rate": 1e400, "maximum": 1}',
                  headers={**basic("operator"), "Content-Type": "application/json"})
    assert resp.status_code == 400
    assert web.svc.reads.count_dead("default") == 1


@pytest.mark.parametrize("url, words", [
    ("/find/more?q=to%3Da&cursor=default|ready|0&n=%C2%B2", ["n must be a whole number"]),
    ("/find/more?q=to%3Da&cursor=default|ready|%C2%B2", ["bad search cursor"]),
    ("/find/more?q=to%3Da&cursor=default|ready|" + "9" * 30, ["bad search cursor"]),
    ("/api/find?field=to%3Da&cursor=default|ready|%D9%A3%C2%B2", ["bad search cursor"]),
])
def test_unicode_digits_and_huge_cursors_are_400s(web, url, words):
    web.q.enqueue("email", {"to": "a", "items": [1]}, idempotency_key="k")
    resp = web.client("viewer").get(url)
    _is_400(resp, *words)


def test_an_in_flight_selection_with_unicode_digits_is_a_400(web):
    c = web.client("operator")
    resp = post(c, "/inflight/default/selected", {"ids": ["²:job1"], "action": "extend",
                                                  "seconds": "60", "reason": "r"})
    _is_400(resp, "bad row")


@pytest.mark.parametrize("extra", ["endpoint=x", "_anchor=x%22%3E", "_scheme=javascript",
                                   "_external=1"])
def test_query_arguments_are_never_url_for_arguments(web, extra):
    web.producer.queue("other").enqueue("email", {}, idempotency_key="k2")
    web.dead_job()  # default is the busiest: the page redirects to name it
    resp = web.client("viewer").get(f"/dlq/?{extra}")
    assert resp.status_code == 302
    location = resp.headers["Location"]
    assert location.startswith("/dlq/?") and "queue=default" in location
    assert "javascript" not in location.split("?")[0] and "#" not in location


def test_a_json_body_nested_100k_deep_is_a_400(web):
    body = "[" * 100_000 + "]" * 100_000
    resp = web.app.test_client().post("/api/queues/default/pause", data=body,
                                      headers={**basic("operator"),
                                               "Content-Type": "application/json"})
    _is_400(resp, "nested too deeply")
