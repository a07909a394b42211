"""Sessions are revocable and identify a user by id: a cookie saved before a logout (or a
logout everywhere) no longer works, a deleted and re-created name does not revive old cookies,
name-based cookies are refused, any change to a user ends their sessions, sessions have an
absolute lifetime, and while the user database is down requests are refused (503), not served
on the cookie's role."""

from __future__ import annotations

import pytest
from webtools import login, post



def _cookie(client) -> str:
    with client.session_transaction() as s:
        return dict(s)


def _replay(web, saved: dict):
    c = web.app.test_client()
    with c.session_transaction() as s:
        s.update(saved)
    return c


def test_a_cookie_saved_before_logout_no_longer_works(web):
    c, elsewhere = web.client("operator"), web.client("operator")
    saved = _cookie(c)
    assert post(c, "/logout").status_code == 302
    assert _replay(web, saved).get("/").status_code == 302  # the copy is dead too
    assert elsewhere.get("/").status_code == 200  # another session of the user goes on
    web.clock.advance(13 * 3600 * 1000)  # ended sessions are forgotten once they would expire
    fresh = web.client("viewer")
    post(fresh, "/logout")
    from antre.stores.sql import RevokedSession, datetime_to_ms
    with web.svc.session_factory() as s:
        (row,) = s.query(RevokedSession).all()  # the first one is gone
    assert datetime_to_ms(row.expires_at) > web.clock()


def test_a_cookie_saved_before_logout_everywhere_no_longer_works(web):
    c = web.client("operator")
    saved = _cookie(c)
    assert _replay(web, saved).get("/").status_code == 200
    resp = post(c, "/account/logout-everywhere")
    assert resp.status_code == 303
    assert _replay(web, saved).get("/").status_code == 302
    assert c.get("/").status_code == 302
    assert web.audit("users.logout_everywhere")[0].user == "operator"


def test_deleting_and_recreating_a_name_does_not_revive_old_cookies(web):
    admin = web.client("admin")
    post(admin, "/users/add", {"name": "x", "role": "viewer", "password": "x-password-123"})
    x = web.app.test_client()
    login(x, "x", "x-password-123")
    saved = _cookie(x)
    post(admin, "/users/x/delete")
    post(admin, "/users/add", {"name": "x", "role": "admin", "password": "x-password-456"})
    assert web.svc.users.get("x").role == "admin"
    old = _replay(web, saved)
    assert old.get("/users/").status_code == 302  # not an admin session: no session at all


def test_migration_0003_on_a_database_with_users(db_url):
    import sqlalchemy as sa
    from alembic import command
    from antre.stores.sql import alembic_config, make_engine, migrate

    engine = make_engine(db_url)
    try:
        migrate(engine, "0002")
        with engine.begin() as c:
            c.execute(sa.text("INSERT INTO antre_users (name, role, password_hash, created_at, "
                              "disabled) VALUES ('old', 'admin', 'h', '2026-01-01', false)"))
        migrate(engine)
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT session_gen FROM antre_users")).scalar_one() == 0
        assert "antre_revoked_sessions" in sa.inspect(engine).get_table_names()
        cfg = alembic_config()
        with engine.begin() as c:
            cfg.attributes["connection"] = c
            command.downgrade(cfg, "0002")
        assert "antre_revoked_sessions" not in sa.inspect(engine).get_table_names()
        assert "session_gen" not in {c["name"] for c in sa.inspect(engine).get_columns("antre_users")}
    finally:
        engine.dispose()


def test_old_name_based_cookies_are_not_accepted(web):
    c = web.app.test_client()
    with c.session_transaction() as s:
        s.update({"user": "admin", "role": "admin", "csrf": "t"})
    assert c.get("/users/").status_code == 302


@pytest.mark.parametrize("change", ["role", "disable", "password", "delete"])
def test_changes_to_a_user_end_their_sessions(web, change):
    admin, op = web.client("admin"), web.client("operator")
    saved = _cookie(op)
    url, data = {"role": ("/users/operator/role", {"role": "operator"}),
                 "disable": ("/users/operator/disable", {}),
                 "password": ("/users/operator/password", {"password": "brand-new-password"}),
                 "delete": ("/users/operator/delete", {})}[change]
    assert post(admin, url, data).status_code == 303
    assert _replay(web, saved).get("/").status_code == 302
    assert admin.get("/").status_code == 200  # the admin's own session goes on


def test_sessions_have_an_absolute_lifetime(web):
    c = web.client("viewer")
    for _ in range(4):  # in steady use: each request within the hour
        web.clock.advance(3 * 3600 * 1000 - 60_000)
        assert c.get("/").status_code == 200
    web.clock.advance(5 * 60_000)  # 12 hours since the login
    assert c.get("/").status_code == 302


def test_reads_are_refused_while_the_user_database_is_down(web, monkeypatch):
    from sqlalchemy.exc import OperationalError

    c = web.client("admin")

    def boom(*a, **k):
        raise OperationalError("SELECT", {}, Exception("down"))

    monkeypatch.setattr(web.svc.users, "for_session", boom)
    for url in ("/", "/users/", "/api/users", "/audit/"):
        resp = c.get(url)
        assert resp.status_code == 503, url
    resp = c.get("/api/overview")
    assert resp.get_json()["backend"] == "database"
