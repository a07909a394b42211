"""Cross-site request forgery in a real Chromium: a browser holding an admin's HTTP Basic
credentials for the dashboard visits another site, whose page POSTs a form to the JSON API
(the classic "create an admin" CSRF). The dashboard must refuse it, and no user may appear."""

from __future__ import annotations

import base64
import html
import uuid

from .conftest import PASSWORDS

EVIL = "http://evil.example"


def _attack_page(action: str, name: str) -> str:
    """Two forms a cross-site attacker can send without CORS: urlencoded, and text/plain whose
    body looks like JSON."""
    a = html.escape(action, quote=True)
    json_like = ('{"name":"' + name + '-t","role":"admin","password":"attacker-password-1",'
                 '"x":"')
    return f"""<!doctype html><title>cute cats</title>
<form id="urlencoded" method="post" action="{a}">
  <input name="name" value="{name}"><input name="role" value="admin">
  <input name="password" value="attacker-password-1">
  <button id="go1">go</button>
</form>
<form id="plain" method="post" action="{a}" enctype="text/plain">
  <input name='{html.escape(json_like, quote=True)}' value='"}}'>
  <button id="go2">go</button>
</form>"""


def _attack(page, stack, name: str) -> list[int]:
    """Open the attacker's page and submit both forms; the dashboard's answers."""
    page.route(EVIL + "/**", lambda route: route.fulfill(
        status=200, content_type="text/html",
        body=_attack_page(stack.base_url + "/api/users", name)))
    statuses = []
    for button in ("#go1", "#go2"):
        page.goto(EVIL + "/")
        with page.expect_response(lambda r: r.url.endswith("/api/users")
                                  and r.request.method == "POST") as answer:
            page.click(button)
        statuses.append(answer.value.status)
    return statuses


def test_cross_site_form_post_with_basic_credentials_is_refused(stack, chromium):
    """The browser holds the admin's Basic credentials and answers a Basic challenge with them
    (what a browser does once the user typed them at a prompt)."""
    name = f"mallory{uuid.uuid4().hex[:6]}"
    ctx = chromium.new_context(http_credentials={
        "username": "admin", "password": PASSWORDS["admin"], "origin": stack.base_url})
    try:
        assert ctx.request.get(stack.base_url + "/api/queues").status == 200  # they are good
        statuses = _attack(ctx.new_page(), stack, name)
        assert 200 not in statuses, statuses
        assert stack.client.users.get(name) is None
        assert stack.client.users.get(name + "-t") is None
    finally:
        ctx.close()


def test_cross_site_form_post_with_cached_basic_credentials_is_refused(stack, chromium):
    """The browser attaches cached Basic credentials to every request to the dashboard, the
    cross-site form POST included (the request is otherwise the browser's own, with its
    Origin and Sec-Fetch-* headers)."""
    name = f"mallory{uuid.uuid4().hex[:6]}"
    token = base64.b64encode(f"admin:{PASSWORDS['admin']}".encode()).decode()
    ctx = chromium.new_context()
    try:
        ctx.route(stack.base_url + "/**", lambda route: route.continue_(
            headers={**route.request.headers, "authorization": f"Basic {token}"}))
        page = ctx.new_page()
        resp = page.goto(stack.base_url + "/api/queues")
        assert resp is not None and resp.status == 200  # the credentials go with each request
        statuses = _attack(page, stack, name)
        assert all(s in (403, 415) for s in statuses), statuses
        assert stack.client.users.get(name) is None
        assert stack.client.users.get(name + "-t") is None
    finally:
        ctx.close()


def _log_in(chromium, stack, name: str, password: str):
    ctx = chromium.new_context(base_url=stack.base_url, viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(15_000)
    page = ctx.new_page()
    page.goto("/login")
    page.get_by_label("User").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")
    return ctx, page


def test_password_change_in_the_browser_ends_the_other_sessions(stack, chromium):
    from playwright.sync_api import expect

    from .conftest import screenshot

    name = f"pat{uuid.uuid4().hex[:6]}"
    stack.client.users.add(name, "viewer", "first-password-1")
    (ctx1, here), (ctx2, there) = (_log_in(chromium, stack, name, "first-password-1")
                                   for _ in range(2))
    try:
        here.locator("header details.settings > summary").click()
        here.locator("header .who a").click()
        expect(here.get_by_role("heading", name="Your account")).to_be_visible()
        here.get_by_label("Current password").fill("first-password-1")
        here.get_by_label("New password", exact=True).fill("second-password-2")
        here.get_by_label("New password again").fill("second-password-2")
        screenshot(here, "account-password-change")
        here.get_by_role("button", name="Change password").click()
        expect(here.locator(".flash.ok")).to_contain_text("password changed")
        there.goto("/")  # the other browser's session ended
        expect(there.get_by_role("heading", name="Log in")).to_be_visible()
        here.goto("/")  # this one goes on
        expect(here.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        assert stack.client.users.verify(name, "second-password-2") is not None
        here.goto("/account")
        here.get_by_role("button", name="Log out everywhere").click()
        expect(here.get_by_role("heading", name="Log in")).to_be_visible()
    finally:
        ctx1.close()
        ctx2.close()
