"""A queue spread over 3 partitions reads as one queue on the dashboard and its API:
counts summed, the DLQ merged, a job of partition 2 found by its id, replay / pause / purge
acting on every partition."""

from __future__ import annotations

import antre
from antre.engine import keys
from webtools import basic, post


def _spread(web):
    """A producer with partitions=3 (published for everyone): 6 ready jobs, 3 dead ones (one
    per partition), 1 in flight."""
    producer = antre.Antre(redis_url=web.producer.redis_url, clock=web.clock, partitions=3)
    ready = [producer.enqueue("email", {"i": i}, idempotency_key=f"r{i}") for i in range(6)]
    dead = []
    for i in range(3):
        job_id = producer.enqueue("email", {"to": f"d{i}@x"}, idempotency_key=f"d{i}")
        q = producer.job_queue("default", job_id)
        job = next(j for j in q.reserve("w1", count=10) if j.id == job_id)
        for other in q.reserve("w1", count=10):
            pass
        q.bury(job, reason="permanent failure", error="smtp down", traceback="Traceback: boom")
        web.clock.advance(5)
        dead.append(job_id)
    return producer, ready, dead


def test_a_partitioned_queue_reads_as_one(web):
    producer, ready, dead = _spread(web)
    assert sorted(keys.id_partition(i) for i in dead) == [0, 1, 2]
    c = web.client("viewer")
    info = web.svc.reads.queue_info("default")
    assert info.partitions == 3 and info.dead == 3
    api = c.get("/api/queues/default/dead", headers=basic("viewer")).get_json()
    assert sorted(r["id"] for r in api["rows"]) == sorted(dead) and api["total"] == 3
    groups = c.get("/api/queues/default/dead/groups", headers=basic("viewer")).get_json()
    assert [g["count"] for g in groups["groups"]] == [3]  # one error group, merged
    dlq = c.get("/dlq/").get_data(as_text=True)
    assert all(d in dlq for d in dead) and "Dry run: <strong>3 dead jobs</strong>" in dlq
    far = next(d for d in dead if keys.id_partition(d) == 2)
    page = c.get(f"/dlq/default/{far}").get_data(as_text=True)
    assert "Traceback: boom" in page and "d2@x" in page
    job = c.get(f"/api/queues/default/jobs/{far}", headers=basic("viewer")).get_json()
    assert job["job"]["id"] == far and job["job"]["state"] == "dead"
    found = c.get(f"/find?q={far}", follow_redirects=True).get_data(as_text=True)
    assert far in found


def test_actions_reach_every_partition(web):
    producer, ready, dead = _spread(web)
    c = web.client("operator")
    far = next(d for d in dead if keys.id_partition(d) == 2)
    assert post(c, f"/dlq/default/{far}/replay", {"reason": "smtp fixed"}).status_code == 303
    assert producer.job_queue("default", far).where(far) == ["ready"]
    (entry,) = web.audit("dlq.replay")
    assert entry.detail["dead_before"] == 3 and entry.detail["dead_after"] == 2
    post(c, "/queues/default/pause", {"reason": "drill"})
    for p in range(3):
        assert producer.queue("default", p).redis.hexists(keys.QueueKeys("default", p).paused,
                                                           "*")
    assert web.svc.reads.queue_info("default").queue_paused is not None
    post(c, "/queues/default/resume", {"reason": "over"})
    assert not any(producer.redis.hexists(keys.QueueKeys("default", p).paused, "*")
                   for p in range(3))
    timeline = c.get(f"/jobs/default/{far}").get_data(as_text=True)
    assert far in timeline and ("buried" in timeline or "dead" in timeline)


def test_a_flow_of_partition_2_has_its_page(web):
    producer = antre.Antre(redis_url=web.producer.redis_url, clock=web.clock, partitions=3)
    spec = lambda i: producer.spec("email", {"i": i}, idempotency_key=f"f{i}")  # noqa: E731
    flows = [producer.chain(spec(1), spec(2)).enqueue() for _ in range(3)]
    far = next(f for f in flows if keys.id_partition(f.id) == 2)
    c = web.client("viewer")
    page = c.get(f"/flows/default/{far.id}")
    assert page.status_code == 200 and far.id in page.get_data(as_text=True)
    listed = c.get("/flows/?queue=default").get_data(as_text=True)
    assert all(f.id in listed for f in flows)
    found = c.get(f"/flows/?queue=default&q={far.id}").get_data(as_text=True)
    assert far.id in found
