"""Per-key lock contention over the last 5 minutes / hour beside the total: counted in minute
buckets by the conflict script, read back by one script (time from a ManualClock)."""

from __future__ import annotations

import pytest

from antre.engine import keys
from antre.clock import ManualClock
from antre.engine.locks import LockBusy, LockContention, Locks

START_MS = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # on a minute boundary


def _conflict(locks: Locks, key: str) -> None:
    with pytest.raises(LockBusy):
        locks.acquire(key, 600_000, owner="second")


def test_contention_by_key_over_5_minutes_an_hour_and_ever(r) -> None:
    clock = ManualClock(START_MS)
    locks = Locks(r, clock=clock)
    locks.acquire("sku:1", 10_000_000, owner="first")
    locks.acquire("sku:2", 10_000_000, owner="first")
    for _ in range(3):
        _conflict(locks, "sku:1")  # 3 at t0
    clock.advance(30 * 60_000)
    _conflict(locks, "sku:2")  # 1 at t0+30 min
    clock.advance(27 * 60_000)
    for _ in range(2):
        _conflict(locks, "sku:2")  # 2 at t0+57 min
    assert locks.contention() == [LockContention("sku:2", 2, 3, 3),
                                  LockContention("sku:1", 0, 3, 3)]
    clock.advance(4 * 60_000)  # t0+61: sku:1's conflicts left the hour, sku:2's 5-minute window
    assert locks.contention() == [LockContention("sku:2", 2, 3, 3),
                                  LockContention("sku:1", 0, 0, 3)]
    clock.advance(2 * 60_000)  # t0+63: the two at +57 are 6 minutes old
    assert locks.contention()[0] == LockContention("sku:2", 0, 3, 3)
    assert locks.conflicts_since(clock() - 3_600_000) == 3  # the all-keys timeline agrees
    assert not r.exists(keys.lock_contention_scratch())


def test_minute_buckets_expire_after_the_hour(r) -> None:
    clock = ManualClock(START_MS)
    locks = Locks(r, clock=clock)
    locks.acquire("sku:9", 600_000, owner="first")
    _conflict(locks, "sku:9")
    bucket = keys.lock_conflict_minute(START_MS // 60_000)
    assert r.zscore(bucket, "sku:9") == 1
    assert 3_600_000 < r.pttl(bucket) <= 61 * 60_000
