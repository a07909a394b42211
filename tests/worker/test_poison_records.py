"""Poison records through a real in-process worker: a broken record, a payload that
breaks decoding, or a value the idempotency store can never take poisons only its own job (to
the DLQ at once, with the real reason); every batch-mate runs exactly once."""

from __future__ import annotations

import threading

import pytest
from helpers import make_worker

from antre import Antre, InvalidJob

def bounded_burst(app: Antre, clock) -> dict[str, int]:
    """``helpers.burst``, stopped (and failed) if the worker has not run the queue dry after
    30 s: code that loops on an error fails the test instead of hanging it."""
    worker = make_worker(app, clock)
    counts: dict[str, int] = {}
    thread = threading.Thread(target=lambda: counts.update(worker.run_burst()), daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        pytest.fail("the worker did not run the queue dry within 30 s")
    return counts



def record_runs(app: Antre, runs: list[str], result=None) -> None:
    @app.handler("t")
    def handle(ctx, payload):
        runs.append(ctx.job.id)
        return result


def fill(app: Antre, n: int = 6) -> list[str]:
    return [app.enqueue("t", {"i": i}, idempotency_key=f"k{i}") for i in range(n)]


def test_a_string_in_place_of_a_job_hash_loses_no_batch_mate(app, r, clock):
    runs: list[str] = []
    record_runs(app, runs)
    ids = fill(app)
    q = app.queue()
    r.delete(q.keys.job(ids[2]))
    r.set(q.keys.job(ids[2]), "garbage")
    bounded_burst(app, clock)
    assert sorted(runs) == sorted(ids[:2] + ids[3:])
    assert all(q.where(i) == ["done"] for i in ids if i != ids[2])
    assert q.where(ids[2]) == ["dead"]
    assert "job record is a string, not a hash" in q.get(ids[2]).reason


@pytest.mark.parametrize("payload, why", [
    pytest.param("[" * 200_000 + "]" * 200_000, "nested deeper", id="nested-200000"),
    (b'{"i":"\xff\xfe"}', "field 'payload' is not valid UTF-8"),
    ('{"i": NaN}', "NaN is not valid JSON"),
])
def test_a_payload_that_breaks_decoding_is_buried_at_once_alone(app, r, clock, payload, why):
    runs: list[str] = []
    record_runs(app, runs)
    ids = fill(app)
    q = app.queue()
    r.hset(q.keys.job(ids[3]), "payload", payload)
    bounded_burst(app, clock)
    assert sorted(runs) == sorted(i for i in ids if i != ids[3])
    bad = q.get(ids[3])
    assert bad.state == "dead" and why in bad.reason
    assert bad.deliveries == 1  # at once: not after its leases ran out ~10 times
    assert all(q.get(i).deliveries == 1 and q.where(i) == ["done"] for i in ids if i != ids[3])


@pytest.fixture
def dbapp(redis_url, clock, db_url):
    return Antre(redis_url=redis_url, database_url=db_url, clock=clock)


@pytest.mark.parametrize("field, value, why", [
    ("idem_key", "order\x00:7", "NUL"),
    ("payload", '{"i":"\\udc80"}', "surrogates not allowed"),
    ("payload", '{"i": Infinity}', "Infinity is not valid JSON"),
])
def test_a_value_the_store_can_never_take_is_buried_not_snoozed(dbapp, r, clock, field, value,
                                                                  why):
    runs: list[str] = []
    record_runs(dbapp, runs)
    ids = fill(dbapp, 4)
    q = dbapp.queue()
    r.hset(q.keys.job(ids[1]), field, value)
    bounded_burst(dbapp, clock)
    assert sorted(runs) == sorted(i for i in ids if i != ids[1])
    bad = q.get(ids[1])
    assert bad.state == "dead" and why in bad.reason, bad.reason
    assert bad.snoozes == 0 and q.stats().get("database_unavailable", 0) == 0
    assert all(dbapp.idempotency.lookup(f"k{i}").status == "completed" for i in (0, 2, 3))


@pytest.mark.parametrize("kwargs, message", [
    ({"idempotency_key": "order\x00:7"}, "NUL"),
    ({"idempotency_key": "order:7", "lock_key": "acct\x00"}, "NUL"),
    ({"idempotency_key": "order:7", "payload": {"name": "x\udc80"}}, "lone surrogate"),
    ({"idempotency_key": "order:7", "payload": {"\ud800": 1}}, "lone surrogate"),
])
def test_enqueue_outbox_and_enqueue_many_refuse_what_no_store_takes(dbapp, kwargs, message):
    from antre.engine.queue import JobSpec
    kwargs = {"payload": {"ok": 1}, **kwargs}
    payload = kwargs.pop("payload")
    with pytest.raises(InvalidJob, match=message):
        dbapp.enqueue("t", payload, **kwargs)
    with pytest.raises(InvalidJob, match=message):
        dbapp.queue().enqueue_many([JobSpec("t", payload, **kwargs)])
    with dbapp.session_factory() as session:
        with pytest.raises(InvalidJob, match=message):
            dbapp.enqueue("t", payload, session=session, **kwargs)
    assert dbapp.queue().redis.llen(dbapp.queue().keys.ready) == 0
    # what looks like a surrogate but is not one still goes in: a proper pair, an escape's text
    fine = {"smile": "\U0001F600", "text": "\\ud800"}
    assert dbapp.queue().get(dbapp.enqueue("t", fine, idempotency_key="ok")).payload == fine


def test_a_result_over_the_payload_limit_is_buried_permanently_not_stored(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock, max_payload_bytes=2_000)
    runs: list[str] = []
    big = {"blob": "x" * 5_000}

    @app.handler("t", max_attempts=5)
    def handle(ctx, payload):
        runs.append(ctx.job.id)
        return big if payload["i"] == 1 else {"ok": payload["i"]}

    ids = fill(app, 3)
    bounded_burst(app, clock)
    q = app.queue()
    bad = q.get(ids[1])
    assert bad.state == "dead" and runs.count(ids[1]) == 1
    assert "handler result is 5011 bytes, over the limit of 2000 bytes" in bad.reason
    assert bad.result is None
    assert [q.get(i).result for i in (ids[0], ids[2])] == [{"ok": 0}, {"ok": 2}]
