"""Incident controls with real worker processes. A pause holds across two of them: none of the paused queue's (or job type's)
jobs start while paused, a job already in flight finishes, and after the resume every job runs
once, none lost, no attempt spent."""

from __future__ import annotations

import pytest

from test_worker_process import app, child, wait_for  # noqa: F401 - fixtures

from antre.control.pause import Pauses

pytestmark = pytest.mark.slow


def drained_wake(r, q) -> bool:
    """Idle workers take the wake tokens an enqueue leaves and call reserve: once the list is
    empty, both processes have looked at the queue since the enqueue."""
    return r.llen(q.keys.wake) == 0


def test_pause_holds_across_two_worker_processes(app, r, tmp_path, procs):  # noqa: F811
    q = app.queue()
    pauses = Pauses(app.redis)
    slow_id = q.enqueue("slow", {"seconds": 1.0}, idempotency_key="slow:1")
    procs.extend(child(app.redis_url, tmp_path, "--threads", "2") for _ in range(2))
    wait_for(lambda: r.llen("test:started") == 1, 20, "the slow job to start")
    pauses.pause("default", None, "test", "incident drill")
    ids = [q.enqueue("echo", {"i": i}, idempotency_key=f"e:{i}") for i in range(20)]
    wait_for(lambda: r.llen("test:done") == 1, 20, "the job in flight to finish")
    for _ in range(3):  # several rounds of both workers looking and finding nothing
        ids.append(q.enqueue("echo", {"i": "wake"}, idempotency_key=f"wake:{len(ids)}"))
        wait_for(lambda: drained_wake(r, q), 20, "the workers to look at the queue")
    assert r.lrange("test:done", 0, -1)[0].startswith(f"{slow_id}:1:")
    assert r.llen("test:done") == 1  # nothing of the paused queue started
    assert all(q.get(i).deliveries == 0 for i in ids)
    assert q.get(slow_id).state == "done"

    # now only the job type 'echo' is paused: 'slow' jobs run, echo jobs are parked
    pauses.pause("default", "echo", "test", "echo is broken")
    pauses.resume("default", None)
    others = [q.enqueue("slow", {"seconds": 0}, idempotency_key=f"s:{i}") for i in range(4)]
    wait_for(lambda: all(q.get(i).state == "done" for i in others), 20, "the other type to run")
    assert r.llen("test:done") == 5  # 1 slow + 4 slow, no echo

    pauses.resume("default", "echo")
    wait_for(lambda: r.llen("test:done") == 5 + 23, 30, "every echo job to run")
    done_ids = {line.split(":")[0] for line in r.lrange("test:done", 0, -1)}
    states = {q.get(i).id: (q.get(i).state, q.get(i).deliveries, q.get(i).attempt) for i in ids}
    assert set(ids) <= done_ids
    assert set(states.values()) == {("done", 1, 0)}  # once each, no attempt spent
    assert len(ids) == 23
    assert all(p.poll() is None for p in procs)  # both processes ran all along


def test_cancel_abandons_a_handler_that_ignores_it_in_a_real_worker(app, r, tmp_path,  # noqa: F811
                                                                    procs):
    from antre.control.cancel import Cancels
    from antre_worker.runner import EXIT_RECYCLE

    q = app.queue()
    job_id = q.enqueue("ignores_cancel", {}, idempotency_key="ic:1")
    p = child(app.redis_url, tmp_path)
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, 20, "the handler to start")
    Cancels(app.redis).request("default", job_id, "oncall", "dlq", "runaway export")
    assert p.wait(20) == EXIT_RECYCLE  # abandoned after 0.5 s of grace, process recycled
    job = q.get(job_id)
    assert (job.state, job.reason, job.attempt) == (
        "dead", "cancelled by oncall: runaway export", 0)
    assert q.where(job_id) == ["dead"] and r.llen("test:done") == 0


def test_a_worker_restarted_during_the_cancel_grace_never_runs_the_job_again(  # noqa: F811
        app, r, tmp_path, procs):
    """The stopping worker's hand-back ends the cancelled job (retry.lua), so the
    next worker finds nothing to run, and the job's timeline ends with the cancel."""
    from antre.control.cancel import Cancels
    from antre.observe.finder import Finder

    q = app.queue()
    job_id = q.enqueue("ignores_cancel_long", {}, idempotency_key="icl:1")
    p = child(app.redis_url, tmp_path, "--grace", "0.3")
    procs.append(p)
    wait_for(lambda: r.llen("test:started") == 1, 20, "the handler to start")
    Cancels(app.redis).request("default", job_id, "oncall", "dlq", "runaway report")
    log = tmp_path / "worker.log"
    wait_for(lambda: "has 600s to stop" in log.read_text(), 20, "the heartbeat to see it")
    p.terminate()  # restarted within the 600 s grace
    assert p.wait(20) is not None
    p2 = child(app.redis_url, tmp_path)
    procs.append(p2)
    echo = q.enqueue("echo", {}, idempotency_key="icl:echo")  # the new worker is at work
    wait_for(lambda: q.get(echo).state == "done", 20, "the new worker to run a job")
    job = q.get(job_id)
    assert (job.state, job.reason, job.attempt) == ("dead", "cancelled by oncall: runaway report", 0)
    assert r.llen("test:started") == 1  # never ran again
    events = Finder(app.redis).timeline("default", job_id).events
    assert [e.kind for e in events].count("reserved") == 1
    assert events[-1].kind == "cancelled" and events[-1].details["by"] == "oncall"
    assert any(e.kind == "cancel_requested" and e.details["reason"] == "runaway report"
               for e in events)
