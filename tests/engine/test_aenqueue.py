"""The asyncio producer: ``await app.aenqueue`` / ``aenqueue_many`` / ``aresult`` on
``redis.asyncio`` store exactly what the synchronous calls store, with the same refusals."""

from __future__ import annotations

import pytest
from helpers import run_async

from antre import Antre, InvalidJob
from antre.engine.keys import QueueKeys, queues_index


def calls(r, name: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def run(coro):
    return run_async(coro)


async def _closing(app: Antre, coro):
    try:
        return await coro
    finally:
        await app.aredis.aclose()


def test_aenqueue_stores_the_job_as_enqueue_does_in_one_script_call(app, r, clock):
    async def go():
        await app.aenqueue("email", {"to": "warm"}, idempotency_key="e:0")  # loads the script
        r.config_resetstat()
        one = await app.aenqueue("email", {"to": "a"}, idempotency_key="e:1")
        alone = calls(r, "fcall"), calls(r, "sadd")
        r.delete(queues_index())
        clock.advance(1000)
        two = await app.aenqueue("email", {"to": "b"}, idempotency_key="e:2")
        return one, alone, two
    job_id, alone, second = run(_closing(app, go()))
    k = QueueKeys("default")
    assert r.hget(k.job(job_id), "state") == "ready"
    assert r.lrange(k.ready, 0, -1)[1] == job_id
    # the script alone: the queue and type indexes were written a moment ago
    assert alone == (1, 0)
    # a second later, the script writes them again (its own SADDs), still the only command
    assert calls(r, "fcall") == 2 and calls(r, "sadd") == 2
    assert r.sismember(queues_index(), "default")
    assert app.queue().get(job_id).payload == {"to": "a"}
    assert app.queue().get(second).payload == {"to": "b"}


def test_a_delayed_and_a_unique_job_take_the_full_script(app, r, clock):
    async def go():
        later = await app.aenqueue("t", {}, idempotency_key="k:later", delay_s=60)
        first = await app.aenqueue("t", {}, idempotency_key="k:u", unique=True)
        again = await app.aenqueue("t", {}, idempotency_key="k:u", unique=True)
        return later, first, again
    later, first, again = run(_closing(app, go()))
    k = QueueKeys("default")
    assert r.hget(k.job(later), "state") == "scheduled"
    assert again == first  # the pending job holding the key
    assert r.llen(k.ready) == 1


def test_aenqueue_many_checks_every_spec_first_then_stores_them_all(app, r):
    specs = [app.spec("t", {"i": i}, idempotency_key=f"m:{i}") for i in range(250)]
    ids = run(_closing(app, app.aenqueue_many(specs)))
    assert len(set(ids)) == 250 and r.llen(QueueKeys("default").ready) == 250
    bad = [app.spec("t", {"i": 1}, idempotency_key="ok"), app.spec("t", {}, idempotency_key="")]
    with pytest.raises(InvalidJob):
        run(_closing(app, app.aenqueue_many(bad)))
    assert r.llen(QueueKeys("default").ready) == 250  # nothing of the bad batch


def test_aenqueue_refuses_bad_input_before_sending_anything(app, r):
    r.config_resetstat()
    with pytest.raises(InvalidJob):
        run(_closing(app, app.aenqueue("bad type!", {}, idempotency_key="k")))
    assert calls(r, "fcall") + calls(r, "evalsha") == 0


def test_a_server_that_lost_its_scripts_is_sent_them_again(app, r):
    run(_closing(app, app.aenqueue("t", {}, idempotency_key="s:1")))
    r.function_flush()
    r.config_resetstat()
    app2 = Antre(redis_url=app.redis_url, clock=app.clock)
    job_id = run(_closing(app2, app2.aenqueue("t", {}, idempotency_key="s:2")))
    assert r.hget(QueueKeys("default").job(job_id), "state") == "ready"
    assert calls(r, "function|load") == 1 and calls(r, "fcall") == 2  # refused, loaded, sent


def test_aresult_answers_as_result(app, r):
    job_id = app.enqueue("t", {}, idempotency_key="res:1")
    got = run(app.aresult("res:1"))
    assert (got.status, got.job_id) == ("pending", job_id)
    assert run(app.aresult("nobody")).status == "unknown"
