"""The audit log cannot be flooded or turned against its readers: anonymous refusals are
counted, not audited; every audited field is bounded; exports are streamed, with CSV cells a
spreadsheet could run neutralised; a failed login never records the typed name as a user."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest
from webtools import login, post

from antre.stores.audit import LIMITS, MAX_DETAIL_CHARS


def test_anonymous_refusals_are_counted_not_audited(web):
    c = web.app.test_client()
    c.get("/login")
    big = "A" * 400_000  # about what a form field may hold (Werkzeug: 500 kB)
    for _ in range(3):
        resp = c.post("/login", data={"username": "x", "password": "y", "reason": big})
        assert resp.status_code == 400
    assert web.audit() == []
    assert web.app.extensions["antre_anonymous_refusals"].counts == {"login": 3}


def test_every_audited_field_is_bounded(web):
    dead = web.dead_job()
    c = web.client("operator")
    huge = "R" * 500_000
    post(c, f"/dlq/default/{dead}/replay", {"reason": huge})
    post(web.client("viewer"), f"/dlq/default/{dead}/discard", {"reason": huge})
    web.svc.audit.record("u" * 5000, "admin", "a" * 500, "t" * 5000, huge, "ok",
                         {"blob": "d" * 100_000}, "1" * 500)
    for entry in web.audit():
        assert len(entry.reason or "") <= LIMITS["reason"]
        assert len(entry.target or "") <= LIMITS["target"]
        assert len(entry.user) <= LIMITS["user"] and len(entry.action) <= LIMITS["action"]
        assert len(json.dumps(entry.detail or {})) <= MAX_DETAIL_CHARS + 100
    page = c.get("/audit/").get_data(as_text=True)
    assert "R" * 400 not in page  # the page shows a bounded excerpt of each reason


def test_exports_are_streamed(web):
    for i in range(1200):
        web.svc.audit.record("bob", "operator", "test.noise", str(i), None, "ok")
    c = web.client("viewer")
    for url in ("/audit/export.csv", "/audit/export.json"):
        resp = c.get(url, buffered=False)
        assert resp.is_streamed, url
        chunks = list(resp.response)
        assert len(chunks) > 100, url  # written as the rows come, not as one body
        resp.close()
    data = json.loads(c.get("/audit/export.json").get_data(as_text=True))
    assert len(data) == 1201 and data[0]["target"] == "0"  # oldest first; +1: the login


@pytest.mark.parametrize("value", [" =1+1", "\t=1+1", "\r\n=cmd", "\x00=1", "\u00a0@SUM(A1)",
                                   "  +1", "-1", "=1;=2"])
def test_csv_cells_that_a_spreadsheet_could_run_are_neutralised(web, value):
    web.svc.audit.record("bob", "operator", "t", value, value, "ok")
    text = web.client("viewer").get("/audit/export.csv?action=t").get_data(as_text=True)
    assert text.startswith('"id","at"')
    row = list(csv.DictReader(io.StringIO(text)))[0]
    assert row["target"].startswith("'") and row["reason"].startswith("'")
    body = text.split("\n", 1)[1]
    assert body.startswith('"') and '","' in body  # every cell quoted: a ';' stays inside it


def test_failed_logins_never_record_the_typed_name_as_a_user(web):
    c = web.client()
    typed = "correct-horse-typed-in-the-name-box"
    assert login(c, typed, "x").status_code == 401
    assert login(c, "admin", "wrong-password").status_code == 401
    assert login(c, "viewer").status_code == 302
    rows = web.audit("login")
    failed = [r for r in rows if r.outcome == "failed"]
    assert len(failed) == 2
    assert {r.user for r in failed} == {"(unknown user)"}
    assert all(typed not in json.dumps([r.user, r.target, r.detail]) for r in rows)
    assert {r.target for r in failed} == {
        f"name sha256:{hashlib.sha256(n.encode()).hexdigest()[:12]}" for n in (typed, "admin")}
    assert [r.user for r in rows if r.outcome == "ok"] == ["viewer"]
    page = web.client("viewer").get("/audit/?action=login").get_data(as_text=True)
    assert typed not in page
