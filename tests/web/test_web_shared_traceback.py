"""A dead job keeps only its traceback's last line when its error group holds the
rest (tests/engine/test_shared_traceback.py); the DLQ's job page (its errors and its timeline)
and the API still show each job's whole traceback, escaped."""

from __future__ import annotations

from markupsafe import escape

HEAD = "Traceback (most recent call last):\n" + "".join(
    f'  File "/srv/app/pay.py", line {i}, in step_{i}\n    charge(<card>)\n' for i in range(8))


def _bury(web, i: int) -> str:
    q = web.q
    job_id = q.enqueue("charge", {"i": i}, idempotency_key=f"tb:{i}")
    (job,) = q.reserve("w1")
    q.bury(job, reason="permanent error: card declined", error="card declined",
           kind="permanent", traceback=f"{HEAD.rstrip()}\nDeclined: order {i} <b>05</b>\n",
           signature="permanent: card declined for order <n>")
    return job_id


def test_the_job_page_and_the_api_show_the_whole_shared_traceback(web):
    ids = [_bury(web, i) for i in range(2)]
    r = web.q.redis
    assert r.hlen(web.q.keys.error_tracebacks) == 1  # the head, once for both jobs
    assert "step_3" not in r.hget(web.q.keys.job(ids[1]), "errors")
    c = web.client("viewer")
    for i, job_id in enumerate(ids):
        whole = f"{HEAD.rstrip()}\nDeclined: order {i} <b>05</b>\n"
        page = c.get(f"/dlq/default/{job_id}").get_data(as_text=True)
        assert page.count(str(escape(whole)).rstrip()) >= 2  # errors + timeline
        assert "<b>05</b>" not in page and "tb_group" not in page
        api = c.get(f"/api/queues/default/jobs/{job_id}").get_json()
        assert api["job"]["traceback"] == whole
        assert api["job"]["errors"][-1]["traceback"] == whole
