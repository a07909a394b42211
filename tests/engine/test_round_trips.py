"""Fewer round trips without losing anything: batches of scripts without ``SCRIPT EXISTS``
(and their recovery after the script cache is flushed), the lock index kept in the same round
trip as the lock, and pooled database connections pinged only after they sat idle (a dead one
is replaced, a connection killed while in use is retried once by the idempotency store)."""

from __future__ import annotations

import os
import threading
import time

import hiredis
import psycopg
import pytest
from sqlalchemy import text

from antre.engine import keys, scripts
from antre.engine import queue as queue_module
from antre.clock import ManualClock
from antre.stores.idempotency import ACQUIRED, IdempotencyStore
from antre.engine.locks import Locks
from antre.engine.queue import JobSpec, Queue
from antre.engine.scripts import Batch
from helpers import forget_scripts
from antre.stores.sql import make_engine, migrate, session_factory


def calls(r) -> dict[str, int]:
    """Calls per command since the last reset; ``scripts``: FCALL and EVALSHA together."""
    out = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}
    out["scripts"] = out.get("fcall", 0) + out.get("evalsha", 0)
    return out


@pytest.fixture
def q(r):
    return Queue(r, "jobs", clock=ManualClock())


def test_ack_many_is_one_round_trip_without_script_exists(q, r):
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(6)])
    jobs = q.reserve("w1", count=6)
    q.ack_many([(jobs.pop(), None)])  # the server knows the script from now on
    r.config_resetstat()
    assert q.ack_many([(j, None) for j in jobs]) == []
    stats = calls(r)
    assert not [name for name in stats if name.startswith(("script|", "function|"))]
    assert stats["fcall"] == 1  # one ack_many.lua call for the batch
    assert r.zcard(q.keys.done) == 6


def test_reserve_reads_and_writes_each_job_once(q, r):
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(8)])
    r.config_resetstat()
    assert len(q.reserve("w1", count=8)) == 8
    stats = calls(r)
    # per job one HMGET, its field count and one HSET (a plain job); the inflight ZADD
    # once per call; no timeline write (the 'reserved' event is kept in the hash); the
    # incident controls looked at with one EXISTS per call (none is set: no HLEN of them)
    assert (stats["hmget"], stats["hlen"], stats["hset"], stats["zadd"]) == (8, 8, 8, 1)
    assert stats["exists"] == 1 and "rpush" not in stats and "hget" not in stats


def test_ack_many_reads_and_writes_each_job_once(r):
    q = Queue(r, "jobs", clock=ManualClock(), done_max=4)
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(12)])
    first = q.reserve("w1", count=4)
    assert q.ack_many([(j, None) for j in first]) == []
    jobs = q.reserve("w1", count=8)
    r.config_resetstat()
    assert q.ack_many([(j, None) for j in jobs]) == []
    stats = calls(r)
    assert (stats["fcall"], stats["hmget"], stats["hset"]) == (1, 8, 8)
    assert "rpush" not in stats  # (the 'completed' event is kept in the hash)
    # the batch's index moves and counters once; the done-trim once (8 past the cap of 4)
    assert (stats["zrem"], stats["zadd"]) == (2, 1) and stats["hincrby"] <= 2
    assert stats["zrangebyscore"] == 1 and stats["zcard"] == 1 and stats["zrange"] == 1
    assert r.zcard(q.keys.done) == 4 and q.stats()["acked"] == 12


def test_batch_reloads_flushed_scripts_and_runs_each_call_once(q, r):
    q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(3)])
    jobs = q.reserve("w1", count=3)
    forget_scripts(r)  # as after a Redis restart: the library is unknown to the server
    assert q.ack_many([(j, None) for j in jobs]) == []
    assert r.zcard(q.keys.done) == 3 and r.zcard(q.keys.inflight) == 0
    assert int(r.hget(q.keys.stats, "acked")) == 3  # not acked twice by the re-send
    forget_scripts(r)
    ids = q.enqueue_many([JobSpec("t", {}, f"n{i}") for i in range(2)])
    assert r.llen(q.keys.ready) == 2 and set(ids) == set(r.lrange(q.keys.ready, 0, -1))
    forget_scripts(r)  # chunks written one by one: each refused, then each sent again once
    more = q.enqueue_many([JobSpec("t", {}, f"c{i}") for i in range(5)], chunk=2)
    assert r.lrange(q.keys.ready, 0, -1) == [*more[::-1], *ids[::-1]]
    assert int(r.hget(q.keys.stats, "enqueued")) == 3 + 2 + 5


def test_batch_raises_the_first_error_after_running_everything(r):
    r.set("s", "text")
    batch = Batch(r).command("incr", "s").command("set", "t", "1")
    with pytest.raises(Exception, match="not an integer"):
        batch.execute()
    assert r.get("t") == "1"


def _commands(chunks) -> list[list[bytes]]:
    """The commands in bytes written to a socket (RESP arrays, parsed as a reader would)."""
    reader = hiredis.Reader()
    for chunk in chunks:
        reader.feed(chunk)
    out = []
    while (command := reader.gets()) is not False:
        out.append(command)
    return out


def _spy(conn, sent: list, monkeypatch) -> None:
    """Record each write to ``conn``'s socket (a list of its chunks), by redis-py's
    ``send_packed_command`` or by the pinned connection's own ``os.write``."""
    send = conn.send_packed_command
    monkeypatch.setattr(conn, "send_packed_command", lambda packed, *a, **kw: (
        sent.append(list(packed)), send(packed, *a, **kw))[1])
    write, fd = os.write, conn._sock.fileno()
    monkeypatch.setattr(scripts.os, "write", lambda to, data: (
        sent.append([bytes(data)]) if to == fd else None, write(to, data))[1])


def test_a_single_enqueue_is_one_command_with_the_queue_indexed(q, r, monkeypatch):
    q.enqueue("w", {}, idempotency_key="warm")  # the server knows the script from now on
    r.config_resetstat()
    sent: list = []
    conn = q.scripts.pinned.connection()  # this thread's connection: every enqueue uses it
    _spy(conn, sent, monkeypatch)
    job_id = q.enqueue("t", {"n": 1}, idempotency_key="k1")  # the first job of its type
    monkeypatch.undo()
    assert len(sent) == 1  # one write to the socket
    commands = _commands(sent[0])
    assert [c[0] for c in commands] == [b"FCALL"]  # one command: the index is in the script
    assert commands[0][1] == q.scripts.enqueue_one.function.encode()  # the lean script
    assert keys.queues_index().encode() in commands[0]
    stats = calls(r)
    assert stats["fcall"] == 1 and stats["sadd"] == 2  # the index and the type, in the script
    # a new idempotency key: its index entry, written first, is the guard against a retried
    # send (see test_pinned), and the job is not looked for
    assert stats["hsetnx"] == 1 and "exists" not in stats
    assert not [name for name in stats if name.startswith(("script|", "function|"))]
    assert q.where(job_id) == ["ready"] and r.smembers(keys.queues_index()) == {"jobs"}
    assert r.smembers(q.keys.types) == {"w", "t"}


def test_a_single_enqueue_runs_five_commands_inside_its_script_once_indexed(q, r):
    """Past the first job of its type, with every worker busy (the wake list full): the
    idempotency-key index, the counter, the wake list looked at (full: no token), the ready
    list and the job's hash; nothing else."""
    for i in range(70):  # no worker takes their tokens: the wake list is full
        q.enqueue("t", {}, idempotency_key=f"w{i}")
    r.config_resetstat()
    q.enqueue("t", {"n": 1}, idempotency_key="k1")
    ran = {k: n for k, n in calls(r).items() if k not in ("scripts", "config|resetstat")}
    assert ran == {"fcall": 1, "hsetnx": 1, "hincrby": 1, "llen": 1, "lpush": 1, "hset": 1}
    assert r.llen(q.keys.wake) == 64 and r.llen(q.keys.ready) == 71


def test_a_single_enqueue_indexes_a_type_once_a_second(q, r):
    """The type and queue indexes only grow: a single enqueue adds to them for the first job
    of a type, then once a second (by the queue's clock), so an index removed by hand (or by
    a flush) is whole again a second later."""
    q.enqueue("t", {}, idempotency_key="k0")
    r.delete(keys.queues_index(), q.keys.types)
    r.config_resetstat()
    q.enqueue("t", {}, idempotency_key="k1")
    q.clock.advance(999)
    q.enqueue("t", {}, idempotency_key="k2")
    assert "sadd" not in calls(r)  # indexed 999 ms ago
    assert not r.exists(keys.queues_index(), q.keys.types)
    q.enqueue("u", {}, idempotency_key="k3")  # a type not seen yet: indexed now
    assert r.smembers(q.keys.types) == {"u"} and r.smembers(keys.queues_index()) == {"jobs"}
    q.clock.advance(1)
    q.enqueue("t", {}, idempotency_key="k4")  # a second after the first: indexed again
    assert r.smembers(q.keys.types) == {"t", "u"}
    assert calls(r)["sadd"] == 4
    q.clock.advance(-5000)  # a clock set back: the next job of each type is indexed again
    r.delete(q.keys.types)
    q.enqueue("t", {}, idempotency_key="k5")
    assert r.smembers(q.keys.types) == {"t"}
    assert int(r.hget(q.keys.stats, "enqueued")) == 6 and r.llen(q.keys.ready) == 6


@pytest.mark.parametrize("options", [{"delay_s": 60}, {"job_id": "mine"}, {"unique": True}])
def test_a_single_enqueue_the_lean_script_does_not_cover_takes_the_full_one(q, r, options,
                                                                          monkeypatch):
    """A delayed job (scheduled, with its timeline event), a caller's id (kept if it exists)
    and a unique job (its reply may name another job) go to enqueue.lua, in one command."""
    q.enqueue("t", {}, idempotency_key="warm")
    sent: list = []
    conn = q.scripts.pinned.connection()
    _spy(conn, sent, monkeypatch)
    job_id = q.enqueue("t", {"n": 1}, idempotency_key="k1", **options)
    monkeypatch.undo()
    assert len(sent) == 1
    commands = _commands(sent[0])
    assert [(c[0], c[1]) for c in commands] == [(b"FCALL", q.scripts.enqueue.function.encode())]
    assert q.where(job_id) == ["scheduled" if options.get("delay_s") else "ready"]


class _ReadSpy:
    """A hiredis reader that records each piece of reply it is fed."""

    def __init__(self, reader, events: list) -> None:
        self.reader, self.events = reader, events

    def feed(self, data) -> None:
        self.events.append("read")
        self.reader.feed(data)

    def gets(self):
        return self.reader.gets()


def test_enqueue_many_is_one_command_per_chunk_with_the_queue_indexed(q, r, monkeypatch):
    """One round trip: each chunk's command is written as soon as the chunk is made (Redis
    stores it while the next is made) and the replies are read once every chunk is written."""
    q.enqueue("t", {}, idempotency_key="warm")
    r.delete(keys.queues_index())
    r.config_resetstat()
    sent: list = []
    conn = q.scripts.pinned.connection()
    _spy(conn, sent, monkeypatch)
    events: list = []
    io = q.scripts.pinned._local.held.io
    monkeypatch.setattr(io, "reader", _ReadSpy(io.reader, events))
    pack = queue_module.pack_standard
    monkeypatch.setattr(queue_module, "pack_standard", lambda jobs: (
        events.append(f"made {len(jobs)}"), pack(jobs))[1])
    write = scripts.os.write  # _spy's, recording into sent
    monkeypatch.setattr(scripts.os, "write", lambda to, data: (
        events.append("write"), write(to, data))[1])
    ids = q.enqueue_many([JobSpec("t", {}, f"k{i}") for i in range(5)], chunk=2)
    monkeypatch.undo()
    assert events[:6] == ["made 2", "write", "made 2", "write", "made 1", "write"]
    assert set(events[6:]) == {"read"}  # no reply read before the last write
    assert len(sent) == 3
    assert [c[0] for chunk in sent for c in _commands(chunk)] == [b"FCALL"] * 3
    stats = calls(r)
    assert stats["fcall"] == 3 and "hset" in stats
    assert stats["lpush"] == 6  # per call: one LPUSH of its ids and one of the wake tokens
    assert stats["sadd"] == 6  # per call: the type once and the queue index
    assert r.lrange(q.keys.ready, 0, -1)[:5] == ids[::-1]  # the order of one LPUSH per job
    assert r.smembers(keys.queues_index()) == {"jobs"}


def test_enqueue_many_looks_up_the_ids_a_caller_gave(q, r):
    kept = q.enqueue("t", {"v": 1}, idempotency_key="k0", job_id="mine")
    r.config_resetstat()
    ids = q.enqueue_many([JobSpec("t", {"v": 2}, "k1", job_id="mine"), JobSpec("t", {}, "k2")])
    assert ids[0] == kept and calls(r)["exists"] == 2
    assert q.get("mine").payload == {"v": 1}  # the existing job is left as it is
    assert int(r.hget(q.keys.stats, "enqueued")) == 2 and r.llen(q.keys.ready) == 2


def test_without_the_pinned_path_a_single_enqueue_is_the_script_alone(r):
    """The pooled path (clients ``Pinned`` does not serve: a client-side-caching pool) sends
    the script alone: with the queue and type indexes (in the script) for the first job of a
    type, then once a second, as the pinned path does."""
    clock = ManualClock()
    q = Queue(r, "jobs", clock=clock)
    q._pinned = None
    q.enqueue("t", {}, idempotency_key="warm")
    r.delete(keys.queues_index(), q.keys.types)
    r.config_resetstat()
    job_id = q.enqueue("t", {"n": 1}, idempotency_key="k1")  # indexed a moment ago
    stats = calls(r)
    assert stats["fcall"] == 1 and "sadd" not in stats
    assert q.where(job_id) == ["ready"] and not r.exists(keys.queues_index(), q.keys.types)
    clock.advance(1000)
    q.enqueue("t", {"n": 2}, idempotency_key="k2")
    stats = calls(r)
    assert stats["fcall"] == 2 and stats["sadd"] == 2  # the index and the type, in the script
    assert r.smembers(keys.queues_index()) == {"jobs"} and r.smembers(q.keys.types) == {"t"}
    ids = q.enqueue_many([JobSpec("t", {}, f"m{i}") for i in range(3)])
    assert [q.where(i) for i in ids] == [["ready"]] * 3


def test_a_single_enqueue_reloads_flushed_scripts_once(q, r):
    q.enqueue("t", {}, idempotency_key="warm")
    forget_scripts(r)
    job_id = q.enqueue("t", {"n": 1}, idempotency_key="k1")
    assert q.get(job_id).payload == {"n": 1}
    assert int(r.hget(q.keys.stats, "enqueued")) == 2  # stored once, not twice


def test_a_failing_single_enqueue_raises_and_leaves_the_connection_in_step(q, r):
    r.set(q.keys.types, "not a set")  # the script's SADD of the job type fails
    with pytest.raises(Exception, match="WRONGTYPE"):
        q.enqueue("t", {}, idempotency_key="k1")
    assert not r.keys(f"{q.keys.job_prefix}*") and not r.exists(q.keys.ready)  # nothing written
    r.delete(q.keys.types)
    job_id = q.enqueue("t", {}, idempotency_key="k2")  # same pooled connection, next reply
    assert q.where(job_id) == ["ready"] and r.smembers(q.keys.types) == {"t"}


def test_an_idle_wait_returns_the_job_enqueued_during_it_reserved_on_the_servers_clock(r):
    q = Queue(r, "jobs")  # the system clock: the reserve rides behind the wait
    q.enqueue("t", {}, idempotency_key="warm")
    q.reserve("w0")  # the queue is empty again; its wake token is still there
    r.delete(q.keys.wake)
    got: list = []
    waiter = threading.Thread(target=lambda: got.extend(q.wait_and_reserve("w1", 4, 10.0)))
    waiter.start()
    while not [c for c in r.client_list() if c.get("cmd") == "blpop"]:
        threading.Event().wait(0.001)  # until the waiter blocks (not a timeout)
    before_ms = int(time.time() * 1000)
    job_id = q.enqueue("t", {"n": 1}, idempotency_key="k1")
    waiter.join(10)
    after_ms = int(time.time() * 1000)
    assert [j.id for j in got] == [job_id] and got[0].epoch == 1
    assert before_ms - 50 <= got[0].reserved_at <= after_ms + 50  # the server's clock, not the
    assert got[0].deadline == got[0].reserved_at + 30_000          # client's at the send
    assert q.where(job_id) == ["inflight"]


def test_an_idle_wait_reloads_a_flushed_reserve_without_waiting_again(r):
    q = Queue(r, "jobs")
    job_id = q.enqueue("t", {}, idempotency_key="k1")  # leaves one wake token
    forget_scripts(r)
    r.config_resetstat()
    assert [j.id for j in q.wait_and_reserve("w1", 1, 10.0)] == [job_id]
    stats = calls(r)
    assert stats["blpop"] == 1 and stats["fcall"] == 2  # refused, then the reserve alone
    assert stats["function|load"] == 1
    assert r.llen(q.keys.wake) == 0 and q.where(job_id) == ["inflight"]


def test_an_idle_wait_with_an_injected_clock_reserves_on_that_clock(r):
    clock = ManualClock(1_700_000_000_000)
    q = Queue(r, "jobs", clock=clock)
    job_id = q.enqueue("t", {}, idempotency_key="k1")
    [job] = q.wait_and_reserve("w1", 1, 10.0)
    assert job.id == job_id and job.reserved_at == clock()


def test_lock_index_follows_acquire_and_release(r):
    clock = ManualClock()
    locks = Locks(r, clock=clock)
    lock = locks.acquire("order:1", ttl_ms=10_000, owner="w1")
    assert r.zscore(keys.locks_held(), "order:1") == clock() + 10_000
    assert [h.key for h in locks.held()] == ["order:1"]
    assert locks.release(lock) is True
    assert r.zscore(keys.locks_held(), "order:1") is None and locks.held() == []


def test_releasing_someone_elses_lock_keeps_it_in_the_index(r):
    clock = ManualClock()
    locks = Locks(r, clock=clock)
    mine = locks.acquire("order:2", ttl_ms=10_000, owner="w1")
    r.delete(keys.lock("order:2"))  # our lock expired ...
    theirs = locks.acquire("order:2", ttl_ms=10_000, owner="w2")  # ... and w2 took the key
    assert locks.release(mine) is False
    held = locks.held()
    assert [(h.key, h.holder) for h in held] == [("order:2", theirs.token)]
    assert locks.renew(mine) is False and mine.lost


def test_acquire_can_release_the_previous_lock_in_the_same_round_trip(r):
    locks = Locks(r, clock=ManualClock())
    first = locks.acquire("sku:1", ttl_ms=10_000)
    r.config_resetstat()
    second = locks.acquire("sku:1", ttl_ms=10_000, release=first)  # same key: freed, retaken
    assert second.fence == first.fence + 1 and second.token != first.token
    third = locks.acquire("sku:2", ttl_ms=10_000, release=second)
    assert [h.key for h in locks.held()] == ["sku:2"] and third.fence == 1
    assert calls(r)["fcall"] == 4


# --- database connections ----------------------------------------------------------------

def _backend_pid(engine) -> int:
    with engine.connect() as c:
        return int(c.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pg_url: str, pid: int) -> None:
    libpq = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.postgres
def test_idle_pooled_connection_that_died_is_replaced_at_checkout(pg_url):
    engine = make_engine(pg_url, ping_idle_s=0)  # every checkout counts as idle
    pid = _backend_pid(engine)
    _terminate(pg_url, pid)
    assert _backend_pid(engine) != pid  # no error reached the caller
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("idle_s, pings", [(3600, 0), (0, 1)])
def test_only_a_connection_idle_long_enough_is_pinged(pg_url, idle_s, pings):
    engine = make_engine(pg_url, ping_idle_s=idle_s)
    pid = _backend_pid(engine)
    seen = []
    real_ping = engine.dialect.do_ping
    engine.dialect.do_ping = lambda conn: seen.append(conn) or real_ping(conn)
    assert _backend_pid(engine) == pid
    assert len(seen) == pings
    engine.dispose()


@pytest.mark.postgres
def test_store_retries_once_when_its_connection_died_in_use(pg_url, monkeypatch):
    import antre.stores.sql
    monkeypatch.setattr(antre.stores.sql, "PING_IDLE_S", 3600)  # a pooled connection counts as hot
    migrate(pg_url)
    engine = make_engine(pg_url)
    store = IdempotencyStore(session_factory(engine), clock=ManualClock())
    auto = store._auto
    pid = _backend_pid(auto)  # the store's own autocommit pool
    _terminate(pg_url, pid)  # killed while pooled and "hot": the idle ping does not run
    b = store.begin("k1", "fp", "t", "j1", 1, "w1", 10**13)
    assert b.outcome == ACQUIRED
    assert _backend_pid(auto) != pid
    engine.dispose()
    auto.dispose()


def test_a_client_that_returns_bytes_is_refused_with_the_fix(redis_url):
    import redis

    from antre import Antre
    with pytest.raises(ValueError, match="decode_responses=True"):
        Antre(redis_client=redis.Redis.from_url(redis_url))
    app = Antre(redis_client=redis.Redis.from_url(redis_url, decode_responses=True))
    assert app.queue().enqueue("t", {}, idempotency_key="k")


def test_direct_after_a_script_flush_loads_each_script_once_and_resends_only_the_refused(r):
    """``direct`` and the pinned connection's streamed calls (``scripts._settle``) keep the
    same rounds as ``Batch`` (``scripts.Resend``): after ``SCRIPT FLUSH`` each script is loaded
    once, each refused call runs once more, the plain command between them runs once."""
    add = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    push = r.register_script("return redis.call('RPUSH', KEYS[1], ARGV[1])")
    calls_ = [(add, ["a"], [1]), (None, ["INCR", "plain"], ()), (push, ["l"], ["x"]),
              (add, ["a"], [10])]
    assert scripts.direct(r, calls_) == [1, 1, 1, 11]  # loaded by redis-py's first call
    pinned = scripts.Pinned(r)
    for send in (lambda: scripts.direct(r, calls_), lambda: pinned.call(calls_),
                 lambda: pinned.call_made(iter(calls_))):
        r.script_flush()
        r.config_resetstat()
        before = int(r.get("a"))
        replies = send()
        assert replies[0] == before + 1 and replies[3] == before + 11
        stats = calls(r)
        assert stats["evalsha"] == 3 + 3 and stats["script|load"] == 2, stats
        assert stats["incr"] == 1  # the plain command is not sent again
    assert int(r.get("a")) == 4 * 11 and int(r.get("plain")) == 4 and r.llen("l") == 4


def test_direct_raises_a_script_error_once_every_reply_is_read(r):
    bad = r.register_script("return redis.call('INCR', KEYS[1])")
    r.set("text", "not a number")
    r.script_flush()
    with pytest.raises(Exception, match="not an integer"):
        scripts.direct(r, [(bad, ["text"], []), (None, ["SET", "after", "1"], ())])
    assert r.get("after") == "1" and scripts.direct(r, [(None, ["PING"], ())]) == ["PONG"]
