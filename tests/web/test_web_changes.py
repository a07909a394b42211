"""What changed before an incident: real workers report their versions at start, an operator's
group limit and pauses are read where they live, and the incident page lists what changed in
the minutes before the incident's onset, ranked by what it touched (its queue first), with a
manual clock; the timeline of change in the JSON API."""

from __future__ import annotations

from helpers import burst
from webtools import basic

from antre.control.pause import Pauses
from antre.groups.control import GroupControl

MIN = 60_000


def _start_worker(web, monkeypatch, version: str, worker_id: str) -> None:
    monkeypatch.setenv("ANTRE_CODE_VERSION", version)
    burst(web.producer, web.clock, worker_id=worker_id)  # nothing to run: it starts, reports


def _stuck_lease_incident(web) -> int:
    """A job whose worker died holding it: its lease ends 30 s after the reserve and, 30 s
    later, it is an incident ('Leases past their deadline') whose onset is that deadline."""
    web.q.enqueue("import", {}, idempotency_key=f"import:{web.clock()}")
    (job,) = web.q.reserve("gone-worker")
    assert job.deadline == web.clock() + 30_000
    return job.deadline


def planted(web, monkeypatch) -> int:
    """Two hours of history: the returned onset's incident had a lowered group limit and a new
    worker version a minute before it, a plain restart and another queue's override five
    minutes before, and the first deploy long before (outside the window)."""
    web.producer.queue("other").enqueue("import", {}, idempotency_key="other:1")
    _start_worker(web, monkeypatch, "v1", "w-old")
    web.clock.advance(120 * MIN)
    groups = GroupControl(web.producer.redis, web.clock)
    groups.set_slots("other", "tenant:z", 2, by="carol", reason="noise elsewhere")
    web.clock.advance(1000)
    _start_worker(web, monkeypatch, "v1", "w-restart")
    web.clock.advance(4 * MIN - 1000)
    groups.set_slots("default", "tenant:a", 1, by="bob", reason="<b>protect</b> the db")
    _start_worker(web, monkeypatch, "v2", "w-new")
    web.clock.advance(30_000)
    onset = _stuck_lease_incident(web)
    web.clock.advance(onset - web.clock() + 31_000)  # past the deadline and its grace
    return onset


def test_the_incident_page_names_the_group_limit_and_the_new_version_first(web, monkeypatch):
    onset = planted(web, monkeypatch)
    page = web.client("viewer").get("/incident/").get_data(as_text=True)
    card = page[page.index('data-incident="stuck_leases|default"'):]
    card = card[:card.index("</article>")]
    kinds = [part.split('"', 1)[0] for part in card.split('data-change="')[1:]]
    assert set(kinds[:2]) == {"group_limit", "deploy"}, kinds
    assert kinds[2:] == ["worker_start", "group_limit"]  # the restart, then the other queue's
    assert "group tenant:a limited to 1 slots in queue default" in card
    assert "deploy: antre " in card and "v2 first seen (worker w-new)" in card
    assert "&lt;b&gt;protect&lt;/b&gt;" in card and "<b>protect</b>" not in card
    assert "v1 first seen" not in card  # two hours before: outside the window
    assert "touches its queue" in card
    api = web.client().get("/api/incidents", headers=basic("viewer")).get_json()
    (inc,) = [i for i in api["open"] if i["id"] == "stuck_leases|default"]
    assert inc["since"] == onset
    top = [c["change"]["kind"] for c in inc["changes"][:2]]
    assert set(top) == {"group_limit", "deploy"}
    assert {c["before_ms"] for c in inc["changes"][:2]} == {60_000}


def test_the_changes_api_lists_every_change_oldest_first(web, monkeypatch):
    planted(web, monkeypatch)
    since = web.clock() - 3 * 3_600_000
    got = web.client().get(f"/api/changes?since_ms={since}", headers=basic("viewer")).get_json()
    kinds = [c["kind"] for c in got["changes"]]
    assert kinds[:3] == ["deploy", "group_limit", "worker_start"]
    assert set(kinds[3:]) == {"group_limit", "deploy"}  # (at the same ms)
    assert [c["t"] for c in got["changes"]] == sorted(c["t"] for c in got["changes"])
    assert got["changes"][0]["queues"] == ["default"]
    bad = web.client().get("/api/changes?since_ms=yesterday", headers=basic("viewer"))
    assert bad.status_code == 400


def test_a_pause_is_a_change_of_its_job_type(web):
    web.q.enqueue("import", {}, idempotency_key="import:paused")
    Pauses(web.producer.redis, clock=web.clock).pause("default", "import", "dave", "db upgrade")
    got = web.client().get("/api/changes", headers=basic("viewer")).get_json()
    (pause,) = [c for c in got["changes"] if c["kind"] == "pause"]
    assert (pause["queue"], pause["job_type"], pause["by"]) == ("default", "import", "dave")
    assert "db upgrade" in pause["text"]


def test_the_incident_page_lists_the_last_hours_changes_newest_first(web, monkeypatch):
    planted(web, monkeypatch)
    page = web.client("viewer").get("/incident/").get_data(as_text=True)
    recent = page[page.index('id="recent-changes"'):]
    kinds = [part.split('"', 1)[0] for part in recent.split('data-change="')[1:]]
    assert set(kinds[:2]) == {"group_limit", "deploy"} and kinds[2:] == ["worker_start",
                                                                          "group_limit"]
    assert "v1 first seen" not in recent  # two hours ago
