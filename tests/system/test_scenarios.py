"""The seed scenarios end to end: real Redis, real SQL (SQLite and PostgreSQL), the real worker.

Email (accept-then-timeout provider, duplicate enqueues), stock sync (same SKU, concurrent and
twice), webhook -> invoice (one invoice, one stored result for every duplicate), and the crash
windows of exactly-once SQL effects: after commit / before ack, before commit, and a stale worker
(paused with SIGSTOP past its lease) whose completion must be refused.

Time is a ``ManualClock``: backoffs, snoozes and lease expiries are passed by advancing it, never
by sleeping. Only subprocess states are polled (bounded).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter

import pytest
import sqlalchemy as sa
from helpers import wait_for

from antre.clock import ManualClock, system_ms
from antre.maintenance.rescue import Rescuer
from antre.observe.finder import Finder
from antre_demo import Traffic, faults, report
from antre_demo import tables as t
from antre_demo.handlers import FakeEmailProvider, email_key, email_payload
from antre_worker.runner import WorkerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture
def clock():
    return ManualClock(start_ms=system_ms())


@pytest.fixture
def app(demo_app):
    return demo_app


@pytest.fixture(autouse=True)
def no_random_faults(monkeypatch):
    """Tests turn on exactly the faults they want."""
    monkeypatch.setattr(faults, "email_timeout_rate", 0.0)
    monkeypatch.setattr(faults, "flaky_rate", 0.0)
    monkeypatch.setattr(faults, "rate_limit_rate", 0.0)
    monkeypatch.setattr(faults, "stock_out_rate", 0.0)


def pending(app, queues) -> int:
    """Jobs not finished yet (ready, scheduled or in flight) in ``queues``."""
    pipe = app.redis.pipeline(transaction=False)
    for name in queues:
        k = app.queue(name).keys
        pipe.llen(k.ready)
        pipe.zcard(k.scheduled)
        pipe.zcard(k.inflight)
    return sum(pipe.execute())


def drain(app, clock, queues, *, threads=1, rounds=80, step_ms=30_000) -> Counter:
    """Run burst workers until nothing is left; between bursts, move the clock so scheduled
    retries and snoozes come due (burst mode stops when nothing is *ready*)."""
    totals: Counter = Counter()
    for _ in range(rounds):
        w = WorkerProcess(app, queues=list(queues), threads=threads, clock=clock)
        totals.update(w.run_burst())
        if pending(app, queues) == 0:
            return totals
        clock.advance(step_ms)
    raise AssertionError(f"queues {queues} not drained after {rounds} rounds: {totals}")


def count(app, table, *where) -> int:
    with app.session_factory() as s:
        q = sa.select(sa.func.count()).select_from(table)
        if where:
            q = q.where(*where)
        return int(s.execute(q).scalar_one())


def stats(app, queue) -> dict[str, int]:
    return app.queue(queue).stats()


def states(app, queue, ids) -> Counter:
    return Counter(app.queue(queue).get(i).state for i in ids)


# -- 1. email --------------------------------------------------------------------------------


def test_email_each_sent_once_despite_accept_then_timeout_and_duplicates(app, clock,
                                                                          monkeypatch):
    monkeypatch.setattr(faults, "email_timeout_rate", 0.3)
    before_timeouts = FakeEmailProvider.timeouts
    keys, ids = [], []
    for i in range(50):
        email_type = ("welcome", "receipt", "newsletter")[i % 3]
        user, campaign = 1000 + i, f"spring-{i % 4}"
        key, payload = email_key(email_type, user, campaign), email_payload(email_type, user,
                                                                             campaign)
        keys.append(key)
        ids.append(app.enqueue("send_email", payload, idempotency_key=key))
        if i % 5 == 0:  # 20 %: the producer enqueues the same email again (new job id)
            ids.append(app.enqueue("send_email", payload, idempotency_key=key))
    assert len(ids) == 60

    totals = drain(app, clock, ["emails"], threads=4)

    # the fault really fired: messages were accepted and then the call timed out
    assert FakeEmailProvider.timeouts > before_timeouts
    assert stats(app, "emails").get("retried", 0) >= FakeEmailProvider.timeouts - before_timeouts
    # every email sent exactly once: one row per distinct key, no more
    assert count(app, t.emails_sent) == len(set(keys)) == 50
    with app.session_factory() as s:
        per_key = dict(s.execute(sa.select(t.emails_sent.c.email_key, sa.func.count())
                                 .group_by(t.emails_sent.c.email_key)).all())
    assert set(per_key) == set(keys) and set(per_key.values()) == {1}
    # every job finished; the duplicates were acked as idempotency hits
    assert states(app, "emails", ids) == Counter({"done": 60})
    st = stats(app, "emails")
    assert st["acked"] == 50 and st["deduplicated"] == 10
    assert st.get("buried", 0) == 0
    assert totals["deduplicated"] == 10
    assert app.idempotency.counts()["completed"] == 50


# -- 2. stock sync ---------------------------------------------------------------------------


def test_stock_same_sku_concurrent_and_twice_final_stock_is_right(app, clock):
    skus = ["SKU-A", "SKU-B", "SKU-C"]
    events = [{"event_id": f"evt-{i}", "sku": skus[i % 3], "delta": (i * 7) % 11 - 4,
               "source": "warehouse"} for i in range(40)]
    specs = []
    for ev in events:  # each event delivered twice, both copies ready at once
        for _ in range(2):
            specs.append(app.spec("stock_sync", ev, idempotency_key=f"stock:{ev['event_id']}",
                                  lock_key=f"sku:{ev['sku']}"))
    ids = app.enqueue_many(specs, queue="stock")
    assert len(ids) == 80

    totals = drain(app, clock, ["stock"], threads=4)

    with app.session_factory() as s:
        rows = {r.sku: r for r in s.execute(sa.select(t.stock)).all()}
    for sku in skus:
        mine = [e for e in events if e["sku"] == sku]
        assert rows[sku].quantity == sum(e["delta"] for e in mine), sku
        assert rows[sku].version == len(mine), sku
        assert rows[sku].lock_fence > 0  # the pessimistic side: writes carry the lock's fence
    assert count(app, t.stock_events) == 40
    assert states(app, "stock", ids) == Counter({"done": 80})
    st = stats(app, "stock")
    assert st["acked"] == 40 and st["deduplicated"] == 40 and st.get("buried", 0) == 0
    # contention (lock busy, key busy) is snoozed without spending attempts
    assert totals["lock_busy"] + totals["snoozed"] > 0
    assert all(app.queue("stock").get(i).attempt == 0 for i in ids)


def test_stock_event_dedup_holds_even_without_the_idempotency_record(app, clock):
    """Defence in depth: an event re-sent under another idempotency key (a producer bug, or
    a record pruned) is still applied once, by the event-id dedup table."""
    ev = {"event_id": "evt-x", "sku": "SKU-Z", "delta": 5, "source": "warehouse"}
    a = app.enqueue("stock_sync", ev, idempotency_key="stock:evt-x", lock_key="sku:SKU-Z")
    b = app.enqueue("stock_sync", ev, idempotency_key="stock:evt-x:resent", lock_key="sku:SKU-Z")
    drain(app, clock, ["stock"], threads=2)
    with app.session_factory() as s:
        row = s.execute(sa.select(t.stock).where(t.stock.c.sku == "SKU-Z")).one()
    assert (row.quantity, row.version) == (5, 1)
    results = sorted(json.dumps(app.queue("stock").get(i).result, sort_keys=True) for i in (a, b))
    assert any('"applied": false' in r for r in results)


def test_stock_version_cas_refuses_a_moved_row(app, clock):
    """The optimistic side alone: the version moved between our read and our update (emulated
    by making the first read see an older version) -> ``VersionConflict`` (``ctx.versioned_update``):
    nothing that run wrote stays, no attempt is spent, the conflict is counted and on
    the job's timeline, the next run applies the event once."""
    from antre_demo import handlers

    ev = {"event_id": "evt-cas", "sku": "SKU-CAS", "delta": 3}
    with app.session_factory() as s, s.begin():
        s.execute(t.stock.insert().values(sku="SKU-CAS", quantity=10, version=4, lock_fence=0))
    handlers_select = handlers.select
    calls = {"n": 0}

    def stale_select(*cols):
        stmt = handlers_select(*cols)
        if cols and getattr(cols[0], "table", None) is t.stock:
            calls["n"] += 1
            if calls["n"] == 1:
                # the row this attempt reads claims version 3: the update (version = 3) misses
                return handlers_select(t.stock.c.quantity, (t.stock.c.version - 1).label(
                    "version"), t.stock.c.lock_fence)
        return stmt

    handlers.select = stale_select
    try:
        job = app.enqueue("stock_sync", ev, idempotency_key="stock:evt-cas")
        totals = drain(app, clock, ["stock"])
    finally:
        handlers.select = handlers_select
    assert totals["version_conflict"] == 1 and totals["succeeded"] == 1
    assert totals["retried"] == 0
    with app.session_factory() as s:
        row = s.execute(sa.select(t.stock).where(t.stock.c.sku == "SKU-CAS")).one()
    assert (row.quantity, row.version) == (13, 5)
    assert count(app, t.stock_events, t.stock_events.c.event_id == "evt-cas") == 1
    q = app.queue("stock")
    j = q.get(job)
    assert j.state == "done" and j.attempt == 0 and q.stats()["version_conflict"] == 1
    from antre.observe.finder import Finder
    events = [e for e in Finder(app.redis).timeline("stock", job).events if e.kind == "snoozed"]
    assert "is no longer at version 3" in str(events[0].details)


# -- 3. webhook -> invoice -------------------------------------------------------------------


def test_invoice_same_order_event_five_times_one_invoice_same_result(app, clock):
    event = {"order_id": "ORD-77", "customer": "acme", "amount_cents": 12_345,
             "event": "order.paid"}
    ids = [app.enqueue("webhook_invoice", event, idempotency_key="invoice:ORD-77")
           for _ in range(5)]
    assert len(set(ids)) == 5

    drain(app, clock, ["webhooks"], threads=3)

    with app.session_factory() as s:
        refs = s.execute(sa.select(t.invoices.c.invoice_ref)
                         .where(t.invoices.c.order_id == "ORD-77")).scalars().all()
    assert len(refs) == 1
    jobs = [app.queue("webhooks").get(i) for i in ids]
    assert [j.state for j in jobs] == ["done"] * 5
    assert [j.result for j in jobs] == [{"invoice_ref": refs[0], "order_id": "ORD-77"}] * 5
    st = stats(app, "webhooks")
    assert st["acked"] == 1 and st["deduplicated"] == 4
    assert app.idempotency.lookup("invoice:ORD-77").result["invoice_ref"] == refs[0]


def test_invoice_key_reused_with_a_different_payload_goes_to_the_dlq(app, clock):
    first = {"order_id": "ORD-9", "customer": "acme", "amount_cents": 100}
    other = {"order_id": "ORD-9", "customer": "acme", "amount_cents": 999}
    a = app.enqueue("webhook_invoice", first, idempotency_key="invoice:ORD-9")
    drain(app, clock, ["webhooks"])
    b = app.enqueue("webhook_invoice", other, idempotency_key="invoice:ORD-9")
    drain(app, clock, ["webhooks"])
    assert app.queue("webhooks").get(a).state == "done"
    dead = app.queue("webhooks").get(b)
    assert dead.state == "dead" and "different payload" in dead.reason
    assert count(app, t.invoices) == 1


# -- crash windows of exactly-once SQL effects -----------------------------------------------

CHILD = textwrap.dedent('''
    import json, os, signal, sys, time
    sys.path.insert(0, {root!r})
    from antre.stores.idempotency import IdempotencyStore
    from antre.engine.queue import Queue
    from antre_demo import faults, make_app
    from antre_worker.runner import WorkerProcess

    mode, redis_url, database_url, queue = sys.argv[1:5]
    faults.email_timeout_rate = 0.0
    app = make_app(redis_url, database_url)
    heartbeat_s = 1.0
    if mode == "after_commit":          # the commit landed; die before the Redis ack
        def ack(self, job, result=None, **kw):
            os.kill(os.getpid(), signal.SIGKILL)
        Queue.ack = ack
    elif mode == "before_commit":       # the effect is written (flushed) but not committed
        def complete(self, session, key, fence, result, **kw):
            session.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        IdempotencyStore.complete = complete
    elif mode == "pause":               # wait at the handler's start until GO_FILE exists
        ready_file, go_file = sys.argv[5:7]
        heartbeat_s = 3600.0            # no lease extension: only the SQL fence protects us
        for spec in app.handlers.values():
            def gated(ctx, payload, inner=spec.fn):
                open(ready_file, "w").close()
                give_up = time.monotonic() + 60
                while not os.path.exists(go_file) and time.monotonic() < give_up:
                    time.sleep(0.02)
                return inner(ctx, payload)
            spec.fn = gated
    counts = WorkerProcess(app, queues=[queue], threads=1, heartbeat_s=heartbeat_s).run_burst()
    print("COUNTS " + json.dumps(counts), flush=True)
''').format(root=ROOT)


def spawn_child(mode, redis_url, db_url, queue, *extra) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", CHILD, mode, redis_url, db_url, queue,
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def child_counts(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("COUNTS "):
            return json.loads(line[7:])
    raise AssertionError(f"child printed no counts:\n{out}")


def counting(app, job_type) -> Counter:
    """Wrap a handler of ``app`` so the test can see whether it ran."""
    runs: Counter = Counter()
    spec = app.handlers[job_type]
    inner = spec.fn

    def wrapped(ctx, payload):
        runs["runs"] += 1
        return inner(ctx, payload)

    spec.fn = wrapped
    return runs


def expire_leases(app, clock, queue) -> None:
    """Move the clock past every lease taken with the real clock by a child, then sweep."""
    clock.now_ms = system_ms() + 31_000
    swept = app.queue(queue).sweep()
    assert swept.requeued == 1, swept


EVENT = {"order_id": "ORD-1", "customer": "globex", "amount_cents": 4_200, "event": "order.paid"}


def test_crash_after_commit_before_ack_redelivery_acks_without_rerunning(app, clock, redis_url,
                                                                         db_url):
    job_id = app.enqueue("webhook_invoice", EVENT, idempotency_key="invoice:ORD-1")
    child = spawn_child("after_commit", redis_url, db_url, "webhooks")
    _out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err

    # the commit is there, the ack is not: one invoice, a completed record, the job in flight
    assert count(app, t.invoices) == 1
    record = app.idempotency.lookup("invoice:ORD-1")
    assert record.status == "completed"
    assert app.queue("webhooks").where(job_id) == ["inflight"]

    runs = counting(app, "webhook_invoice")
    expire_leases(app, clock, "webhooks")
    totals = drain(app, clock, ["webhooks"])

    assert runs["runs"] == 0  # acked from the stored result, the handler did not run again
    assert totals["deduplicated"] == 1 and totals.get("succeeded", 0) == 0
    job = app.queue("webhooks").get(job_id)
    assert job.state == "done" and job.result == record.result
    assert job.deliveries == 2
    assert count(app, t.invoices) == 1
    assert stats(app, "webhooks")["expired"] == 1


def test_crash_before_commit_reruns_and_commits_once(app, clock, redis_url, db_url):
    job_id = app.enqueue("webhook_invoice", EVENT, idempotency_key="invoice:ORD-1")
    child = spawn_child("before_commit", redis_url, db_url, "webhooks")
    _out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err

    # the crash rolled the effect back; the record still says a (dead) owner is processing
    assert count(app, t.invoices) == 0
    assert app.idempotency.lookup("invoice:ORD-1").status == "processing"

    runs = counting(app, "webhook_invoice")
    expire_leases(app, clock, "webhooks")
    totals = drain(app, clock, ["webhooks"])

    assert runs["runs"] == 1 and totals["succeeded"] == 1
    assert count(app, t.invoices) == 1
    record = app.idempotency.lookup("invoice:ORD-1")
    assert record.status == "completed" and record.fence == 2
    job = app.queue("webhooks").get(job_id)
    assert job.state == "done" and job.result == record.result


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_stale_worker_paused_by_sigstop_cannot_commit(app, clock, redis_url, db_url, tmp_path):
    """Two workers hold the same job: one paused (SIGSTOP) past its lease. The live one commits;
    the stale one wakes up (SIGCONT), runs the handler, and its completion - ``UPDATE ... WHERE
    key AND fence`` - matches zero rows: LeaseLost, its writes roll back. One commit."""
    key = email_key("welcome", 7, "signup")
    job_id = app.enqueue("send_email", email_payload("welcome", 7, "signup"),
                         idempotency_key=key)
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = spawn_child("pause", redis_url, db_url, "emails", str(ready), str(go))
    try:
        wait_for(lambda: ready.exists() or child.poll() is not None, 30.0, "child handler",
                 poll_s=0.02)
        assert child.poll() is None, child.communicate()
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: _proc_state(child.pid) == "T", 30.0, "child stopped", poll_s=0.02)

        # its lease expires; the sweeper hands the job to a live worker, which commits
        runs = counting(app, "send_email")
        expire_leases(app, clock, "emails")
        totals = drain(app, clock, ["emails"])
        assert runs["runs"] == 1 and totals["succeeded"] == 1
        assert count(app, t.emails_sent) == 1
        record = app.idempotency.lookup(key)
        assert record.status == "completed" and record.fence == 2

        go.touch()
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    counts = child_counts(out)
    assert counts.get("lease_lost") == 1, (counts, err)
    assert "succeeded" not in counts
    assert "is no longer owned by fence 1" in err  # refused by the SQL fence, not the heartbeat
    # the stale handler did send (write) - and it was rolled back: still exactly one email
    assert count(app, t.emails_sent) == 1
    job = app.queue("emails").get(job_id)
    assert job.state == "done" and job.epoch == 2


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_worker_paused_past_the_tolerance_is_rescued_and_cannot_commit_when_it_wakes(
        app, clock, redis_url, db_url, tmp_path):
    """The same pause, found by the rescuer (no heartbeat) long before the lease's deadline:
    the job runs again at once and commits once; the paused worker wakes, runs the handler, and
    its completion is refused by the newer epoch; its writes roll back."""
    key = email_key("welcome", 8, "signup")
    job_id = app.enqueue("send_email", email_payload("welcome", 8, "signup"),
                         idempotency_key=key)
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = spawn_child("pause", redis_url, db_url, "emails", str(ready), str(go))
    try:
        wait_for(lambda: ready.exists() or child.poll() is not None, 30.0, "child handler",
                 poll_s=0.02)
        assert child.poll() is None, child.communicate()
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: _proc_state(child.pid) == "T", 30.0, "child stopped", poll_s=0.02)

        clock.now_ms = system_ms()  # the rescuer's clock from now on, the lease 30 s away
        rescuer = Rescuer(app.redis, clock=clock, scripts=app.scripts, tolerance_s=3.5)
        found = []
        for _ in range(6):
            clock.advance(1_000)
            found += rescuer.run().lost
        assert len(found) == 1 and app.queue("emails").where(job_id) == ["ready"]
        runs = counting(app, "send_email")
        totals = drain(app, clock, ["emails"])
        assert runs["runs"] == 1 and totals["succeeded"] == 1
        assert count(app, t.emails_sent) == 1
        record = app.idempotency.lookup(key)
        assert record.status == "completed" and record.fence == 3

        go.touch()
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    counts = child_counts(out)
    assert counts.get("lease_lost") == 1, (counts, err)
    assert "succeeded" not in counts
    assert count(app, t.emails_sent) == 1  # the woken run sent, and was rolled back
    job = app.queue("emails").get(job_id)
    assert job.state == "done" and job.epoch == 3
    [swept] = [e for e in Finder(app.redis, clock).timeline("emails", job_id).events
               if e.kind == "swept"]
    assert swept.actor == "rescuer" and f"worker {found[0]} lost" in swept.details["reason"]


def test_stale_worker_in_process_two_threads_injected_clock(app, clock):
    """The same race in one process: thread 1 holds epoch 1 and is parked inside its handler;
    the clock passes its lease, the sweeper requeues, worker 2 commits epoch 2; thread 1 then
    finishes and its completion is refused."""
    key = email_key("receipt", 8, "order-1")
    job_id = app.enqueue("send_email", email_payload("receipt", 8, "order-1"),
                         idempotency_key=key)
    parked, release = threading.Event(), threading.Event()
    inner = app.handlers["send_email"].fn
    ran = Counter()

    def handler(ctx, payload):
        ran[ctx.job.epoch] += 1
        if ctx.job.epoch == 1:
            parked.set()
            assert release.wait(30)
        return inner(ctx, payload)

    app.handlers["send_email"].fn = handler
    w1 = WorkerProcess(app, queues=["emails"], threads=1, clock=clock, heartbeat_s=3600)
    out: dict = {}
    t1 = threading.Thread(target=lambda: out.update(w1.run_burst()))
    t1.start()
    try:
        assert parked.wait(30)
        clock.advance(31_000)
        assert app.queue("emails").sweep().requeued == 1
        w2 = WorkerProcess(app, queues=["emails"], threads=1, clock=clock, heartbeat_s=3600)
        assert w2.run_burst().get("succeeded") == 1
    finally:
        release.set()
        t1.join(30)
    assert not t1.is_alive()
    assert out.get("lease_lost") == 1 and "succeeded" not in out
    assert dict(ran) == {1: 1, 2: 1}
    assert count(app, t.emails_sent) == 1
    assert app.idempotency.lookup(key).fence == 2
    assert app.queue("emails").get(job_id).state == "done"


# -- the demo traffic ------------------------------------------------------------------------


def test_traffic_mix_has_duplicates_and_faults_and_zero_duplicate_effects(app, clock,
                                                                         monkeypatch):
    monkeypatch.setattr(faults, "email_timeout_rate", 0.3)
    monkeypatch.setattr(faults, "flaky_rate", 0.5)
    monkeypatch.setattr(faults, "rate_limit_rate", 0.4)
    # the batch queue's jobs sleep for real seconds (slow report, hard timeout): left out here
    mix = {k: v for k, v in Traffic(app).mix.items() if k not in ("slow_report", "timeout_job")}
    traffic = Traffic(app, seed=42, mix=mix, poison_every_s=None)
    ids = traffic.step(80)
    assert len(ids) == traffic.counts["jobs"] > 80
    assert traffic.counts["duplicates"] > 0
    queues = ["emails", "stock", "webhooks", "integrations"]
    drain(app, clock, queues, threads=4)

    rep = report(app)
    assert rep["duplicate_effects"]["total"] == 0, rep["duplicate_effects"]
    assert rep["duplicate_deliveries"]["idempotency_hits"] == traffic.counts["duplicates"]
    assert rep["effects"]["distinct_email_keys"] == rep["effects"]["emails_sent"]
    assert rep["effects"]["stock_events_applied"] == traffic.counts["stock"] // 2
    # the injected faults show up where the dashboard looks for them
    integ = stats(app, "integrations")
    if traffic.counts["bad_input"] or traffic.counts["legacy_sync"]:
        assert integ.get("buried", 0) == traffic.counts["bad_input"] + traffic.counts[
            "legacy_sync"]
    assert rep["deliveries"]["retried"] > 0


def test_fault_jobs_end_where_the_dashboard_shows_them(app, clock, monkeypatch):
    monkeypatch.setattr(faults, "flaky_rate", 0.5)
    monkeypatch.setattr(faults, "rate_limit_rate", 0.5)
    slow = app.enqueue("slow_report", {"report": "daily-sales", "seconds": 1},
                       idempotency_key="slow_report:1")
    flaky = [app.enqueue("flaky_call", {"request": i}, idempotency_key=f"flaky_call:{i}")
             for i in range(8)]
    limited = [app.enqueue("rate_limited_call", {"request": i},
                           idempotency_key=f"rate_limited_call:{i}") for i in range(4)]
    bad = app.enqueue("bad_input", {"customer_id": "C-123"}, idempotency_key="bad_input:1")
    legacy = app.enqueue("legacy_sync", {"table": "customers"}, idempotency_key="legacy:1",
                         queue="integrations")
    totals = drain(app, clock, ["batch", "integrations"], threads=2)

    b, i = app.queue("batch"), app.queue("integrations")
    assert b.get(slow).state == "done" and b.get(slow).result["rows"] == 2000
    assert b.get(slow).progress.message == "rows 2,000/2,000"  # its last ctx.progress
    assert [i.get(j).state for j in flaky] == ["done"] * 8
    assert sum(i.get(j).attempt for j in flaky) > 0  # some failed retryably first
    assert [i.get(j).state for j in limited] == ["done"] * 4
    assert all(i.get(j).attempt == 0 for j in limited)  # 429 spends no attempt
    assert totals["snoozed"] > 0
    dead_bad, dead_legacy = i.get(bad), i.get(legacy)
    assert dead_bad.state == "dead" and "customer record malformed" in dead_bad.last_error
    assert dead_bad.attempt == 1  # straight to the DLQ, no retries
    assert app.idempotency.lookup("bad_input:1").status == "failed"
    assert dead_legacy.state == "dead" and "no handler for job type 'legacy_sync'" in \
        dead_legacy.reason
