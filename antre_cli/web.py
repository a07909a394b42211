"""``antre web``: the dashboard under gunicorn (threaded workers)."""

from __future__ import annotations

import sys
from typing import Any, Callable

from gunicorn.app.base import BaseApplication

from antre import Antre, settings
from antre_web import create_app
from antre_web.security import InsecureConfig, check_secret_key
from antre_worker.loader import load_app


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, factory: Callable[[], Any], options: dict[str, Any]) -> None:
        self.factory = factory
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self.factory()


def make_factory(app_path: str | None) -> Callable[[], Any]:
    def factory() -> Any:
        config: dict[str, Any] = {}
        if app_path:
            config["ANTRE_APP"] = load_app(app_path)
        return create_app(config)
    return factory


def bootstrap_admin(app_path: str | None) -> str | None:
    """First start with no user at all: create ``admin`` with ``ANTRE_ADMIN_PASSWORD`` (when
    set), so a fresh deployment can be logged into. Returns the name created, if any."""
    password = settings.ADMIN_PASSWORD.get()
    if not password:
        return None
    app = load_app(app_path) if app_path else Antre()
    users = app.users
    if users is None or users.count() > 0:
        return None
    users.add("admin", "admin", password)  # the password rules apply (ValueError)
    return "admin"


def check_user_database(app_path: str | None) -> None:
    """The dashboard's users and audit log live in SQL: without a database nobody could log in
    and no change could be audited, so refuse to start and say what to set."""
    app = load_app(app_path) if app_path else Antre()
    if app.database_url is None:
        raise InsecureConfig(
            "no user database: the dashboard keeps its users and audit log in SQL. Set "
            "ANTRE_DATABASE_URL (e.g. sqlite:////var/lib/antre/antre.db or "
            "postgresql+psycopg://user@host/db), then add a user with `antre user add NAME "
            "--role admin` or set ANTRE_ADMIN_PASSWORD for a first 'admin'")


def serve(app_path: str | None, *, host: str = "127.0.0.1", port: int = 8000,
          workers: int = 2) -> int:
    # every gunicorn worker builds its own app: they share the key from the environment
    try:
        check_secret_key(settings.SECRET_KEY.get())
        check_user_database(app_path)
        created = bootstrap_admin(app_path)
    except (InsecureConfig, ValueError) as exc:
        print(f"antre web: {exc}", file=sys.stderr)
        return 2
    if created:
        print("antre web: no users yet; created 'admin' with $ANTRE_ADMIN_PASSWORD", flush=True)
    options = {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",
        "threads": 4,
        "timeout": 60,
        "graceful_timeout": 10,
        "accesslog": settings.ACCESS_LOG.get() or None,
        "control_socket_disable": True,
    }
    _Gunicorn(make_factory(app_path), options).run()
    return 0
