"""Transactional enqueue end to end: ``app.enqueue(..., session=s)`` -> outbox row in the caller's
transaction -> ``app.relay_outbox()`` -> Redis, once; on SQLite and PostgreSQL with real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import sqlalchemy as sa

from antre.clock import ManualClock, system_ms
from antre.engine.queue import Queue

from antre_demo import tables as t
from antre_worker.runner import WorkerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVENT = {"order_id": "ORD-5", "customer": "initech", "amount_cents": 990, "event": "order.paid"}


@pytest.fixture
def clock():
    return ManualClock(start_ms=system_ms())


@pytest.fixture
def app(demo_app):
    return demo_app


def in_redis(app, queue="webhooks") -> dict:
    q = app.queue(queue)
    return {"ready": app.redis.llen(q.keys.ready),
            "jobs": len(app.redis.keys(q.keys.job_prefix + "*")),
            "enqueued": q.stats().get("enqueued", 0)}


class BusinessError(Exception):
    pass


def enqueue_in_txn(app, *, commit: bool, order_id: str = "ORD-5") -> str:
    """The caller's own transaction: a business row and the job; an error after both rolls the
    whole transaction back."""
    try:
        with app.session_factory() as s, s.begin():
            s.execute(t.stock.insert().values(sku=f"ord-{order_id}", quantity=1, version=0,
                                              lock_fence=0))
            job_id = app.enqueue("webhook_invoice", {**EVENT, "order_id": order_id},
                                 idempotency_key=f"invoice:{order_id}", session=s)
            if not commit:
                raise BusinessError("payment declined")
    except BusinessError:
        pass
    return job_id


def test_rolled_back_transaction_reaches_nothing(app):
    enqueue_in_txn(app, commit=False)
    assert app.outbox.pending() == 0
    assert app.relay_outbox() == 0
    assert in_redis(app) == {"ready": 0, "jobs": 0, "enqueued": 0}
    with app.session_factory() as s:  # neither the business row nor the job exists
        assert s.execute(sa.select(sa.func.count()).select_from(t.stock)).scalar_one() == 0


def test_committed_job_is_relayed_once(app, clock):
    job_id = enqueue_in_txn(app, commit=True)
    assert in_redis(app)["jobs"] == 0  # not in Redis before the relay
    assert app.outbox.pending() == 1

    assert app.relay_outbox() == 1
    assert in_redis(app) == {"ready": 1, "jobs": 1, "enqueued": 1}
    job = app.queue("webhooks").get(job_id)
    assert job.type == "webhook_invoice" and job.idempotency_key == "invoice:ORD-5"
    assert job.payload["order_id"] == "ORD-5"
    assert app.outbox.pending() == 0
    assert app.relay_outbox() == 0  # nothing left: relaying again adds nothing
    assert in_redis(app)["ready"] == 1

    # and it runs like any job: one invoice
    WorkerProcess(app, queues=["webhooks"], clock=clock).run_burst()
    assert app.queue("webhooks").get(job_id).state == "done"
    with app.session_factory() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(t.invoices)).scalar_one() == 1


def test_crash_between_push_and_mark_sent_still_once(app, monkeypatch):
    job_id = enqueue_in_txn(app, commit=True)
    real = Queue.enqueue_many
    calls = {"n": 0}

    def push_then_die(self, specs, chunk=500):
        ids = real(self, specs, chunk)
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("relay died after pushing, before marking the rows sent")
        return ids

    monkeypatch.setattr(Queue, "enqueue_many", push_then_die)
    with pytest.raises(ConnectionError):
        app.relay_outbox()
    assert app.outbox.pending() == 1  # not marked sent...
    assert in_redis(app) == {"ready": 1, "jobs": 1, "enqueued": 1}  # ...but already pushed

    assert app.relay_outbox() == 1  # pushed again: the enqueue script skips the existing id
    assert app.outbox.pending() == 0
    assert in_redis(app) == {"ready": 1, "jobs": 1, "enqueued": 1}
    assert app.queue("webhooks").where(job_id) == ["ready"]


def test_repush_after_the_job_already_ran_adds_nothing(app, clock, monkeypatch):
    """The second push can come after a worker already processed the first copy."""
    job_id = enqueue_in_txn(app, commit=True)
    real = Queue.enqueue_many

    def push_then_die(self, specs, chunk=500):
        real(self, specs, chunk)
        raise ConnectionError("relay died after pushing")

    monkeypatch.setattr(Queue, "enqueue_many", push_then_die)
    with pytest.raises(ConnectionError):
        app.relay_outbox()
    monkeypatch.setattr(Queue, "enqueue_many", real)
    WorkerProcess(app, queues=["webhooks"], clock=clock).run_burst()
    assert app.queue("webhooks").get(job_id).state == "done"

    assert app.relay_outbox() == 1
    assert app.queue("webhooks").where(job_id) == ["done"]  # not ready again
    assert in_redis(app)["enqueued"] == 1


CHILD = textwrap.dedent('''
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from antre.engine.queue import Queue
    from antre_demo import make_app
    app = make_app(sys.argv[1], sys.argv[2])
    real = Queue.enqueue_many
    def push_then_die(self, specs, chunk=500):
        real(self, specs, chunk)
        os.kill(os.getpid(), signal.SIGKILL)   # before the "sent" mark commits
    Queue.enqueue_many = push_then_die
    app.relay_outbox()
''').format(root=ROOT)


def test_relay_killed_between_push_and_mark_sent_still_once(app, redis_url, db_url):
    job_ids = [enqueue_in_txn(app, commit=True, order_id=f"ORD-{i}") for i in range(3)]
    child = subprocess.run([sys.executable, "-c", CHILD, redis_url, db_url],
                           capture_output=True, text=True, timeout=60, check=False,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])))
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert app.outbox.pending() == 3
    assert in_redis(app) == {"ready": 3, "jobs": 3, "enqueued": 3}

    assert app.relay_outbox() == 3
    assert app.outbox.pending() == 0
    assert in_redis(app) == {"ready": 3, "jobs": 3, "enqueued": 3}
    assert all(app.queue("webhooks").where(j) == ["ready"] for j in job_ids)
