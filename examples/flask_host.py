"""The Antre dashboard mounted inside a host Flask app under ``/antre/``, its users the host's
(as Sidekiq Web mounts in Rails): the host has its own login page and session; the dashboard
asks it who is logged in (``user_of``) and sends anyone else to the host's login.

```sh
pip install "antre[web]"
export ANTRE_SECRET_KEY=$(python3 -c "import secrets; print(secrets.token_hex(32))")
export HOST_SECRET_KEY=$(python3 -c "import secrets; print(secrets.token_hex(32))")
flask --app 'examples.flask_host:create_host()' run   # then http://127.0.0.1:5000/antre/
gunicorn 'examples.flask_host:create_host()'   # the same under gunicorn
```

The host's users and roles here are a dict (passwords ``HOST_PASSWORD``, default "letmein" for
the demo); a real host reads its own user table and maps its groups to viewer / operator /
admin.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from flask import Flask, Request, redirect, request, session, url_for
from markupsafe import escape
from werkzeug.wrappers import Response

import antre_web

#: The host's users and the Antre role each one gets (a user missing here is no Antre user).
ROLES = {"alice": "operator", "vera": "viewer", "root": "admin"}
LOGIN_PAGE = """<!doctype html><html lang="en"><head><title>Host login</title></head><body>
<h1>Host app login</h1><p>{error}</p>
<form method="post"><input type="hidden" name="next" value="{next}">
<label>User <input name="username" autocomplete="username"></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Log in to the host</button></form></body></html>"""


def user_of(req: Request) -> tuple[str, str] | None:
    """Who the host says is logged in, with their Antre role: read from the host's own session
    (``mount`` runs this inside the host's request context)."""
    name = session.get("host_user")
    role = ROLES.get(name) if isinstance(name, str) else None
    return (name, role) if name and role else None


def _password() -> str:
    return os.environ.get("HOST_PASSWORD", "letmein")


def _local(target: str) -> str:
    """``target`` when it is a path on this site, else ``/``: the dashboard's own check (no
    scheme or host however a browser reads it; no whitespace, control character or backslash,
    so ``/\t/evil.example``, which a browser reads as ``//evil.example``, is refused)."""
    return target if antre_web.is_local_path(target) else "/"


def create_host(config: dict[str, Any] | None = None) -> Flask:
    """The host app, with the dashboard at ``/antre``; ``config``: the dashboard's
    (``ANTRE_REDIS_URL``, ``ANTRE_DATABASE_URL``, ``SECRET_KEY``...; default: the env)."""
    host = Flask(__name__)
    host.secret_key = os.environ.get("HOST_SECRET_KEY") or os.urandom(32).hex()

    @host.get("/")
    def home() -> str:
        who = escape(session.get("host_user") or "nobody")
        return f'<p>Host home; logged in: {who}. <a href="/antre/">Antre dashboard</a></p>'

    @host.route("/login", methods=["GET", "POST"])
    def login() -> str | Response:
        nxt = _local(request.values.get("next") or "/")
        name = request.form.get("username", "")
        if request.method == "POST" and name in ROLES and hmac.compare_digest(
                request.form.get("password", "").encode(), _password().encode()):
            session["host_user"] = name
            return redirect(nxt)
        error = "Wrong user or password." if request.method == "POST" else ""
        return LOGIN_PAGE.format(error=error, next=escape(nxt))

    @host.get("/logout")
    def logout() -> Response:
        session.clear()
        return redirect(url_for("login"))

    antre_web.mount(host, "/antre", user=user_of, login_url="/login", logout_url="/logout",
                    config=config)
    return host
