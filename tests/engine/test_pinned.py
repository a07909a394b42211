"""The producer's per-thread connection (``scripts.Pinned``): a single
enqueue skips the pool's checkout and release, and loses none of what the pool gave it: a
connection the server closed is reconnected before anything is written, an error mid-call
leaves nothing half-read, a forked child never writes on its parent's socket, a thread's
connection goes back to the pool when the thread ends, ``close()`` closes it."""

from __future__ import annotations

import gc
import re
import os
import threading
import time

import pytest
import redis
import redis.backoff
import redis.retry

import antre
from antre.engine import keys, scripts
from antre.engine.envelope import TRACEPARENT
from antre.engine.queue import JobSpec, Queue
from antre.engine.scripts import Pinned, Scripts


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def _client_id(conn) -> int:
    conn.send_command("CLIENT", "ID")
    return int(conn.read_response())


def test_a_threads_enqueues_share_one_connection_checked_out_once(redis_url, r):
    client = _client(redis_url)
    q = Queue(client, "jobs")
    pool = client.connection_pool
    q.enqueue("t", {}, idempotency_key="warm")
    conn = q.scripts.pinned.connection()
    before = _client_id(conn)
    for i in range(5):
        q.enqueue("t", {"i": i}, idempotency_key=f"k{i}")
    q.enqueue_many([JobSpec("t", {}, f"m{i}") for i in range(3)])
    assert q.scripts.pinned.connection() is conn and _client_id(conn) == before
    assert conn in pool._in_use_connections  # held out of the pool while the thread lives
    assert r.llen(q.keys.ready) == 9 and int(r.hget(q.keys.stats, "enqueued")) == 9
    client.close()


def test_a_killed_connection_is_reconnected_before_the_next_enqueue(redis_url, r):
    client = _client(redis_url)  # redis-py's default: no retries
    q = Queue(client, "jobs")
    first = q.enqueue("t", {}, idempotency_key="k1")
    conn = q.scripts.pinned.connection()
    r.client_kill_filter(_id=_client_id(conn))  # as an operator's CLIENT KILL, or a timeout
    second = q.enqueue("t", {}, idempotency_key="k2")  # no error: reconnected first
    assert [q.where(i) for i in (first, second)] == [["ready"], ["ready"]]
    assert int(r.hget(q.keys.stats, "enqueued")) == 2
    client.close()


@pytest.mark.parametrize("tcp", [True, False], ids=["tcp", "unix"])
def test_the_pinned_connection_survives_a_redis_restart(embedded_redis_factory, tcp):
    server = embedded_redis_factory(tcp=tcp, appendonly=True)
    app = antre.Antre(redis_url=server.url)  # the app's own client, as a producer has it
    first = app.enqueue("t", {}, idempotency_key="k1")
    server.restart()  # the socket is closed under the held connection; the scripts are gone
    second = app.enqueue("t", {}, idempotency_key="k2")
    q = app.queue()
    assert [q.where(i) for i in (first, second)] == [["ready"], ["ready"]]
    assert int(app.redis.hget(q.keys.stats, "enqueued")) == 2
    assert app.redis.smembers(keys.queues_index()) == {q.name}
    app.redis.close()


def test_a_server_gone_mid_call_is_a_clear_error_then_the_next_enqueue_works(
        embedded_redis_factory):
    server = embedded_redis_factory(tcp=True, appendonly=True)
    client = _client(server.url)
    q = Queue(client, "jobs")
    q.enqueue("t", {}, idempotency_key="k1")
    server._stop_process()  # the server dies; its data dir (and AOF) stay
    with pytest.raises(redis.ConnectionError):
        q.enqueue("t", {}, idempotency_key="k2")
    server.start()
    job_id = q.enqueue("t", {}, idempotency_key="k3")
    assert q.where(job_id) == ["ready"]
    assert int(client.hget(q.keys.stats, "enqueued")) == 2  # k1 (kept by the AOF) and k3
    client.close()


def test_an_error_reply_leaves_the_connection_in_step(redis_url, r):
    client = _client(redis_url)
    q = Queue(client, "jobs")
    q.enqueue("t", {}, idempotency_key="warm")
    conn = q.scripts.pinned.connection()
    r.set(keys.queues_index(), "not a set")  # the script's last SADD fails
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.enqueue("u", {}, idempotency_key="k1")  # the first job of its type: indexed
    r.delete(keys.queues_index())
    job_id = q.enqueue("t", {}, idempotency_key="k2")
    assert q.scripts.pinned.connection() is conn and conn._sock is not None
    assert q.where(job_id) == ["ready"]
    client.close()


def test_a_threads_connection_goes_back_to_the_pool_when_the_thread_ends(redis_url, r):
    client = _client(redis_url)
    q = Queue(client, "jobs")
    pool = client.connection_pool
    seen: list = []
    together = threading.Barrier(4)

    def produce(n: int) -> None:
        q.enqueue("t", {}, idempotency_key=f"k{n}")
        seen.append(q.scripts.pinned.connection())
        together.wait(10)  # all four hold theirs at once

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert len(set(map(id, seen))) == 4  # one connection per thread while they ran
    assert not pool._in_use_connections  # all four back in the pool
    assert len(pool._available_connections) == pool._created_connections
    assert r.llen(q.keys.ready) == 4
    client.close()


def test_release_gives_the_connection_back_and_close_disconnects_it(redis_url):
    client = _client(redis_url)
    q = Queue(client, "jobs")
    q.enqueue("t", {}, idempotency_key="k1")
    conn = q.scripts.pinned.connection()
    q.scripts.pinned.release()
    assert conn not in client.connection_pool._in_use_connections
    q.enqueue("t", {}, idempotency_key="k2")  # checked out again (the same one, idle)
    conn = q.scripts.pinned.connection()
    client.close()
    assert conn._sock is None  # close() disconnects the held connection like any other
    q.enqueue("t", {}, idempotency_key="k3")  # and a later enqueue connects again
    assert client.llen(q.keys.ready) == 3
    client.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_uses_its_own_connection_not_its_parents(redis_url, r):
    client = _client(redis_url)
    q = Queue(client, "jobs")
    q.enqueue("t", {}, idempotency_key="parent1")
    parent_id = _client_id(q.scripts.pinned.connection())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: enqueue, report the connection's server-side id
        code = 1
        try:
            q.enqueue("t", {}, idempotency_key="child")
            os.write(write, str(_client_id(q.scripts.pinned.connection())).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    child_id = int(os.read(read, 64) or b"0")
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_id and child_id != parent_id
    # the parent's connection was neither used nor shut down by the child
    q.enqueue("t", {}, idempotency_key="parent2")
    assert _client_id(q.scripts.pinned.connection()) == parent_id
    assert r.llen(q.keys.ready) == 3
    client.close()


def test_clients_the_pinned_path_does_not_serve(redis_url):
    single = redis.Redis.from_url(redis_url, decode_responses=True, single_connection_client=True)
    assert Scripts(single).pinned is None
    q = Queue(single, "jobs")
    job_id = q.enqueue("t", {}, idempotency_key="k1")
    assert q.where(job_id) == ["ready"] and single.smembers(keys.queues_index()) == {"jobs"}
    single.close()
    assert Pinned.of(_client(redis_url)) is not None


def test_a_non_utf8_client_packs_with_redis_py(redis_url, r):
    client = redis.Redis.from_url(redis_url, decode_responses=True, encoding="latin-1")
    q = Queue(client, "jobs")
    assert not q.scripts.pinned.fast_pack
    job_id = q.enqueue("t", {"name": "é"}, idempotency_key="clé")
    assert q.where(job_id) == ["ready"]
    # the job's values travel as UTF-8 JSON whatever the client's encoding (as before)
    assert r.hget(q.keys.job(job_id), "idem_key") == "clé"
    client.close()


def test_new_ids_and_traceparents_are_well_formed_and_distinct(r):
    """One ``os.urandom`` per job (or per batch) makes its id; a job without a trace of its own
    has the traceparent made from the id's random bits (not stored); a job with the
    caller's id gets a trace of its own bits, stored."""
    q = Queue(r, "jobs")
    ids = [q.enqueue("t", {}, idempotency_key=f"k{i}") for i in range(3)]
    ids += q.enqueue_many([JobSpec("t", {}, f"m{i}") for i in range(50)])
    traces = [q.get(i).trace_id for i in ids]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert all(TRACEPARENT.match(t) for t in traces)
    assert len(set(ids)) == len(ids) == len({t[3:35] for t in traces})  # ids, trace ids
    assert traces == [f"00-{i}-{i[16:]}-01" for i in ids]  # the id's 128 bits, read back
    assert not any(r.hexists(q.keys.job(i), "trace_id") for i in ids)
    own = [q.enqueue("t", {}, idempotency_key=f"o{i}", job_id=f"own-{i}") for i in range(20)]
    stored = [r.hget(q.keys.job(i), "trace_id") for i in own]
    assert all(TRACEPARENT.match(t) for t in stored) and len(set(stored)) == 20
    assert [q.get(i).trace_id for i in own] == stored


def test_an_auth_url_reconnects_with_its_password(embedded_redis_factory):
    server = embedded_redis_factory(tcp=True)
    admin = _client(server.url)
    admin.config_set("requirepass", "s3cret")  # new connections must AUTH from now on
    url = server.url.replace("redis://", "redis://:s3cret@")
    with pytest.raises(redis.AuthenticationError):
        _client(server.url).ping()
    app = antre.Antre(redis_url=url)
    first = app.enqueue("t", {}, idempotency_key="k1")
    conn = app.queue().scripts.pinned.connection()
    app.redis.client_kill_filter(_id=_client_id(conn))
    second = app.enqueue("t", {}, idempotency_key="k2")  # reconnected, authenticated again
    q = app.queue()
    assert [q.where(i) for i in (first, second)] == [["ready"], ["ready"]]
    admin.config_set("requirepass", "")
    app.redis.close()
    admin.close()


def test_a_blocking_pool_gets_its_connection_back_from_a_finished_thread(redis_url):
    pool = redis.BlockingConnectionPool.from_url(redis_url, decode_responses=True,
                                                 max_connections=2, timeout=5)
    client = redis.Redis(connection_pool=pool)
    q = Queue(client, "jobs")
    for n in range(4):  # more threads than connections, one after the other
        t = threading.Thread(target=q.enqueue, args=("t", {}), kwargs={"idempotency_key": f"k{n}"})
        t.start()
        t.join()
    gc.collect()
    assert client.llen(q.keys.ready) == 4  # each thread's connection went back in time
    client.close()


# -- the pinned connection's own reads and writes (scripts._SocketIO) -----------------------

def _app_client(url: str, **kwargs) -> redis.Redis:
    """A client as ``Antre`` makes one: a socket timeout and a health check interval."""
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=10,
                                socket_connect_timeout=5, health_check_interval=30, **kwargs)


@pytest.mark.parametrize("make", [_client, _app_client], ids=["blocking", "timeout"])
def test_writes_and_replies_larger_than_a_socket_buffer_arrive_whole(redis_url, make):
    client = make(redis_url)
    pinned = Pinned.of(client)
    assert pinned.direct_io
    big = "é" * 2_000_000 + "end"  # ~4 MB of UTF-8 each way: partial writes, many reads
    assert pinned.call([(None, ("SET", "big", big), ()), (None, ("STRLEN", "big"), ()),
                        (None, ("GET", "big"), ())]) == ["OK", 4_000_003, big]
    q = Queue(client, "jobs")
    job_id = q.enqueue("t", {"after": "big"}, idempotency_key="k1")  # still in step
    assert q.where(job_id) == ["ready"] and q.get(job_id).payload == {"after": "big"}
    client.close()


def test_an_error_reply_amid_others_is_raised_after_all_are_read(redis_url, r):
    client = _app_client(redis_url)
    pinned = Pinned.of(client)
    r.set("s", "a string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        pinned.call([(None, ("INCR", "n"), ()), (None, ("LPUSH", "s", "x"), ()),
                     (None, ("INCR", "n"), ())])
    assert r.get("n") == "2"  # the commands around it ran
    assert pinned.call([(None, ("GET", "n"), ())]) == ["2"]  # and nothing was left unread
    client.close()


def test_the_health_check_and_its_schedule_are_kept(redis_url, r):
    client = _app_client(redis_url)
    q = Queue(client, "jobs")
    q.enqueue("t", {}, idempotency_key="warm")
    conn = q.scripts.pinned.connection()
    assert conn.next_health_check > time.monotonic() + 20  # moved on by the call
    conn.next_health_check = time.monotonic() - 1  # idle past the interval (no waiting)
    r.config_resetstat()
    job_id = q.enqueue("t", {}, idempotency_key="k1")
    stats = r.info("commandstats")
    assert stats["cmdstat_ping"]["calls"] == 1 and stats["cmdstat_fcall"]["calls"] == 1
    assert q.where(job_id) == ["ready"] and q.scripts.pinned.connection() is conn
    client.close()


def test_a_reply_late_past_the_socket_timeout_is_never_read_as_the_next_one(redis_url, r):
    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=0.05,
                                  retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    pinned = Pinned.of(client)
    with pytest.raises(redis.TimeoutError):
        pinned.call([(None, ("BLPOP", "nothing", 1), ())])  # the server answers in 1 s
    r.rpush("nothing", "late")  # would answer that BLPOP, had its socket been kept
    assert pinned.call([(None, ("GET", "k"), ())]) == [None]  # a new socket: its own reply
    assert r.lrange("nothing", 0, -1) == ["late"]  # the old BLPOP went with its socket
    client.close()


def test_direct_reads_and_writes_are_for_plain_resp2_connections(redis_url, tmp_path):
    assert Pinned.of(_client(redis_url)).direct_io
    assert Pinned.of(_app_client(redis_url)).direct_io
    resp3 = redis.Redis.from_url(redis_url, decode_responses=True, protocol=3)
    assert not Pinned.of(resp3).direct_io  # push messages: redis-py's parser reads them
    q = Queue(resp3, "jobs")
    assert q.where(q.enqueue("t", {}, idempotency_key="k1")) == ["ready"]
    many = q.enqueue_many([JobSpec("t", {}, f"m{i}") for i in range(5)], chunk=2)  # made first
    assert [q.where(i) for i in many] == [["ready"]] * 5 and resp3.llen(q.keys.ready) == 6
    raw = redis.Redis.from_url(redis_url)  # bytes replies: the reader does not decode
    assert Pinned.of(raw).direct_io
    assert Pinned.of(raw).call([(None, ("ECHO", "é"), ())]) == ["é".encode()]
    resp3.close()
    raw.close()


def test_a_reply_nobody_read_is_never_taken_for_the_next_one(redis_url):
    client = _app_client(redis_url)
    pinned = Pinned.of(client)
    conn = pinned.connection()
    conn.send_command("ECHO", "stale")  # out of step: its reply is left on the socket
    assert conn.can_read(timeout=5)  # it has arrived (waits for it, not for a time)
    assert pinned.call([(None, ("ECHO", "fresh"), ())]) == ["fresh"]
    assert pinned.connection() is conn  # the same connection, on a new socket
    client.close()


@pytest.mark.parametrize("how", ["enqueue", "enqueue_many", "enqueue_many in chunks"])
def test_a_call_sent_again_after_its_reply_was_lost_makes_each_job_ready_once(
        redis_url, r, monkeypatch, how):
    """The connection drops after the server ran the enqueue, before its reply is read; the
    client's retry policy sends the same call again (same job ids). The scripts find those ids
    stored and change nothing: each job is in the ready list once (a second copy would be
    reserved again while the first delivery is in flight) and counted once."""
    client = _app_client(redis_url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1))
    q = Queue(client, "jobs")
    q.enqueue("w", {}, idempotency_key="warm")
    real, lost = scripts._SocketIO.exchange, []

    def reply_lost(self, conn, pieces):
        replies = real(self, conn, pieces)  # the server ran the calls and answered
        if not lost:
            lost.append(replies)
            conn.disconnect()
            raise redis.ConnectionError("connection lost before the reply was read")
        return replies

    monkeypatch.setattr(scripts._SocketIO, "exchange", reply_lost)
    ids = ([q.enqueue("t", {"n": 1}, idempotency_key="k1")] if how == "enqueue" else
           q.enqueue_many([JobSpec("t", {"n": i}, f"k{i}") for i in range(3)])
           if how == "enqueue_many" else  # in chunks: each written as it was made, then lost
           q.enqueue_many([JobSpec("t", {"n": i}, f"k{i}") for i in range(5)], chunk=2))
    monkeypatch.undo()
    assert lost  # the first reply was lost, and the call was sent again
    ready = r.lrange(q.keys.ready, 0, -1)
    assert sorted(ready) == sorted([*ids, ready[-1]])  # each new id once, beside "warm"'s
    assert int(r.hget(q.keys.stats, "enqueued")) == 1 + len(ids)
    client.close()


def test_a_connection_lost_amid_the_chunks_makes_the_rest_and_stores_each_job_once(
        redis_url, r, monkeypatch):
    """enqueue_many writes each chunk as it is made; the connection drops after the first
    chunk was written and run, before the next was made. The retry makes the rest and sends
    every chunk again: the first chunk's jobs are found stored (unchanged), the rest stored."""
    client = _app_client(redis_url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1))
    q = Queue(client, "jobs")
    q.enqueue_many([JobSpec("w", {}, "warm")])  # the server knows enqueue.lua from now on
    real, dropped = scripts._SocketIO.exchange, []

    def drop_after_the_first(self, conn, pieces):
        if dropped:
            return real(self, conn, pieces)
        first = next(iter(pieces))
        dropped.append(real(self, conn, [first]))  # run by the server, its reply read
        conn.disconnect()
        raise redis.ConnectionError("connection lost amid the chunks")

    monkeypatch.setattr(scripts._SocketIO, "exchange", drop_after_the_first)
    ids = q.enqueue_many([JobSpec("t", {"n": i}, f"k{i}") for i in range(5)], chunk=2)
    monkeypatch.undo()
    assert dropped == [[[1, 1]]]  # the first chunk only, before the drop
    assert len(set(ids)) == 5 and [q.where(i) for i in ids] == [["ready"]] * 5
    assert r.llen(q.keys.ready) == 6  # each id once, beside "warm"'s
    assert int(r.hget(q.keys.stats, "enqueued")) == 6
    client.close()
