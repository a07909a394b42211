"""``antre.observe.memory``: Redis's eviction policy, read from CONFIG, from INFO when CONFIG is
disabled (managed Redis), else "unknown" — on private redis-servers started as each case needs."""

from __future__ import annotations

import redis

from antre.embedded import EmbeddedRedis
from antre.observe.memory import memory_policy


def _client(*args: str) -> tuple[EmbeddedRedis, redis.Redis]:
    server = EmbeddedRedis(tcp=True, extra_args=list(args)).start()
    return server, redis.Redis.from_url(server.url, decode_responses=True)


def test_an_evicting_policy_is_reported_with_what_to_set():
    server, client = _client("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    try:
        mem = memory_policy(client)
    finally:
        server.stop()
    assert (mem.policy, mem.source, mem.evicts) == ("allkeys-lru", "config", True)
    assert mem.maxmemory_bytes == 64 * 1024 * 1024 and mem.used_bytes
    assert "allkeys-lru" in mem.warning and "Set maxmemory-policy noeviction" in mem.warning


def test_noeviction_has_no_warning():
    server, client = _client()  # EmbeddedRedis runs noeviction, no maxmemory
    try:
        mem = memory_policy(client)
    finally:
        server.stop()
    assert (mem.policy, mem.evicts, mem.warning, mem.maxmemory_bytes) == (
        "noeviction", False, None, 0)


def test_config_disabled_falls_back_to_info_memory():
    server, client = _client("--maxmemory-policy", "volatile-ttl", "--rename-command", "CONFIG",
                             "")
    try:
        mem = memory_policy(client)
    finally:
        server.stop()
    assert (mem.policy, mem.source, mem.evicts) == ("volatile-ttl", "info", True)


def test_config_and_info_disabled_is_unknown_and_says_so():
    server, client = _client("--rename-command", "CONFIG", "", "--rename-command", "INFO", "")
    try:
        mem = memory_policy(client)
    finally:
        server.stop()
    assert (mem.policy, mem.source, mem.evicts) == ("unknown", "none", False)
    assert "could not be read" in mem.warning and "noeviction" in mem.warning
