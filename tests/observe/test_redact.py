"""The one redaction of URLs and of exception texts that embed them."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from antre.observe.logs import safe_url
from antre.observe.redact import redact_url, scrub


@pytest.mark.parametrize("url, shown", [
    ("redis://:hunter22@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://default:hunter22@h/0", "redis://default:***@h/0"),
    ("rediss://h:6380/0?password=hunter22&ssl_cert_reqs=none",
     "rediss://h:6380/0?password=***&ssl_cert_reqs=none"),
    ("redis://h/0?pass=a1b2c3&pwd=d4e5f6&db=2", "redis://h/0?pass=***&pwd=***&db=2"),
    ("postgresql+psycopg://app:p%40ss%2Fw@db:5432/antre?sslmode=require&sslpassword=zz9",
     "postgresql+psycopg://app:***@db:5432/antre?sslmode=require&sslpassword=***"),
    ("https://hooks.example/x?token=abc123&api_key=k&client_secret=s&v=1",
     "https://hooks.example/x?token=***&api_key=***&client_secret=***&v=1"),
    ("sqlite:////var/lib/antre.db", "sqlite:////var/lib/antre.db"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://user@h/0", "redis://user@h/0"),
])
def test_every_url_is_shown_without_its_secrets(url, shown):
    assert redact_url(url) == shown
    assert safe_url(url) == shown  # the logs' name for the same function


def test_a_broken_url_is_shown_without_anything_after_the_scheme():
    assert redact_url("redis://:hunter22@[::1/0") == "redis://***"


def test_scrub_blanks_urls_and_their_secrets_in_any_text():
    url = "redis://:hunter22@h:6379/0?token=tok-555"
    message = f"Error connecting to {url}: auth hunter22 refused ('tok-555')"
    out = scrub(message, url)
    assert "hunter22" not in out and "tok-555" not in out
    assert out.startswith("Error connecting to redis://:***@h:6379/0?token=***")


def test_scrub_cleans_a_real_redis_py_error(redis_url):
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    url = f"redis://nosuchuser:hunter22@127.0.0.1:{port}/0"
    with pytest.raises(redis.RedisError) as caught:
        redis.Redis.from_url(url).ping()
    assert "hunter22" not in scrub(caught.value, url)


def test_scrub_cleans_a_real_sqlalchemy_error_that_embeds_the_url(tmp_path):
    url = f"sqlite:///{tmp_path}/x.db?password=hunter22"
    engine = create_engine(f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(SQLAlchemyError) as caught, engine.connect() as c:
        c.execute(text(f"select nosuchcolumn from '{url}'"))
    assert "hunter22" in str(caught.value)
    assert "hunter22" not in scrub(caught.value, url)


def test_a_failed_alert_webhook_never_logs_its_token(r, clock, caplog, antre_logging):
    from antre.engine.queue import Queue
    from antre.observe.alerts import AlertEngine, OldestReady

    url = "https://hooks.example/alerts?token=tok-secret-77"

    def post(to, payload):
        raise OSError(f"POST {to} failed: connection reset")  # as urllib words some errors

    Queue(r, "q", clock=clock).enqueue("t", {}, idempotency_key="a")
    engine = AlertEngine(r, clock, [OldestReady(max_age_s=60)], webhook_url=url, post=post)
    engine.check()
    clock.advance(61_000)
    with caplog.at_level("WARNING", logger="antre"):
        engine.check()
    assert "alert webhook failed" in caplog.text and "token=***" in caplog.text
    assert "tok-secret-77" not in caplog.text


def test_a_payload_is_redacted_field_by_field():
    from antre.observe.redact import redact_value
    payload = {"order": 7, "api_key": "sk-live-123", "customer": {"Password": "hunter22",
                                                                 "email": "a@example.org"},
               "hooks": ["https://u:pw@hooks.example.org/x?token=abc", 3], "note": None}
    assert redact_value(payload) == {
        "order": 7, "api_key": "***", "customer": {"Password": "***", "email": "a@example.org"},
        "hooks": ["https://u:***@hooks.example.org/x?token=***", 3], "note": None}
    assert payload["api_key"] == "sk-live-123"  # a copy: the payload itself is untouched
    deep: list = []
    for _ in range(30):
        deep = [deep]
    assert "***" in repr(redact_value(deep))
