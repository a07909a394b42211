"""A handler's ``ctx.progress`` in the dashboard: the job page's bar and text (in its
live region, so it refreshes while the job runs), the in-flight list's column, the JSON API's
job, job-status and result endpoints; the handler's message always escaped."""

from __future__ import annotations

from webtools import basic, htmx

MESSAGE = '<script>alert("x")</script> rows 4,000/10,000'


def running_with_progress(web, fraction: float = 0.4, message: str = MESSAGE) -> str:
    job_id = web.q.enqueue("import", {"file": "a.csv"}, idempotency_key="import:1")
    (job,) = web.q.reserve("w1")
    web.q.progress(job, fraction, message)
    return job_id


def test_the_job_page_shows_the_progress_bar_and_the_escaped_message(web):
    job_id = running_with_progress(web)
    c = web.client("viewer")
    page = c.get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert '<progress value="0.4000" max="1" aria-label="40% done">' in page
    assert "<strong>40%</strong>" in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; rows 4,000/10,000" in page
    assert '<script>alert("x")' not in page
    assert 'id="live"' in page and 'hx-trigger="every 2s' in page  # refreshed while it runs
    partial = c.get(f"/jobs/default/{job_id}", headers=htmx()).get_data(as_text=True)
    assert 'data-progress="0.4000"' in partial and "<html" not in partial


def test_a_job_without_progress_shows_none(web):
    job_id = web.q.enqueue("import", {}, idempotency_key="import:2")
    page = web.client("viewer").get(f"/jobs/default/{job_id}").get_data(as_text=True)
    assert "<dt>Progress</dt>" not in page and "<progress" not in page


def test_the_inflight_list_has_a_progress_column(web):
    job_id = running_with_progress(web, 0.75, "almost")
    other = web.q.enqueue("import", {}, idempotency_key="import:3")
    web.q.reserve("w2")
    page = web.client("viewer").get("/inflight/").get_data(as_text=True)
    assert "<th>Progress</th>" in page
    row = page[page.index(f'data-row="{job_id}"'):]
    row = row[:row.index("</tr>")]
    assert 'aria-label="75% done"' in row and "almost" in row
    row2 = page[page.index(f'data-row="{other}"'):]
    assert '<td data-label="Progress" class="progress-cell">—</td>' in row2[:row2.index("</tr>")]


def test_the_json_api_exports_the_progress(web):
    job_id = running_with_progress(web)
    c = web.client()
    auth = basic("viewer")
    job = c.get(f"/api/queues/default/jobs/{job_id}", headers=auth).get_json()["job"]
    assert (job["progress"]["fraction"], job["progress"]["message"]) == (0.4, MESSAGE)
    assert job["progress"]["at_ms"] == web.clock()
    status = c.get(f"/api/jobs/{job_id}", headers=auth).get_json()
    assert status["progress"]["fraction"] == 0.4
    result = c.get("/api/result", query_string={"key": "import:1"}, headers=auth).get_json()
    assert (result["status"], result["progress"]["message"]) == ("pending", MESSAGE)
