"""Dashboard users (argon2 hashes) and the audit log with its exports."""

from __future__ import annotations

import csv
import io
import json

import pytest
from argon2 import PasswordHasher
from sqlalchemy import select

from antre.stores.audit import CSV_COLUMNS, AuditLog, AuditUnwritable
from antre.stores.sql import User, make_engine, migrate, session_factory
from antre.stores.users import UnknownUser, UserExists, UserStore, role_at_least

FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.fixture
def sf(db_url):
    eng = make_engine(db_url)
    migrate(eng)
    try:
        yield session_factory(eng)
    finally:
        eng.dispose()


@pytest.fixture
def users(sf, clock):
    return UserStore(sf, clock=clock, hasher=FAST)


# --------------------------------------------------------------------------- users


def test_add_and_verify(users, sf):
    u = users.add("alice", "operator", "s3cret!-long-enough")
    assert (u.name, u.role, u.disabled) == ("alice", "operator", False)
    with sf() as s:
        stored = s.execute(select(User.password_hash).where(User.name == "alice")).scalar_one()
    assert stored.startswith("$argon2id$") and "s3cret" not in stored
    assert users.verify("alice", "s3cret!-long-enough").name == "alice"
    assert users.verify("alice", "wrong") is None
    assert users.verify("nobody", "s3cret!-long-enough") is None
    assert users.verify("alice", "") is None


def test_duplicate_and_invalid(users):
    users.add("bob", "viewer", "password-one-1")
    with pytest.raises(UserExists):
        users.add("bob", "admin", "password-two-2")
    with pytest.raises(ValueError):
        users.add("carol", "root", "password-one-1")
    with pytest.raises(ValueError):
        users.add("", "viewer", "password-one-1")
    with pytest.raises(ValueError):
        users.add("dave", "viewer", "")


def test_set_password_role_disable_list_delete(users):
    users.add("bob", "viewer", "old-password-1")
    users.add("amy", "admin", "password-one-1")
    users.set_password("bob", "new-password-1")
    assert users.verify("bob", "old-password-1") is None
    assert users.verify("bob", "new-password-1") is not None
    users.set_role("bob", "operator")
    assert users.get("bob").role == "operator"
    with pytest.raises(ValueError):
        users.set_role("bob", "superuser")
    users.set_disabled("bob")
    assert users.verify("bob", "new-password-1") is None
    users.set_disabled("bob", False)
    assert users.verify("bob", "new-password-1") is not None
    assert [u.name for u in users.list()] == ["amy", "bob"] and users.count() == 2
    assert users.delete("bob") is True and users.delete("bob") is False
    with pytest.raises(UnknownUser):
        users.set_password("bob", "x-long-password")
    with pytest.raises(UnknownUser):
        users.set_role("bob", "admin")


def test_weak_hash_is_upgraded_on_login(users, sf, clock):
    users.add("old", "viewer", "password-one-1")
    strong = UserStore(sf, clock=clock)  # default argon2 parameters
    assert strong.verify("old", "password-one-1") is not None
    with sf() as s:
        h = s.execute(select(User.password_hash).where(User.name == "old")).scalar_one()
    assert not strong.hasher.check_needs_rehash(h)
    assert users.verify("old", "password-one-1") is not None  # still verifies whatever the parameters


def test_role_order():
    assert role_at_least("admin", "operator") and role_at_least("operator", "operator")
    assert not role_at_least("viewer", "operator") and not role_at_least(None, "viewer")


# --------------------------------------------------------------------------- audit


@pytest.fixture
def audit(sf, clock):
    return AuditLog(sf, clock=clock)


def fill(audit, clock):
    audit.record(
        "alice",
        "operator",
        "dlq.replay",
        "job-1,job-2",
        "fixed the SMTP creds",
        "ok",
        {"before": 2, "after": 0},
        "10.0.0.1",
    )
    clock.advance(1000)
    audit.record(
        "bob", "viewer", "dlq.discard", "type=send_email", "cleanup", "refused", None, "10.0.0.2"
    )
    clock.advance(1000)
    audit.record(
        "alice",
        "operator",
        "lock.release",
        '=HYPERLINK("http://x")',
        "-stuck",
        "failed",
        {"error": "gone", "n": 1},
        None,
    )


def test_record_list_filter_count(audit, clock):
    fill(audit, clock)
    assert audit.count() == 3
    rows = audit.list()
    assert [r.action for r in rows] == ["lock.release", "dlq.discard", "dlq.replay"]  # newest first
    assert rows[-1].detail == {"before": 2, "after": 0} and rows[-1].at.tzinfo is not None
    assert [r.action for r in audit.list(limit=1, offset=1)] == ["dlq.discard"]
    assert [r.user for r in audit.list(user="alice")] == ["alice", "alice"]
    assert [r.action for r in audit.list(action="dlq.replay")] == ["dlq.replay"]
    assert audit.count(user="bob") == 1
    assert audit.actions() == ["dlq.discard", "dlq.replay", "lock.release"]
    with pytest.raises(ValueError):
        audit.record("x", "admin", "a", None, None, "maybe", {}, None)


def test_export_csv(audit, clock):
    fill(audit, clock)
    text = audit.export_csv()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert [r["action"] for r in rows] == [
        "dlq.replay",
        "dlq.discard",
        "lock.release",
    ]  # oldest first
    assert json.loads(rows[0]["detail"]) == {"after": 0, "before": 2}
    assert rows[0]["target"] == "job-1,job-2" and rows[0]["remote_addr"] == "10.0.0.1"
    assert rows[1]["detail"] == "" and rows[2]["remote_addr"] == ""
    # Spreadsheet formula injection is neutralised.
    assert rows[2]["target"].startswith("'=") and rows[2]["reason"] == "'-stuck"
    assert rows[0]["at"].endswith("+00:00")
    assert len(list(csv.DictReader(io.StringIO(audit.export_csv(user="bob"))))) == 1


def test_export_json(audit, clock):
    fill(audit, clock)
    data = audit.export_json()
    json.dumps(data)  # JSON-ready
    assert [d["action"] for d in data] == ["dlq.replay", "dlq.discard", "lock.release"]
    assert data[2]["target"] == '=HYPERLINK("http://x")'  # verbatim in JSON
    assert data[0]["detail"] == {"before": 2, "after": 0}
    assert set(data[0]) == set(CSV_COLUMNS)
    assert audit.export_json(action="dlq.discard")[0]["user"] == "bob"


def test_an_audit_log_of_the_previous_schema_takes_started_entries_after_migrating(db_url,
                                                                                    clock):
    from sqlalchemy import text
    eng = make_engine(db_url)
    try:
        migrate(eng, "0003")
        log = AuditLog(session_factory(eng), clock=clock)
        log.record("alice", "operator", "queue.pause", "default", "why", "ok")
        with pytest.raises(AuditUnwritable):  # the old check knows no "started"
            log.start("alice", "operator", "queue.resume", "default", None)
        migrate(eng)
        entry = log.start("alice", "operator", "queue.resume", "default", None)
        assert log.list()[0].outcome == "started"
        log.finish(entry, "ok", {"message": "resumed"})
        assert [(e.action, e.outcome) for e in log.list()] == [
            ("queue.resume", "ok"), ("queue.pause", "ok")]
        with eng.connect() as c:
            assert c.execute(text("SELECT version_num FROM antre_alembic_version")).scalar() \
                == "0004"
    finally:
        eng.dispose()


def test_odd_text_is_stored_as_every_database_can(sf, clock):
    log = AuditLog(sf, clock=clock)
    log.record("al\x00ice", "operator", "queue.pause", "q/\ud800", "nul\x00 and \udfff", "ok",
               {"k\x00": ["\ud83d", float("nan")], "n": 1})
    (e,) = log.list()
    assert (e.user, e.target, e.reason) == ("al\ufffdice", "q/\ufffd", "nul\ufffd and \ufffd")
    assert e.detail == {"k\ufffd": ["\ufffd", "nan"], "n": 1}
