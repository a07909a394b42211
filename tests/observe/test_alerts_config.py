"""Alert thresholds from configuration (env and app kwargs) and the incident rules: retry
storm, duplicate deliveries, outbox backlog age, fence refusals, lost locks, paused too long.
Each fires once per episode and resolves once (clock injected)."""

from __future__ import annotations

import pytest

from antre import Antre
from antre.observe.alerts import AlertConfig, AlertEngine, OutboxBacklogAge, PausedTooLong
from antre.observe.metrics import render
from antre.control.pause import Pauses
from antre.engine.queue import Queue


def test_thresholds_from_env_then_app_kwargs():
    env = {"ANTRE_ALERT_RETRIES_PER_MIN": "120", "ANTRE_ALERT_PAUSED_MAX_MIN": "off",
           "ANTRE_ALERT_WINDOW_S": "60", "ANTRE_ALERT_DLQ_GROWTH_MAX": ""}
    config = AlertConfig.from_env(env, outbox_age_s=5)
    assert (config.retries_per_min, config.paused_max_min, config.window_s,
            config.dlq_growth_max, config.outbox_age_s) == (120.0, None, 60.0, 10, 5)
    names = {rule.name: rule for rule in config.rules()}
    assert "paused_too_long" not in names
    assert names["retry_storm"].max_in_window == 120
    assert names["dlq_growth"].window_s == 60.0
    assert names["outbox_backlog_age"] == OutboxBacklogAge(5.0)
    app = Antre(redis_url="redis://127.0.0.1:1/0", alerts=AlertConfig(lost_locks_max=None))
    assert "lost_locks" not in {r.name for r in app.alert_config.rules()}


@pytest.mark.parametrize("env, message", [
    ({"ANTRE_ALERT_RETRIES_PER_MIN": "many"},
     "ANTRE_ALERT_RETRIES_PER_MIN='many' .* takes a number from 0 up, or off"),
    ({"ANTRE_ALERT_OUTBOX_AGE_S": "-1"}, "from 0 up"),
    ({"ANTRE_ALERT_WINDOW_S": "0"}, "ANTRE_ALERT_WINDOW_S='0' .* takes a number above 0"),
])
def test_bad_threshold_values_name_the_variable(env, message):
    with pytest.raises(ValueError, match=message):
        AlertConfig.from_env(env)


def episode(engine, clock, cause, advance_ms=1_000):
    """One check before, one while the cause holds (fires), one more (no repeat)."""
    assert engine.check() == []
    clock.advance(advance_ms)
    cause()
    fired = engine.check()
    clock.advance(1_000)
    assert engine.check() == []
    return fired


@pytest.mark.parametrize("rule, counter, threshold, n", [
    ("retry_storm", "retried", "ANTRE_ALERT_RETRIES_PER_MIN", 31),
    ("duplicate_delivery_spike", "deduplicated", "ANTRE_ALERT_DUPLICATES_MAX", 31),
    ("fence_refusals", "fence_rejected", "ANTRE_ALERT_FENCE_REFUSALS_MAX", 31),
    ("lost_locks", "lock_lost", "ANTRE_ALERT_LOST_LOCKS_MAX", 31),
])
def test_counter_rules_fire_once_per_episode(r, clock, rule, counter, threshold, n):
    q = Queue(r, "billing", clock=clock)
    q.enqueue("charge", {}, idempotency_key="seed")
    config = AlertConfig.from_env({threshold: "30"})
    engine = AlertEngine(r, clock, [x for x in config.rules() if x.name == rule])
    fired = episode(engine, clock, lambda: q.incr_stat(counter, n))
    assert [(e.rule, e.queue, e.status, e.alert.value) for e in fired] == [
        (rule, "billing", "firing", n)]
    clock.advance(400_000)
    assert [e.status for e in engine.check()] == ["resolved"]
    assert engine.check() == []
    body = render(r, clock)[0].decode()
    if counter in ("fence_rejected", "lock_lost"):
        name = {"fence_rejected": "antre_fence_refusals_total",
                "lock_lost": "antre_lost_locks_total"}[counter]
        assert f'{name}{{queue="billing"}} {float(n)}' in body


def test_paused_too_long_fires_once_and_resolves_on_resume(r, clock):
    q = Queue(r, "billing", clock=clock)
    q.enqueue("charge", {}, idempotency_key="seed")
    pauses = Pauses(r, clock)
    engine = AlertEngine(r, clock, [PausedTooLong(max_min=10)])
    pauses.pause("billing", "charge", "alice", "provider outage")
    assert engine.check() == []
    clock.advance(9 * 60_000)
    assert engine.check() == []
    clock.advance(2 * 60_000)
    [event] = engine.check()
    assert (event.rule, event.queue, event.status) == ("paused_too_long", "billing", "firing")
    assert "charge paused for 11 min" in event.alert.message
    clock.advance(60_000)
    assert engine.check() == []
    pauses.resume("billing", "charge")
    assert [e.status for e in engine.check()] == ["resolved"]
    assert 'antre_paused_seconds' in render(r, clock)[0].decode()


def test_outbox_backlog_age_fires_once_and_is_a_metric(r, clock):
    Queue(r, "billing", clock=clock).enqueue("charge", {}, idempotency_key="seed")
    age = {"s": 10.0}
    engine = AlertEngine(r, clock, [OutboxBacklogAge(60)], outbox_age_s=lambda: age["s"])
    assert engine.check() == []
    age["s"] = 75.0
    [event] = engine.check()
    assert (event.rule, event.status, event.alert.value) == ("outbox_backlog_age", "firing", 75.0)
    age["s"] = 90.0
    assert engine.check() == []
    assert "antre_outbox_oldest_age_seconds 90.0" in render(r, clock)[0].decode()
    age["s"] = None
    assert [e.status for e in engine.check()] == ["resolved"]
