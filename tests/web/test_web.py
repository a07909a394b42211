"""Dashboard: every page and partial, roles, CSRF, the actions and their audit entries."""

from __future__ import annotations

import json
import re

import pytest
from webtools import PASSWORD, htmx, login, post


from antre.observe import sampling
from antre.observe.registry import WorkerInfo
from antre.observe.readmodels import DeadFilter

PAGES = ["/", "/charts?queue=default&window=1h", "/inflight/", "/scheduled/", "/dlq/",
         "/dlq/tasks?queue=default", "/locks/", "/workers/", "/idempotency/?key=k1", "/audit/"]
ACTION_BUTTONS = (">Replay selected<", ">Discard selected<", ">Extend selected<",
                  ">Run selected now<", ">Replay this job<", ">Release<", ">Pause<", ">Cancel<",
                  "Start replay", "Discard the set")


def populate(web):
    """A job in every place: ready, in flight, scheduled, dead; a lock; a worker; samples."""
    dead = web.dead_job()
    web.q.enqueue("email", {"n": 1}, idempotency_key="k-inflight")
    (inflight,) = web.q.reserve("w1")
    web.q.enqueue("email", {"n": 2}, idempotency_key="k-sched")
    (sched,) = web.q.reserve("w1")
    web.q.retry(sched, delay_ms=60_000, error="timeout talking to smtp")
    web.q.enqueue("email", {"n": 3}, idempotency_key="k-ready")
    lock = web.producer.locks.acquire("customer:42", 30_000, owner="w1")
    sampling.take(web.producer.redis, web.clock)
    web.clock.advance(60_000)
    sampling.take(web.producer.redis, web.clock)
    web.svc.registry.beat(WorkerInfo(id="w1", host="h1", pid=7, queues=["default"],
                                     current=[inflight.id], processed=3, failed=1))
    return {"dead": dead, "inflight": inflight, "sched": sched, "lock": lock}


# -- login and sessions -------------------------------------------------------------------------
def test_login_required_everywhere(web):
    c = web.client()
    for url in PAGES:
        resp = c.get(url)
        assert resp.status_code == 302 and "/login" in resp.headers["Location"], url
    assert c.get("/api/overview").status_code == 401
    assert c.get("/static/antre.css").status_code == 200
    assert c.get("/login").status_code == 200


def test_login_sets_hardened_cookie_and_logout(web):
    c = web.client()
    resp = login(c, "viewer")
    assert resp.status_code == 302
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert c.get("/").status_code == 200
    assert post(c, "/logout").status_code == 302
    assert c.get("/").status_code == 302


def test_wrong_password_is_audited_and_rate_limited(web):
    c = web.client()
    for _ in range(5):
        assert login(c, "operator", "nope").status_code == 401
    resp = login(c, "operator", PASSWORD)
    assert resp.status_code == 429 and "Too many" in resp.get_data(as_text=True)
    other = web.app.test_client()  # same address, other user: not limited
    assert login(other, "viewer").status_code == 302
    outcomes = [e.outcome for e in web.audit("login")]
    # the rate-limited try is counted, not audited: nobody proved who they are
    assert outcomes.count("failed") == 5 and "refused" not in outcomes
    assert web.app.extensions["antre_anonymous_refusals"].counts == {"login": 1}


def test_login_limit_is_shared_by_every_dashboard_process(web, sqlite_url):
    from argon2 import PasswordHasher

    from webtools import TEST_SECRET_KEY
    from antre_web import create_app
    other_app = create_app({"ANTRE_REDIS_URL": web.svc.redis_url, "ANTRE_DATABASE_URL": sqlite_url,
                            "TESTING": True, "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": web.clock})
    other_app.extensions["antre"].users.hasher = PasswordHasher(time_cost=1, memory_cost=1024,
                                                                parallelism=1)
    a, b = web.client(), other_app.test_client()  # two gunicorn workers, one Redis
    for _ in range(3):
        assert login(a, "operator", "nope").status_code == 401
    for _ in range(2):
        assert login(b, "operator", "nope").status_code == 401
    assert login(a, "operator").status_code == 429
    assert login(b, "operator").status_code == 429
    keys = web.svc.redis.keys("antre:{auth}:login_failures:*")
    # address, account, (account, address): the typed name is hashed, not stored
    assert len(keys) == 3 and not any("operator" in k for k in keys)
    web.clock.advance(60_001)  # the window passes (each process alone counted fewer than 5)
    assert login(b, "operator").status_code == 302


def test_login_throttle_window_slides_with_the_clock(web):
    t = web.svc.logins
    for _ in range(5):
        t.failed("u@10.0.0.1")
    wait = t.blocked_for_ms("u@10.0.0.1", 5)
    assert 0 < wait <= 60_000
    assert t.blocked_for_ms("u@10.0.0.2", 5) == 0 and t.blocked_for_ms("v@10.0.0.1", 5) == 0
    assert t.blocked_for_ms("u@10.0.0.1", 6) == 0  # the limit is the caller's
    web.clock.advance(wait)
    assert t.blocked_for_ms("u@10.0.0.1", 5) == 0
    t.failed("u@10.0.0.1")
    assert t.blocked_for_ms("u@10.0.0.1", 5) == 0  # the old failures left the window


def test_login_without_csrf_is_refused(web):
    c = web.client()
    c.get("/login")
    resp = c.post("/login", data={"username": "admin", "password": PASSWORD})
    assert resp.status_code == 400
    assert c.get("/").status_code == 302


# -- pages and partials -------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_page_and_partial_renders(web, role):
    populate(web)
    c = web.client(role)
    for url in PAGES:
        full = c.get(url, follow_redirects=True)
        assert full.status_code == 200, url
        body = full.get_data(as_text=True)
        assert "as of" in body, url
        part = c.get(url, headers=htmx(), follow_redirects=True)
        assert part.status_code == 200 and "<html" not in part.get_data(as_text=True), url
    assert c.get("/idempotency/").status_code == 200


def test_pages_show_the_data(web):
    made = populate(web)
    c = web.client("viewer")
    over = c.get("/").get_data(as_text=True)
    assert "Dead letters" in over and "default" in over
    assert 'hx-trigger="every 2s, poll-now"' in over and "data-poll" in over
    inflight = c.get("/inflight/?queue=default").get_data(as_text=True)
    assert made["inflight"].id in inflight and 'data-deadline="' in inflight
    assert "ago" in inflight  # owner's heartbeat
    sched = c.get("/scheduled/").get_data(as_text=True)
    assert made["sched"].id in sched and "timeout talking to smtp" in sched
    dlq = c.get("/dlq/").get_data(as_text=True)
    assert made["dead"] in dlq and "Dry run: <strong>1 dead job</strong>" in dlq
    assert "permanent: smtp down" in dlq  # error group signature
    locks = c.get("/locks/").get_data(as_text=True)
    assert "customer:42" in locks and made["lock"].token in locks
    assert "none yet" in locks  # no SQL effect committed under that lock so far
    with web.svc.session_factory() as s:
        web.svc.fences.advance(s, "customer:42", made["lock"].fence)
        s.commit()
    row = c.get("/locks/").get_data(as_text=True).split("customer:42</code>")[1].split("</tr>")[0]
    committed = f'data-label="Committed in SQL" class="opt">{made["lock"].fence}</td>'
    assert committed in row and "none yet" not in row
    workers = c.get("/workers/").get_data(as_text=True)
    assert "h1 / 7" in workers and "stale heartbeat" not in workers
    web.clock.advance(120_000)
    assert "stale heartbeat" in c.get("/workers/").get_data(as_text=True)
    job = c.get(f"/dlq/default/{made['dead']}").get_data(as_text=True)
    assert "Traceback: boom" in job and "&#34;to&#34;: &#34;a@x&#34;" in job


def test_inflight_expiring_rows_are_highlighted(web):
    web.q.enqueue("email", {}, idempotency_key="k", visibility_timeout_s=4)
    web.q.reserve("w1")
    body = web.client("viewer").get("/inflight/", headers=htmx()).get_data(as_text=True)
    assert 'class="expiring"' in body


def test_charts_have_samples_and_operator_markers(web):
    made = populate(web)
    c = web.client("operator")
    post(c, f"/dlq/default/{made['dead']}/replay", {"reason": "fixed smtp"})
    web.clock.advance(1000)
    sampling.take(web.producer.redis, web.clock)
    body = c.get("/charts?queue=default&window=6h", headers=htmx()).get_data(as_text=True)
    figs = re.findall(r"data-chart='([^']*)'", body)
    assert len(figs) == 2
    depth = json.loads(figs[0])
    names = [t["name"] for t in depth["data"]]
    assert names[:4] == ["ready", "scheduled", "inflight", "dead"]
    assert "operator actions" in names and depth["layout"]["shapes"]
    marker = depth["data"][-1]["hovertext"][0]
    assert "dlq.replay" in marker and "operator" in marker


def test_payload_and_errors_are_escaped(web):
    evil = "<script>alert(1)</script>"
    job_id = web.dead_job(payload={"html": evil}, error=f"bad {evil}")
    c = web.client("viewer")
    for url in (f"/dlq/default/{job_id}", "/dlq/", "/audit/"):
        body = c.get(url).get_data(as_text=True)
        assert "<script>alert(1)" not in body, url
    assert "&lt;script&gt;alert(1)" in c.get(f"/dlq/default/{job_id}").get_data(as_text=True)


# -- roles ----------------------------------------------------------------------------------------
# what every logged-in user may do to their own account
SELF_SERVICE = ("auth.login_post", "auth.logout", "auth.change_password",
                "auth.logout_everywhere", "api.account_password")


def _post_urls(app, made):
    values = {"queue": "default", "job_id": made["dead"], "task_id": "t1", "name": "viewer",
              "group": "tenant:7", "flow_id": "f1", "kind": "semaphore"}
    out = []
    for rule in app.url_map.iter_rules():
        if "POST" in rule.methods and rule.endpoint not in SELF_SERVICE:
            out.append(re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: values[m.group(1)], rule.rule))
    return out


def test_viewer_gets_403_on_every_action_and_it_is_audited(web):
    made = populate(web)
    c = web.client("viewer")
    urls = _post_urls(web.app, made)
    assert len(urls) >= 25
    for url in urls:
        if url.startswith("/api/"):
            resp = c.post(url, json={}, headers={"X-CSRF-Token": _csrf(c)})
        else:
            resp = post(c, url, {"reason": "try"})
        assert resp.status_code == 403, url
        assert "may not do this" in resp.get_data(as_text=True), url
    refused = [e for e in web.audit() if e.outcome == "refused" and e.user == "viewer"]
    assert len(refused) == len(urls)
    assert web.svc.reads.count_dead("default") == 1  # nothing changed


def _csrf(c):
    from webtools import csrf_of
    return csrf_of(c)


def test_operator_cannot_manage_users(web):
    c = web.client("operator")
    assert c.get("/users/").status_code == 403
    assert post(c, "/users/add", {"name": "x", "role": "admin", "password": "p"}).status_code == 403
    assert "Users</a>" not in c.get("/").get_data(as_text=True)


def test_buttons_are_not_rendered_for_viewers(web):
    populate(web)
    web.svc.bulk.start("default", DeadFilter(), 1, 1,
                       "operator")
    viewer, operator = web.client("viewer"), web.client("operator")
    pages = ["/inflight/", "/scheduled/", "/dlq/", "/locks/",
             f"/dlq/default/{web.svc.reads.dead('default').rows[0].id}"]
    seen_op = set()
    for url in pages:
        vbody = viewer.get(url).get_data(as_text=True)
        obody = operator.get(url).get_data(as_text=True)
        for label in ACTION_BUTTONS:
            assert label not in vbody, (url, label)
            if label in obody:
                seen_op.add(label)
        assert 'method="post"' not in vbody.replace('action="/logout"', "").split("</header>")[1]
    assert seen_op >= {">Replay selected<", ">Discard selected<", ">Extend selected<",
                       ">Run selected now<", ">Replay this job<", ">Release<",
                       ">Pause<", ">Cancel<", "Start replay", "Discard the set"}


def test_role_change_takes_effect_at_once(web):
    c = web.client("operator")
    made = populate(web)
    web.svc.users.set_role("operator", "viewer")
    assert post(c, f"/dlq/default/{made['dead']}/replay").status_code == 302  # session ended
    login(c, "operator")
    assert post(c, f"/dlq/default/{made['dead']}/replay").status_code == 403


# -- CSRF ---------------------------------------------------------------------------------------
def test_post_without_or_with_wrong_csrf_is_refused_and_audited(web):
    made = populate(web)
    c = web.client("operator")
    for data in ({}, {"csrf_token": "forged"}):
        resp = c.post(f"/dlq/default/{made['dead']}/replay", data={**data, "reason": "r"})
        assert resp.status_code == 400 and "CSRF" in resp.get_data(as_text=True)
    resp = c.post("/api/queues/default/jobs/x/replay", json={})
    assert resp.status_code == 400 and "CSRF" in resp.get_json()["error"]
    assert web.svc.reads.count_dead("default") == 1
    refused = [e for e in web.audit("dlq.replay") if e.outcome == "refused"]
    assert len(refused) == 2 and refused[0].detail["status"] == 400
    # the header form (htmx sends it from the meta tag) is accepted
    resp = c.post(f"/dlq/default/{made['dead']}/replay", headers={"X-CSRF-Token": _csrf(c)})
    assert resp.status_code == 303
    assert web.svc.reads.count_dead("default") == 0


def test_no_get_changes_state(web):
    made = populate(web)
    c = web.client("admin")
    adapter = web.app.url_map.bind("localhost")
    for url in _post_urls(web.app, made):
        try:
            endpoint, _ = adapter.match(url, method="GET")
        except Exception:  # noqa: BLE001 - 405/404: no GET view at all
            endpoint = None
        if endpoint:  # a GET view shares the path: it must be a read-only one
            rules = [r for r in web.app.url_map.iter_rules() if r.endpoint == endpoint]
            assert all("POST" not in r.methods for r in rules), url
        assert c.get(url).status_code < 500, url
    assert web.svc.reads.count_dead("default") == 1


# -- actions ------------------------------------------------------------------------------------
def test_replay_one_and_discard_one(web):
    a, b = web.dead_job(), web.dead_job()
    c = web.client("operator")
    resp = post(c, f"/dlq/default/{a}/replay", {"reason": "smtp fixed"})
    assert resp.status_code == 303
    assert web.q.where(a) == ["ready"]
    job = web.q.get(a)
    assert job.attempt == 0 and job.idempotency_key.startswith("email:")
    page = c.get("/dlq/").get_data(as_text=True)
    assert "replayed" in page  # flashed
    (entry,) = web.audit("dlq.replay")
    assert (entry.user, entry.role, entry.outcome, entry.reason) == (
        "operator", "operator", "ok", "smtp fixed")
    assert entry.detail["dead_before"] == 2 and entry.detail["dead_after"] == 1
    assert entry.target == f"default/{a}"
    post(c, f"/dlq/default/{b}/discard", {"reason": "junk"})
    assert web.q.get(b) is None
    again = post(c, f"/dlq/default/{b}/discard", {"reason": "junk"}, follow_redirects=True)
    assert "not in the dead-letter queue" in again.get_data(as_text=True)
    assert [e.outcome for e in web.audit("dlq.discard")] == ["failed", "ok"]


def test_replay_warns_for_not_idempotent_handlers(web):
    web.svc.antre.handler("charge", idempotent=False)(lambda ctx, p: None)
    job_id = web.dead_job(job_type="charge")
    c = web.client("operator")
    assert "marked not idempotent" in c.get(f"/dlq/default/{job_id}").get_data(as_text=True)
    assert "not idempotent" in c.get("/dlq/").get_data(as_text=True)
    resp = post(c, f"/dlq/default/{job_id}/replay", follow_redirects=True)
    assert "Warning: handler" in resp.get_data(as_text=True)


def test_run_now(web):
    populate(web)
    sched = web.svc.reads.scheduled("default").rows[0].id
    c = web.client("operator")
    post(c, f"/scheduled/default/{sched}/run-now", {"reason": "try again"})
    assert web.q.where(sched) == ["ready"]
    assert web.audit("scheduled.run_now")[0].outcome == "ok"


def test_extend_lease_and_wrong_epoch(web):
    web.q.enqueue("email", {}, idempotency_key="k", visibility_timeout_s=30)
    (job,) = web.q.reserve("w1")
    c = web.client("operator")
    before = web.q.get(job.id).deadline
    resp = post(c, f"/inflight/default/{job.id}/extend",
                {"epoch": job.epoch, "seconds": 60, "reason": "slow batch"},
                follow_redirects=True)
    assert "extended by 60s" in resp.get_data(as_text=True)
    assert web.q.get(job.id).deadline == before + 60_000
    entry = web.audit("inflight.extend")[0]
    assert entry.detail["deadline_after"] == before + 60_000
    resp = post(c, f"/inflight/default/{job.id}/extend",
                {"epoch": job.epoch + 1, "seconds": 60}, follow_redirects=True)
    text = resp.get_data(as_text=True)
    assert "the lease changed under you (job was re-delivered/finished); nothing was changed" in text
    assert web.q.get(job.id).deadline == before + 60_000
    assert web.audit("inflight.extend")[0].outcome == "failed"


def test_force_release_lock(web):
    lock = web.producer.locks.acquire("order:9", 30_000, owner="w1")
    c = web.client("operator")
    resp = post(c, "/locks/release", {"key": "order:9", "token": lock.token, "confirm": "nope"},
                follow_redirects=True)
    assert "not confirmed" in resp.get_data(as_text=True)
    assert web.svc.locks.held()[0].key == "order:9"
    # a lock re-taken since the page was shown is not released
    web.svc.locks.release_token("order:9", lock.token)
    newer = web.producer.locks.acquire("order:9", 30_000, owner="w2")
    resp = post(c, "/locks/release", {"key": "order:9", "token": lock.token,
                                      "confirm": "order:9"}, follow_redirects=True)
    assert "no longer held by that token" in resp.get_data(as_text=True)
    assert web.svc.locks.held()[0].holder == newer.token
    post(c, "/locks/release", {"key": "order:9", "token": newer.token, "confirm": "release",
                               "reason": "stuck worker"})
    assert web.svc.locks.held() == []
    assert [e.outcome for e in web.audit("locks.release")] == ["ok", "failed", "refused"]


def test_bulk_replay_start_pause_resume_cancel(web):
    for _ in range(10):
        web.dead_job(job_type="sms")
    web.dead_job(job_type="email")
    c = web.client("operator")
    dlq = c.get("/dlq/?type=sms").get_data(as_text=True)
    assert "Dry run: <strong>10 dead jobs</strong>" in dlq
    resp = post(c, "/dlq/default/bulk", {"type": "sms", "rate": 2, "maximum": 8,
                                         "reason": "provider back"}, follow_redirects=True)
    assert "bulk replay" in resp.get_data(as_text=True)
    (task,) = web.svc.bulk.list("default")
    assert task.total == 10 and task.maximum == 8 and task.user == "operator"
    web.clock.advance(1000)
    assert web.svc.bulk.step_all() == 2
    tasks = c.get("/dlq/tasks?queue=default", headers=htmx()).get_data(as_text=True)
    assert 'value="2"' in tasks and "2 replayed / 8" in tasks and ">Pause<" in tasks
    post(c, f"/dlq/default/bulk/{task.id}/pause", {"reason": "watching"})
    web.clock.advance(3000)
    assert web.svc.bulk.step_all() == 0
    post(c, f"/dlq/default/bulk/{task.id}/resume")
    web.clock.advance(1000)
    assert web.svc.bulk.step_all() == 2
    post(c, f"/dlq/default/bulk/{task.id}/cancel")
    assert web.svc.bulk.get("default", task.id).state == "cancelled"
    again = post(c, f"/dlq/default/bulk/{task.id}/resume", follow_redirects=True)
    assert "cannot set it running" in again.get_data(as_text=True)
    actions = [e.action for e in web.audit() if e.action.startswith("dlq.bulk_replay")]
    assert actions == ["dlq.bulk_replay.resume", "dlq.bulk_replay.cancel",
                       "dlq.bulk_replay.resume", "dlq.bulk_replay.pause",
                       "dlq.bulk_replay.start"]
    start = web.audit("dlq.bulk_replay.start")[0]
    assert start.detail["dry_run"] == 10 and "type=sms" in start.target
    assert web.svc.reads.count_dead("default") == 7


def test_discard_filtered_needs_typed_confirmation(web):
    for _ in range(3):
        web.dead_job(job_type="sms")
    keep = web.dead_job(job_type="email")
    c = web.client("operator")
    resp = post(c, "/dlq/default/discard-filtered", {"type": "sms", "confirm": "yes"},
                follow_redirects=True)
    assert "not confirmed" in resp.get_data(as_text=True)
    assert web.svc.reads.count_dead("default") == 4
    post(c, "/dlq/default/discard-filtered", {"type": "sms", "confirm": "3", "reason": "spam"})
    assert web.svc.reads.count_dead("default") == 1
    assert web.svc.reads.dead("default").rows[0].id == keep
    entry = web.audit("dlq.discard_filtered")[0]
    assert entry.detail["dead_before"] == 4 and entry.detail["dead_after"] == 1
    post(c, "/dlq/default/discard-filtered", {"confirm": "DISCARD"})
    assert web.svc.reads.count_dead("default") == 0


def test_users_admin(web):
    c = web.client("admin")
    assert "operator" in c.get("/users/").get_data(as_text=True)
    post(c, "/users/add", {"name": "dana", "role": "viewer", "password": "dana-password-1",
                             "reason": "new"})
    assert web.svc.users.get("dana").role == "viewer"
    post(c, "/users/dana/role", {"role": "operator"})
    assert web.svc.users.get("dana").role == "operator"
    resp = post(c, "/users/admin/delete", follow_redirects=True)
    assert "cannot delete yourself" in resp.get_data(as_text=True)
    post(c, "/users/dana/delete")
    assert web.svc.users.get("dana") is None
    assert [e.action for e in web.audit() if e.action.startswith("users.")] == [
        "users.delete", "users.delete", "users.set_role", "users.add"]


def test_disabling_a_user_ends_their_session_and_logins_until_enabled(web):
    from webtools import basic
    admin, op = web.client("admin"), web.client("operator")
    assert op.get("/").status_code == 200
    assert post(admin, "/users/operator/disable", {"reason": "left the team"}).status_code == 303
    assert web.svc.users.get("operator").disabled
    assert op.get("/").status_code == 302  # the open session ends on its next request
    assert "Enable</button>" in admin.get("/users/").get_data(as_text=True)
    again = web.app.test_client()
    login(again, "operator")
    assert again.get("/").status_code == 302  # and logging in again is refused
    assert web.app.test_client().get("/api/overview", headers=basic("operator")).status_code == 401
    resp = post(admin, "/users/admin/disable", follow_redirects=True)
    assert "cannot disable yourself" in resp.get_data(as_text=True)
    assert not web.svc.users.get("admin").disabled
    assert post(web.client("viewer"), "/users/operator/enable").status_code == 403
    post(admin, "/users/operator/enable", {"reason": "back"})
    assert web.client("operator").get("/").status_code == 200
    entries = [(e.action, e.target, e.outcome) for e in web.audit()
               if e.action in ("users.disable", "users.enable")]
    assert entries == [("users.enable", "operator", "ok"), ("users.enable", "operator", "refused"),
                       ("users.disable", "admin", "refused"),
                       ("users.disable", "operator", "ok")]


def test_idempotency_lookup(web):
    from antre.stores.idempotency import fingerprint
    web.svc.idempotency.begin("email:1", fingerprint("email", {}), "email", "j1", 3, "w1",
                              web.clock() + 30_000)
    body = web.client("viewer").get("/idempotency/?key=email:1").get_data(as_text=True)
    assert "processing" in body and "j1" in body and "Fence" in body
    body = web.client("viewer").get("/idempotency/?key=nope").get_data(as_text=True)
    assert "No idempotency record" in body


def test_audit_filter_paginate_and_export(web):
    made = populate(web)
    c = web.client("operator")
    post(c, f"/dlq/default/{made['dead']}/replay", {"reason": "=cmd|' /C calc'!A0"})
    body = c.get("/audit/?action=dlq.replay").get_data(as_text=True)
    assert "dlq.replay" in body and "login" not in body.split("<tbody>")[1]
    csv_resp = c.get("/audit/export.csv?action=dlq.replay")
    assert csv_resp.mimetype == "text/csv"
    lines = csv_resp.get_data(as_text=True).splitlines()
    assert lines[0].startswith('"id","at","user"') and "'=cmd" in lines[1]
    data = c.get("/audit/export.json").get_json()
    assert any(e["action"] == "dlq.replay" and e["reason"].startswith("=cmd") for e in data)
    for i in range(60):
        web.svc.audit.record("x", "viewer", "test.noise", str(i), None, "ok")
    page = c.get("/audit/?limit=50").get_data(as_text=True)
    assert "older →" in page and "of 6" in page


def test_audit_time_window_narrows_page_api_and_exports(web):
    c = web.client("viewer")
    web.svc.audit.record("ops", "operator", "test.old", "t-old", None, "ok")
    web.clock.advance(2 * 3_600_000)  # two hours later
    web.svc.audit.record("ops", "operator", "test.new", "t-new", None, "ok")
    page = c.get("/audit/?window=1h").get_data(as_text=True)
    assert "test.new" in page.split("<tbody>")[1] and "t-old" not in page
    assert 'value="1h" selected' in page and "window=1h" in page  # kept in the export links
    assert "t-old" in c.get("/audit/?window=6h").get_data(as_text=True)
    entries = c.get("/api/audit?window=1h").get_json()
    assert [e["target"] for e in entries["entries"] if e["action"].startswith("test.")] == ["t-new"]
    cut = web.clock() - 3_600_000
    older = c.get(f"/api/audit?until_ms={cut}&action=test.old").get_json()
    assert older["total"] == 1 and older["entries"][0]["target"] == "t-old"
    assert "t-old" not in c.get("/audit/export.csv?window=1h").get_data(as_text=True)
    assert [e["target"] for e in c.get(f"/audit/export.json?since_ms={cut}").get_json()
            if e["action"].startswith("test.")] == ["t-new"]
    assert c.get("/api/audit?since_ms=yesterday").status_code == 400
    assert c.get("/api/audit?until_ms=99999999999999999999").status_code == 400


def test_a_page_without_a_queue_opens_the_busiest_one(web):
    web.dead_job()
    other = web.producer.queue("billing")
    for i in range(2):
        other.enqueue("charge", {}, idempotency_key=f"c{i}")
        (job,) = other.reserve("w1")
        other.bury(job, reason="card declined")
    c = web.client("viewer")
    resp = c.get("/dlq/")
    assert resp.status_code == 302 and "queue=billing" in resp.headers["Location"]
    assert c.get("/dlq/?queue=default").status_code == 200  # an explicit queue is kept
