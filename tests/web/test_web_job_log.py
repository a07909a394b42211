"""A job's own log: what its handler wrote with ``ctx.log`` and its ``logging`` records, run
by a real worker on a real Redis, shown on the job page (escaped) and in the JSON API in the
order it was logged, bounded with a marker, redacted, retired with the job, and no key at all
for a handler that logged nothing."""

from __future__ import annotations

import logging

from helpers import burst
from webtools import basic

from antre.engine import keys
from antre.maintenance.retention import Retention, RetentionPolicy
from antre.observe import joblog

handler_log = logging.getLogger("shop.billing")
handler_log.setLevel(logging.INFO)


def test_three_lines_show_on_the_job_page_and_in_the_api_in_order(web):
    @web.producer.handler("bill")
    def bill(ctx, payload):
        ctx.log("charging %s", payload["who"])
        handler_log.warning("card <b>declined</b> once, retrying at https://u:hunter22@pay.example/x")
        ctx.log("charged token=abc123 ok")

    job_id = web.q.enqueue("bill", {"who": "ada"}, idempotency_key="bill:1")
    burst(web.producer, web.clock)
    page = web.client("viewer").get(f"/jobs/default/{job_id}").get_data(as_text=True)
    section = page[page.index('id="joblog"'):]
    first, second, third = (section.index(t) for t in
                            ("charging ada", "card &lt;b&gt;declined&lt;/b&gt; once", "charged token=***"))
    assert first < second < third
    assert "<b>declined</b>" not in page and "hunter22" not in page and "abc123" not in page
    assert "shop.billing" in section  # the logging record's logger is named
    api = web.client().get(f"/api/queues/default/jobs/{job_id}", headers=basic("viewer")).get_json()
    texts = [line["text"] for line in api["log"]]
    assert texts == ["charging ada",
                     "card <b>declined</b> once, retrying at https://u:***@pay.example/x",
                     "charged token=*** ok"]
    assert [line["level"] for line in api["log"]] == ["INFO", "WARNING", "INFO"]
    assert {line["attempt"] for line in api["log"]} == {1}


def test_an_over_long_log_is_cut_with_a_marker(web):
    @web.producer.handler("chatty")
    def chatty(ctx, payload):
        for i in range(joblog.MAX_LINES + 50):
            ctx.log("line %d", i)

    job_id = web.q.enqueue("chatty", {}, idempotency_key="chatty:1")
    burst(web.producer, web.clock)
    lines = web.svc.reads.job_log("default", job_id)
    assert len(lines) == joblog.MAX_LINES + 1
    assert lines[0].text == "line 0" and lines[-2].text == f"line {joblog.MAX_LINES - 1}"
    assert lines[-1].marker and "50 more line(s)" in lines[-1].text
    page = web.client("viewer").get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert "50 more line(s)" in page


def test_a_long_line_is_cut_and_the_bytes_are_bounded(web):
    @web.producer.handler("wide")
    def wide(ctx, payload):
        for _ in range(40):
            ctx.log("x" * 5000)

    job_id = web.q.enqueue("wide", {}, idempotency_key="wide:1")
    burst(web.producer, web.clock)
    raw = web.producer.redis.get(keys.of_job("default", job_id).job_log(job_id))
    assert len(raw) < joblog.MAX_BYTES + 1000
    lines = web.svc.reads.job_log("default", job_id)
    assert len(lines[0].text) == joblog.MAX_LINE_CHARS and lines[0].text.endswith("…")
    assert lines[-1].marker


def test_a_handler_that_logs_nothing_has_no_log_key(web):
    @web.producer.handler("quiet")
    def quiet(ctx, payload):
        logging.getLogger("antre.something").warning("the worker's own records are not the job's")
        return 1

    job_id = web.q.enqueue("quiet", {}, idempotency_key="quiet:1")
    burst(web.producer, web.clock)
    k = keys.of_job("default", job_id)
    assert web.producer.redis.hget(k.job(job_id), "state") == "done"
    assert not web.producer.redis.exists(k.job_log(job_id))
    assert web.producer.redis.keys(f"{k.job_log_prefix}*") == []
    page = web.client("viewer").get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert "The handler logged nothing." in page


def test_every_attempt_logs_and_the_log_goes_with_the_job(web):
    @web.producer.handler("flaky")
    def flaky(ctx, payload):
        ctx.log("attempt %d starts", ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("boom")

    job_id = web.q.enqueue("flaky", {}, idempotency_key="flaky:1", max_attempts=3)
    w, _ = burst(web.producer, web.clock)
    web.clock.advance(120_000)
    w.run_burst()
    lines = web.svc.reads.job_log("default", job_id)
    assert [(line.attempt, line.text) for line in lines] == [(1, "attempt 1 starts"),
                                                              (2, "attempt 2 starts")]
    k = keys.of_job("default", job_id)
    assert web.producer.redis.hget(k.job(job_id), "state") == "done"
    web.clock.advance(40 * 86_400_000)
    Retention(web.producer.redis, clock=web.clock).run("default", RetentionPolicy(done_max_age_s=86_400))
    assert not web.producer.redis.exists(k.job(job_id))
    assert not web.producer.redis.exists(k.job_log(job_id))


def test_an_async_handler_logs_into_its_own_job_only(web):
    @web.producer.handler("fetch")
    async def fetch(ctx, payload):
        ctx.log("fetching %s", payload["n"])
        handler_log.info("fetched %s", payload["n"])

    ids = [web.q.enqueue("fetch", {"n": n}, idempotency_key=f"fetch:{n}") for n in range(3)]
    burst(web.producer, web.clock, concurrency=4)
    for n, job_id in enumerate(ids):
        assert [line.text for line in web.svc.reads.job_log("default", job_id)] == [
            f"fetching {n}", f"fetched {n}"]


def test_the_log_of_an_encrypted_job_is_for_admins_only(web, monkeypatch):
    import base64
    import os

    import antre

    ring = "v1:" + base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("ANTRE_PAYLOAD_KEYS", ring)
    app = antre.Antre(redis_url=web.producer.redis_url, clock=web.clock, payload_keys=ring,
                      encrypt=True)

    @app.handler("charge")
    def charge(ctx, payload):
        ctx.log("charging card %s", payload["card"])

    job_id = app.enqueue("charge", {"card": "4111-secret"}, idempotency_key="c:1")
    burst(app, web.clock)
    viewer = web.client("viewer")
    page = viewer.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert "4111-secret" not in page and "1 line(s) hidden: the job&#39;s payload is encrypted" in page
    api = viewer.get(f"/api/queues/default/jobs/{job_id}").get_json()
    assert api["log"] == [] and api["log_hidden"]
    admin = web.client("admin").get(f"/api/queues/default/jobs/{job_id}").get_json()
    assert [line["text"] for line in admin["log"]] == ["charging card 4111-secret"]
