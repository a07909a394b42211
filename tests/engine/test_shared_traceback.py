"""A dead job's traceback is stored once per error group. The group keeps the
traceback's head (every line but the last) in ``QueueKeys.error_tracebacks``; each job keeps its
last line and ``tb_group`` in its ``errors`` entry and in its ``buried`` event, and the pages'
readers (``ReadModels.job``, ``Finder.timeline``) show the whole text, as before. A job written
by the previous version (whole tracebacks, the ``traceback`` field) still retries, buries and
shows its tracebacks; and reserve reads a redelivered job's counters (it reads them only when
the job has an epoch)."""

from __future__ import annotations

import json

from antre.maintenance.retention import Retention, RetentionPolicy
from antre.engine.queue import JobSpec, Queue
from antre.observe.finder import Finder
from antre.observe.readmodels import ReadModels

FRAMES = "".join(f'  File "/srv/app/billing.py", line {10 + i}, in step_{i}\n    do_{i}()\n'
                 for i in range(6))
HEAD = "Traceback (most recent call last):\n" + FRAMES.rstrip("\n")


def _tb(i: int) -> str:
    return f"{HEAD}\nantre.errors.Permanent: card declined for order {i}\n"


def _bury(q: Queue, n: int, tb=_tb) -> list[str]:
    q.enqueue_many([JobSpec("charge", {"i": i}, f"k{i}") for i in range(n)])
    jobs = sorted(q.reserve("w1", count=n), key=lambda j: j.payload["i"])
    for job in jobs:
        q.bury(job, reason="permanent error: card declined", error="card declined",
               kind="permanent", traceback=tb(job.payload["i"]),
               signature="permanent: card declined for order <n>")
    return [j.id for j in jobs]


def _stored_errors(q: Queue, job_id: str) -> list[dict]:
    return json.loads(q.redis.hget(q.keys.job(job_id), "errors"))


def test_a_group_keeps_the_head_once_and_the_pages_show_each_whole_traceback(r, clock, q):
    ids = _bury(q, 3)
    heads = r.hgetall(q.keys.error_tracebacks)
    assert list(heads.values()) == [HEAD]  # one copy for the three jobs
    group = next(iter(heads))
    reads, finder = ReadModels(r, clock), Finder(r, clock)
    for i, job_id in enumerate(ids):
        entry = _stored_errors(q, job_id)[-1]
        assert entry["traceback"] == f"antre.errors.Permanent: card declined for order {i}\n"
        assert entry["tb_group"] == group and HEAD not in r.hget(q.keys.job(job_id), "errors")
        job = reads.job(q.name, job_id)
        assert job.traceback == _tb(i) and job.errors[-1]["traceback"] == _tb(i)
        assert "tb_group" not in job.errors[-1]
        buried = [e for e in finder.timeline(q.name, job_id).events if e.kind == "buried"]
        assert buried[0].details["traceback"] == _tb(i)[-2000:]
        assert "tb_group" not in buried[0].details
        assert HEAD not in "".join(r.lrange(q.keys.timeline(job_id), 0, -1))


def test_a_head_unlike_its_groups_or_short_stays_with_the_job(r, clock, q):
    first = _bury(q, 1)[0]
    other = _bury(q, 2, tb=lambda i: _tb(i).replace("step_3", "step_x"))[1]
    assert r.hlen(q.keys.error_tracebacks) == 1
    entry = _stored_errors(q, other)[-1]
    assert "tb_group" not in entry and entry["traceback"] == _tb(1).replace("step_3", "step_x")
    assert ReadModels(r, clock).job(q.name, other).traceback == entry["traceback"]
    assert ReadModels(r, clock).job(q.name, first).traceback == _tb(0)
    short = Queue(r, "short", clock=clock)
    sid = _bury(short, 1, tb=lambda i: "Traceback:\n  x\nValueError: no\n")[0]
    assert r.hlen(short.keys.error_tracebacks) == 0
    assert _stored_errors(short, sid)[-1]["traceback"] == "Traceback:\n  x\nValueError: no\n"


def test_retention_removes_the_head_with_its_group_and_a_lost_head_says_so(r, clock, q):
    ids = _bury(q, 2)
    r.hdel(q.keys.error_tracebacks, *r.hkeys(q.keys.error_tracebacks))  # (as if gone)
    job = ReadModels(r, clock).job(q.name, ids[0])
    assert "kept with its error group, since removed" in job.traceback
    assert job.traceback.endswith("card declined for order 0\n")
    _bury(q, 1)  # the head stored again
    clock.advance(40 * 86_400_000)
    Retention(r, clock=clock).run(q.name, RetentionPolicy(dead_max_age_s=86_400))
    assert r.zcard(q.keys.dead) == 0 and r.hlen(q.keys.error_groups) == 0
    assert r.hlen(q.keys.error_tracebacks) == 0


def test_a_job_stored_by_the_previous_version_retries_buries_and_shows_its_tracebacks(
        r, clock, q):
    """An in-flight job as an older version left it: a 'traceback' field, whole
    tracebacks in 'errors', every field of its layout; the new scripts settle it."""
    q.enqueue_many([JobSpec("charge", {"i": 0}, "k0")])
    job = q.reserve("w1", count=1)[0]
    old_tb = "Traceback (most recent call last):\n  old frames\nTimeoutError: 504\n"
    r.hset(q.keys.job(job.id), mapping={
        "traceback": old_tb, "attempt": 1, "first_failed_at": clock() - 5,
        "errors": json.dumps([{"at": clock() - 5, "kind": "retryable", "error": "504",
                               "traceback": old_tb, "attempt": 0, "delivery": 1,
                               "worker": "w0"}])})
    assert not q.retry(job, delay_ms=0, error="TimeoutError: 504 again", kind="retryable",
                       traceback=_tb(7))  # (True: it was cancelled instead)
    again = q.reserve("w1", count=1)[0]  # redelivered: its counters come with the reserve
    assert (again.id, again.attempt, again.deliveries, again.epoch) == (job.id, 2, 2, 2)
    assert again.first_failed_at == clock() - 5
    q.bury(again, reason="permanent error", error="card declined", kind="permanent",
           traceback=_tb(8), signature="permanent: card declined for order <n>")
    shown = ReadModels(r, clock).job(q.name, job.id)
    assert shown.state == "dead"
    assert [e["traceback"] for e in shown.errors] == [old_tb, _tb(7), _tb(8)]
    assert shown.traceback == _tb(8)
    kinds = [e.kind for e in Finder(r, clock).timeline(q.name, job.id).events]
    assert kinds == ["enqueued", "reserved", "failed", "reserved", "buried"]
