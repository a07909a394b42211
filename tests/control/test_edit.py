"""``replay_edited.lua`` and ``antre.control.edit`` on a real Redis: the job
moves dead -> ready with the edited payload in one script; a new key takes the key index; a
unique job keeps its key; a job not in the DLQ is left alone."""

from __future__ import annotations

from antre.control.edit import ReplayEdits, plan


def _dead(q, key="k:1", unique=False):
    job_id = q.enqueue("t", {"v": 1}, idempotency_key=key, unique=unique)
    (job,) = q.reserve("w1")
    q.bury(job, reason="permanent failure", error="boom", traceback="")
    return job_id


def test_the_payload_changes_and_the_original_goes_on_the_timeline(q):
    job_id = _dead(q)
    assert q.replay_edited(job_id, {"v": 2}, "", "ops", {"original_payload": {"v": 1}}) == 1
    job = q.get(job_id)
    assert (job.state, job.payload, job.attempt, job.idempotency_key) == ("ready", {"v": 2}, 0,
                                                                          "k:1")
    assert q.replay_edited(job_id, {"v": 3}, "", "ops") == 0  # not dead any more
    assert q.get(job_id).payload == {"v": 2}
    (reserved,) = q.reserve("w2")
    assert reserved.payload == {"v": 2}


def test_a_new_key_takes_the_index_and_a_unique_job_keeps_its_own(q):
    job_id = _dead(q, "k:2")
    assert q.replay_edited(job_id, {"v": 2}, "k:2b", "ops") == 1
    assert q.get(job_id).idempotency_key == "k:2b"
    assert q.redis.hget(q.keys.idem_index, "k:2b") == job_id
    assert q.redis.hget(q.keys.idem_index, "k:2") is None
    assert [j.id for j in q.reserve("w2")] == [job_id]  # out of the way of the next one
    unique_id = _dead(q, "k:3", unique=True)
    assert q.replay_edited(unique_id, {"v": 2}, "k:3b", "ops") == -1
    assert q.get(unique_id).state == "dead" and q.get(unique_id).payload == {"v": 1}


def test_the_plan_refuses_bad_json_and_a_live_job(q):
    job_id = _dead(q, "k:4")
    job = q.get(job_id)
    bad = plan("default", job, "{nope", "", None, True, False)
    assert not bad.ok and "not JSON" in bad.problems[0]
    good = plan("default", job, '{"v": 2}', "", None, True, False)
    assert good.ok and good.changed and any(line.startswith("+") for line in good.diff)
    assert ReplayEdits(q).replay(good, "ops", "fix") == 1
    again = plan("default", q.get(job_id), '{"v": 3}', "", None, True, False)
    assert not again.ok and "not in the dead-letter queue" in again.problems[0]
