"""The retry policy and error classification are pure: tested without Redis."""

from __future__ import annotations

import random
import statistics

import pytest

from antre import Permanent, RateLimited, Retryable
from antre.errors import JobTimeout
from antre.engine.retry import RetryPolicy, classify, error_signature


def test_backoff_grows_then_caps():
    p = RetryPolicy(base_ms=1000, factor=2, cap_ms=10_000, jitter=0.5)
    assert [p.bounds_ms(n)[1] for n in range(1, 7)] == [1000, 2000, 4000, 8000, 10_000, 10_000]


def test_backoff_stays_within_bounds_and_spreads():
    p = RetryPolicy(base_ms=1000, factor=2, cap_ms=60_000, jitter=0.5)
    rng = random.Random(7)
    for attempt in range(1, 12):
        low, high = p.bounds_ms(attempt)
        draws = [p.backoff_ms(attempt, rng) for _ in range(2000)]
        assert min(draws) >= low and max(draws) <= high
        # jitter spreads the draws over the window instead of stacking them on one value
        assert len(set(draws)) > min(500, 0.8 * (high - low))
        assert statistics.pstdev(draws) > (high - low) / 5
        assert max(draws) - min(draws) > 0.8 * (high - low)


def test_zero_jitter_is_deterministic():
    p = RetryPolicy(base_ms=500, jitter=0)
    assert {p.backoff_ms(3) for _ in range(50)} == {2000}


def test_horizon_sums_the_upper_bounds():
    p = RetryPolicy(base_ms=1000, factor=2, cap_ms=5000)
    assert p.horizon_ms(4) == 1000 + 2000 + 4000


@pytest.mark.parametrize("exc, attempt, action, spend, kind", [
    (ValueError("boom"), 1, "retry", True, "error"),
    (Retryable("again"), 2, "retry", True, "retryable"),
    (JobTimeout("slow"), 1, "retry", True, "timeout"),
    (ValueError("boom"), 3, "dead", True, "error"),
    (Permanent("no"), 1, "dead", True, "permanent"),
    (RateLimited(2.5), 3, "snooze", False, "rate_limited"),
])
def test_classify(exc, attempt, action, spend, kind):
    d = classify(exc, attempt, 3, RetryPolicy(), random.Random(1))
    assert (d.action, d.spend_attempt, d.kind) == (action, spend, kind)
    if action == "snooze":
        assert d.delay_ms == 2500
    if action == "dead" and kind != "permanent":
        assert "attempts exhausted (3/3)" in d.reason


def test_retry_after_is_a_floor():
    d = classify(Retryable("429", retry_after_s=30), 1, 5, RetryPolicy(base_ms=10), random.Random(1))
    assert d.delay_ms >= 30_000


def test_error_signature_groups_varying_details():
    a = error_signature("order 42 timed out after 3.5s (id 9f1c2d3e4b5a6978)")
    b = error_signature("order 43 timed out after 10.1s (id 0a1b2c3d4e5f6071)")
    assert a == b == "order <n> timed out after <n>s (id <id>)"
    assert error_signature("KeyError: 'sku-1'") == error_signature("KeyError: 'sku-2'")
    assert error_signature("a\nsecond line") == "a"


def test_error_signature_strips_hex_ids_inside_words():
    assert error_signature("order-895ec436 failed") == error_signature("order-1a2b3c4d failed")
    assert error_signature("order-895ec436 failed") == "order-<id> failed"
    assert error_signature("deadbeef cafe") == "deadbeef cafe"  # words stay words
