"""antre.integrations.sentry with the real ``sentry_sdk``: its events and cron check-ins are
captured by a ``Transport`` of our own (nothing leaves the machine), from real jobs run by the
worker (``antre.testing.drain``) and real ticks of the scheduler."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from antre import Permanent, Retryable
from antre.integrations.sentry import SentryHook, check_in_id, monitor_slug
from antre.testing import drain


class Captured(Transport):
    """Keeps every envelope instead of sending it."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def items(self, kind: str) -> list[dict]:
        return [item.payload.json for env in self.envelopes for item in env.items
                if item.type == kind and item.payload.json is not None]


@pytest.fixture
def sentry() -> Iterator[Captured]:
    transport = Captured()
    sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=transport,
                    default_integrations=False, auto_enabling_integrations=False)
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


def error_groups(app, queue: str = "default") -> list[str]:
    q = app.queue(queue)
    return [json.loads(v)["signature"] for v in app.redis.hgetall(q.keys.error_groups).values()]


def test_a_dead_job_is_one_event_tagged_grouped_and_redacted(antre_app, sentry):
    app = antre_app
    app.add_hook(SentryHook())

    @app.handler("charge", queue="billing")
    def charge(ctx, payload):
        raise Permanent(f"card {payload['card_id']} declined")

    job_id = app.enqueue("charge", {"card_id": "c-991", "api_key": "sk-live-1"},
                         idempotency_key="charge:order-7")
    drain(app)
    [event] = sentry.items("event")
    assert event["level"] == "error"
    assert {k: v for k, v in event["tags"].items() if k.startswith("antre.")} == {
        "antre.queue": "billing", "antre.job_type": "charge", "antre.attempt": "1",
        "antre.idempotency_key": "charge:order-7", "antre.error_kind": "permanent",
        "antre.outcome": "dead"}
    assert event["fingerprint"] == error_groups(app, "billing")  # the DLQ page's group
    [exc] = event["exception"]["values"]
    assert exc["type"] == "Permanent" and "declined" in exc["value"]
    assert any(f["function"] == "charge" for f in exc["stacktrace"]["frames"])
    job = event["contexts"]["antre job"]
    assert job["job_id"] == job_id and job["max_attempts"] == 5
    assert job["payload"] == {"card_id": "c-991", "api_key": "***"}


def test_retries_are_warnings_and_can_be_left_out(antre_app, sentry):
    app = antre_app
    hook = app.add_hook(SentryHook())

    @app.handler("sync", max_attempts=2)
    def sync(ctx, payload):
        raise Retryable("upstream 503")

    app.enqueue("sync", {}, idempotency_key="sync:1")
    drain(app)
    events = sentry.items("event")
    assert [(e["level"], e["tags"]["antre.outcome"], e["tags"]["antre.attempt"])
            for e in events] == [("warning", "retried", "1"), ("error", "dead", "2")]
    assert events[0]["fingerprint"] == events[1]["fingerprint"] == error_groups(app)
    hook.retries = False
    app.enqueue("sync", {}, idempotency_key="sync:2")
    drain(app)
    assert [e["tags"]["antre.outcome"] for e in sentry.items("event")[2:]] == ["dead"]


def test_a_periodic_tick_checks_in_in_progress_then_ok(antre_app, sentry):
    app = antre_app
    app.add_hook(SentryHook())
    app.periodic(job_type="Nightly.Report", every_s=300, grace_s=90)(
        lambda ctx, payload: "sent")
    app.scheduler().run_once()  # first sight: starts at the latest tick
    app.clock.advance(300_000)
    [tick] = [t for t in app.scheduler().run_once() if t.outcome == "stored"]
    drain(app)
    checks = sentry.items("check_in")
    assert [c["status"] for c in checks] == ["in_progress", "ok"]
    assert {c["check_in_id"] for c in checks} == {check_in_id(tick.idempotency_key)}
    assert {c["monitor_slug"] for c in checks} == {"nightly-report"}
    assert checks[0]["monitor_config"] == {"schedule": {"type": "interval", "value": 5,
                                                        "unit": "minute"},
                                           "timezone": "UTC", "checkin_margin": 2}
    assert checks[1]["duration"] >= 0
    assert not sentry.items("event")


def test_a_failing_cron_job_checks_in_error_and_reports_its_failure(antre_app, sentry):
    app = antre_app
    app.add_hook(SentryHook())

    @app.periodic("*/5 * * * *", "reconcile", max_attempts=1)
    def reconcile(ctx, payload):
        raise RuntimeError("ledger out of balance")

    app.scheduler().run_once()
    app.clock.advance(300_000)
    app.scheduler().run_once()
    drain(app)
    checks = sentry.items("check_in")
    assert [c["status"] for c in checks] == ["in_progress", "error"]
    assert checks[0]["monitor_config"]["schedule"] == {"type": "crontab",
                                                       "value": "*/5 * * * *"}
    [event] = sentry.items("event")
    assert event["tags"]["antre.idempotency_key"].startswith("periodic:reconcile:")


def test_slugs():
    assert monitor_slug("Nightly Report") == "nightly-report"
    assert monitor_slug("billing:sync.v2") == "billing-sync-v2"
    assert monitor_slug("::") == "antre"
