"""The job page shows the payload schema of a typed task (``@app.task``: its model or its
signature, read from the task the dashboard's app registers), says when the dashboard does not
know it, and the edited-payload replay refuses a payload that does not fit it (``Task.problem``,
the worker's own check), on the page and through the API."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from pydantic import BaseModel
from webtools import PASSWORD, ROLES, TEST_SECRET_KEY, Web, csrf_of, post

import antre
from antre.clock import ManualClock, system_ms
from antre_web import create_app


@dataclass
class Invoice:
    order_id: int
    amount_cents: int
    currency: str = "EUR"
    tags: list[str] = field(default_factory=list)


class Refund(BaseModel):
    order_id: int
    reason: str | None = None
    notify: bool = True


def typed_app(redis_url: str, clock: ManualClock) -> antre.Antre:
    app = antre.Antre(redis_url=redis_url, clock=clock)

    @app.task(key=lambda to, subject, urgent=False: f"email:{to}")
    def send_email(ctx: object, to: str, subject: str, urgent: bool = False) -> None:
        return None

    @app.task("bill", model=Invoice)
    def bill(ctx: object, invoice: Invoice) -> None:
        return None

    @app.task("refund", model=Refund)
    def refund(ctx: object, r: Refund) -> None:
        return None

    @app.handler("legacy")
    def legacy(ctx: object, payload: object) -> None:
        return None
    return app


@pytest.fixture
def typed(redis_url: str, tmp_path: Path) -> Iterator[Web]:
    clock = ManualClock(system_ms())
    producer = typed_app(redis_url, clock)
    app = create_app({"ANTRE_APP": producer, "ANTRE_DATABASE_URL": f"sqlite:///{tmp_path / 'typed.db'}",
                      "TESTING": True,
                      "SECRET_KEY": TEST_SECRET_KEY, "ANTRE_CLOCK": clock})
    svc = app.extensions["antre"]
    svc.users.hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    for role in ROLES:
        svc.users.add(role, role, PASSWORD)
    yield Web(app, svc, producer, clock)
    producer.redis.close()


def rows(page: str) -> list[tuple[str, str, str]]:
    section = page.split('class="task-schema"', 1)[1].split("</section>", 1)[0]
    found = re.findall(r"<tr><td><code>([^<]+)</code></td><td><code>([^<]+)</code></td>\s*"
                       r"<td>(?:<span class=\"tag\">(required)</span>|<code>([^<]*)</code>)",
                       section)
    return [(name, kind, req or default) for name, kind, req, default in found]


def test_the_job_page_shows_the_signature_and_the_models_fields(typed):
    c = typed.client("viewer")
    email = typed.dead_job("send_email", {"to": "a@x", "subject": "hi"})
    page = c.get(f"/jobs/default/{email}").get_data(as_text=True)
    assert "Task <code>send_email</code>: the handler's parameters" in page
    assert rows(page) == [("to", "str", "required"), ("subject", "str", "required"),
                          ("urgent", "bool", "false")]
    bill = typed.dead_job("bill", {"order_id": 1, "amount_cents": 5})
    page = c.get(f"/jobs/default/{bill}").get_data(as_text=True)
    assert "model <code>Invoice</code>" in page
    assert rows(page) == [("order_id", "int", "required"), ("amount_cents", "int", "required"),
                          ("currency", "str", "&#34;EUR&#34;"), ("tags", "list[str]", "list()")]
    refund = typed.dead_job("refund", {"order_id": 1})
    page = c.get(f"/dlq/default/{refund}").get_data(as_text=True)
    assert "model <code>Refund</code>" in page
    assert rows(page) == [("order_id", "int", "required"), ("reason", "str | None", "null"),
                          ("notify", "bool", "true")]


def test_a_note_when_the_dashboard_does_not_know_the_schema(typed, web):
    legacy = typed.dead_job("legacy", {"x": 1})
    page = typed.client("viewer").get(f"/jobs/default/{legacy}").get_data(as_text=True)
    assert "untyped handler (@app.handler)" in page and "<th scope=\"col\">Type" not in page
    other = typed.dead_job("gone_type", {"x": 1})
    page = typed.client("viewer").get(f"/jobs/default/{other}").get_data(as_text=True)
    assert "registers no handler &#39;gone_type&#39;" in page
    bare = web.dead_job("send_email", {"to": "a@x", "subject": "hi"})  # no ANTRE_APP
    page = web.client("viewer").get(f"/jobs/default/{bare}").get_data(as_text=True)
    assert "does not import the handlers" in page and "antre web pkg.module:app" in page


def _edit(c, job_id, payload, **extra):
    return post(c, f"/jobs/default/{job_id}/edit/replay",
                {"payload": json.dumps(payload), "reason": "fix", **extra})


def test_the_edited_replay_is_refused_when_the_payload_does_not_fit_the_task(typed):
    c = typed.client("operator")
    bill = typed.dead_job("bill", {"order_id": 1, "amount_cents": 5}, key="bill:1")
    dry = post(c, f"/jobs/default/{bill}/edit", {
        "payload": json.dumps({"order_id": 1, "amount": 5})}).get_data(as_text=True)
    assert "payload does not fit Invoice: unknown field &#39;amount&#39;" in dry
    assert "the worker would bury it again" in dry
    assert "Replay with this payload</button>" not in dry
    assert _edit(c, bill, {"order_id": 1, "amount": 5}).status_code in (303, 400)
    assert typed.q.get(bill).state == "dead"
    refund = typed.dead_job("refund", {"order_id": 1}, key="refund:1")
    refused = c.post(f"/api/queues/default/jobs/{refund}/replay-edited",
                     json={"payload": json.dumps({"order_id": "not a number"}),
                           "reason": "fix"}, headers={"X-CSRF-Token": csrf_of(c)})
    assert refused.status_code == 400 and "order_id" in refused.get_json()["message"]
    assert typed.q.get(refund).state == "dead"
    email = typed.dead_job("send_email", {"to": "a@x", "subject": "hi"}, key="email:1")
    assert _edit(c, email, {"to": "a@x"}).status_code in (303, 400)  # subject is required
    assert typed.q.get(email).state == "dead"
    assert _edit(c, email, {"to": "b@x", "subject": "hi", "urgent": True}).status_code == 303
    assert typed.q.get(email).state == "ready"
    refusals = [e for e in typed.audit("dlq.replay_edited") if e.outcome != "ok"]
    assert len(refusals) == 3 and "missing a required argument: 'subject'" in str(
        [e.detail for e in refusals])


def _schema_of(page: str) -> dict | None:
    found = re.search(r"<pre data-json-schema[^>]*>(.*?)</pre>", page, re.S)
    if not found:
        return None
    text = found.group(1).replace("&#34;", '"').replace("&quot;", '"').replace("&lt;", "<") \
        .replace("&gt;", ">").replace("&#39;", "'").replace("&amp;", "&")
    return json.loads(text)


def test_the_edit_page_shows_the_models_json_schema_beside_the_editor(typed):
    c = typed.client("operator")
    bill = typed.dead_job("bill", {"order_id": 1, "amount_cents": 5})
    page = c.get(f"/jobs/default/{bill}/edit").get_data(as_text=True)
    assert page.index('id="payload"') < page.index("Payload JSON schema")  # beside the editor
    schema = _schema_of(page)
    assert schema == {
        "title": "Invoice", "type": "object", "additionalProperties": False,
        "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"},
                       "currency": {"type": "string", "default": "EUR"},
                       "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["order_id", "amount_cents"]}
    refund = typed.dead_job("refund", {"order_id": 1})
    schema = _schema_of(c.get(f"/jobs/default/{refund}/edit").get_data(as_text=True))
    assert schema == Refund.model_json_schema()  # pydantic's own
    assert schema["properties"]["reason"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    for plain in (typed.dead_job("send_email", {"to": "a@x", "subject": "hi"}),
                  typed.dead_job("legacy", {"x": 1})):  # no model=: no JSON schema
        page = c.get(f"/jobs/default/{plain}/edit").get_data(as_text=True)
        assert "Payload JSON schema" not in page and 'id="payload"' in page
