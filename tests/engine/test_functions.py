"""Antre's scripts as one Redis Functions library: loaded once per server
(``FUNCTION LOAD``), each transition one ``FCALL`` that runs only the script's own body; a
server that cannot take the library (no Redis Functions, an ACL without them), a Redis
Cluster client and ``ANTRE_REDIS_FUNCTIONS=0`` call the same scripts by ``EVALSHA``."""

from __future__ import annotations

import logging

import pytest
import redis

from antre.clock import ManualClock
from antre.engine import keys
from antre.engine.locks import Locks
from antre.engine.queue import JobSpec, Queue
from antre.engine.scripts import NAMES, Library, library


def calls(r) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def _libraries(r) -> dict[str, list[str]]:
    """Library name -> its function names, as the server lists them."""
    out = {}
    for lib in r.function_list():
        fields = dict(zip(lib[::2], lib[1::2]))
        out[fields["library_name"]] = sorted(dict(zip(f[::2], f[1::2]))["name"]
                                             for f in fields["functions"])
    return out


def _round(q: Queue, n: int = 3) -> None:
    """Enqueue, reserve and ack ``n`` jobs; each ends done."""
    ids = q.enqueue_many([JobSpec("t", {"i": i}, f"k{i}") for i in range(n)])
    jobs = q.reserve("w1", count=n)
    assert sorted(j.id for j in jobs) == sorted(ids)
    assert q.ack_many([(j, {"ok": True}) for j in jobs]) == []
    assert r_zcard(q) == n


def r_zcard(q: Queue) -> int:
    return int(q.redis.zcard(q.keys.done))


def test_every_script_is_a_function_of_one_library_loaded_once(r):
    r.function_flush()
    r.config_resetstat()
    q = Queue(r, "jobs", clock=ManualClock())
    _round(q)
    q.enqueue("t", {}, idempotency_key="one")  # the pinned path
    stats = calls(r)
    assert stats["function|load"] == 1  # the first call was refused, the library loaded
    assert stats["fcall"] == 1 + 1 + 1 + 1 + 1  # refused, enqueue_many, reserve, ack, enqueue
    assert "evalsha" not in stats and "script|load" not in stats
    name, _ = library()
    assert _libraries(r) == {name: sorted(f"{name}_{n}" for n in NAMES)}
    assert q.scripts.library.functions is True


def test_a_library_lost_on_the_server_is_loaded_again_on_each_path(r):
    """A restart of a server without persistence loses the library as it loses the script
    cache: each way of calling a script (a script's own call, ``script_raw``, ``Batch``, the
    pinned connection) loads it once and sends the refused call again, which runs once."""
    clock = ManualClock()
    q = Queue(r, "jobs", clock=clock)
    locks = Locks(r, clock=clock)
    q.enqueue("t", {}, idempotency_key="warm")
    for path in ("call", "pinned", "raw", "batch"):
        r.function_flush()
        r.config_resetstat()
        if path == "call":  # NamedScript.__call__
            lock = locks.acquire("order:1", ttl_ms=10_000)
            assert lock.fence == 1 and r.get(keys.lock("order:1")) is not None
        elif path == "pinned":
            q.enqueue("t", {}, idempotency_key="k1")
            assert int(r.hget(q.keys.stats, "enqueued")) == 2  # stored once
        elif path == "raw":  # a client the pinned path does not serve: script_raw
            pinned, q._pinned = q._pinned, None
            jobs = q.reserve("w1", count=5)
            q._pinned = pinned
            assert len(jobs) == 2 and {j.epoch for j in jobs} == {1}  # reserved once
        else:
            assert q.ack_many([(j, None) for j in jobs]) == []
            assert r.zcard(q.keys.done) == 2 and int(r.hget(q.keys.stats, "acked")) == 2
        stats = calls(r)
        assert stats["function|load"] == 1 and stats["fcall"] == 2, (path, stats)


def test_a_server_without_functions_runs_every_script_by_evalsha(embedded_redis_factory,
                                                                 caplog):
    """A server that knows no FCALL (before Redis 7; here both commands are renamed away):
    the first call is refused, the client turns to EVALSHA for good with one warning, and
    every transition works as before."""
    server = embedded_redis_factory(extra_args=["--rename-command", "FCALL", "",
                                                "--rename-command", "FUNCTION", ""])
    client = redis.Redis.from_url(server.url, decode_responses=True)
    q = Queue(client, "jobs", clock=ManualClock())
    with caplog.at_level(logging.WARNING, logger="antre.scripts"):
        _round(q, 4)
        _round(Queue(client, "other", clock=ManualClock()), 2)
    assert q.scripts.library.functions is False
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "antre.scripts"]
    assert len(warned) == 2 and "EVALSHA" in warned[0]  # one per client's Scripts
    assert "unknown command" in warned[0]
    assert calls(client)["evalsha"] >= 6 and "fcall" not in calls(client)
    client.close()


def test_a_user_whose_acl_refuses_functions_runs_scripts_by_evalsha(embedded_redis_factory):
    server = embedded_redis_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    admin.acl_setuser("app", enabled=True, nopass=True, keys=["*"], channels=["*"],
                      commands=["+@all", "-fcall", "-function"])
    client = redis.Redis(unix_socket_path=server.socket_path, username="app", password="x",
                         decode_responses=True)
    q = Queue(client, "jobs", clock=ManualClock())
    _round(q, 3)
    assert q.scripts.library.functions is False
    assert _libraries(admin) == {}  # nothing loaded behind the ACL's back
    assert calls(admin)["evalsha"] >= 3
    client.close()
    admin.close()


def test_functions_can_be_turned_off(r, monkeypatch):
    monkeypatch.setenv("ANTRE_REDIS_FUNCTIONS", "0")
    r.function_flush()
    r.config_resetstat()
    q = Queue(r, "jobs", clock=ManualClock())
    _round(q, 2)
    stats = calls(r)
    assert "fcall" not in stats and "function|load" not in stats and stats["evalsha"] >= 3
    assert _libraries(r) == {}


def test_another_version_s_library_is_left_alone(r):
    """Two versions of Antre on one server (a rolling deploy) each load and call their own
    library: the name carries a digest of the code, and loading one never replaces the other."""
    name, code = library()
    assert name.startswith("antre_") and len(name) == len("antre_") + 16
    older = code.replace(name, "antre_" + "0" * 16).replace(
        "local TL_CAP = 100", "local TL_CAP = 99")
    r.function_load(older)
    q = Queue(r, "jobs", clock=ManualClock())
    _round(q, 2)
    assert set(_libraries(r)) == {name, "antre_" + "0" * 16}


@pytest.mark.cluster
def test_a_cluster_client_calls_scripts_by_evalsha(redis_cluster):
    """redis-py routes FCALL on a cluster by asking ``COMMAND GETKEYS`` first (a round trip
    per call): a cluster client keeps EVALSHA."""
    from redis.cluster import ClusterNode, RedisCluster
    rc = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in redis_cluster],
                      decode_responses=True)
    try:
        assert Library(rc).functions is False
        q = Queue(rc, "fx", clock=ManualClock())
        ids = q.enqueue_many([JobSpec("t", {}, f"c{i}") for i in range(2)])
        assert sorted(j.id for j in q.reserve("w1", count=2)) == sorted(ids)
    finally:
        rc.close()


def test_the_script_names_files_and_attributes_agree(r):
    """Each script is declared once, by its file (``Scripts.<name> = Lua("<name>.lua")``):
    ``NAMES`` is those declarations, every script file of the package is one of them, and a
    ``Scripts`` holds each as its registered script."""
    from importlib import resources

    from antre.engine.scripts import Lua, NamedScript, Scripts

    files = sorted(p.name.removesuffix(".lua") for p in resources.files("antre.engine.lua").iterdir()
                   if p.name.endswith(".lua") and not p.name.startswith("_"))
    assert sorted(NAMES) == files and len(set(NAMES)) == len(NAMES)
    scripts = Scripts(r)
    for name in NAMES:
        declared = vars(Scripts)[name]
        assert isinstance(declared, Lua) and declared.file == f"{name}.lua"
        held = getattr(scripts, name)
        assert isinstance(held, NamedScript) and held.antre_name == name
        assert held.script.endswith(declared.source())
    with pytest.raises((TypeError, RuntimeError)):
        type("Wrong", (), {"reserve": Lua("ack.lua")})
