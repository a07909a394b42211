"""A password on the command line (``user add``, ``user passwd``: the table's parameters with
``secret``): read from ``--password-stdin``, ``--prompt`` or ``$ANTRE_PASSWORD`` (``--password``
works but warns: it shows in the process list), else made here and printed once, never
audited."""

from __future__ import annotations

import argparse
import getpass
import secrets
import sys
from typing import Any

from antre import settings
from antre.stores.users import MIN_PASSWORD_LENGTH

PASSWORD_FLAG_WARNING = ("warning: --password puts the password in the process list and the "
                         "shell history, where other users of this host can read it; use "
                         "--password-stdin, --prompt or $ANTRE_PASSWORD instead")
PASSWORD_HELP = (f"at least {MIN_PASSWORD_LENGTH} characters, not the user name (discouraged: "
                 "visible in the process list; use --password-stdin, --prompt or "
                 "$ANTRE_PASSWORD); default: $ANTRE_PASSWORD, else generated and printed")


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    """``--NAME``, ``--NAME-stdin`` and ``--prompt`` for the secret parameter ``name``."""
    p.add_argument(f"--{name}", dest=name, help=PASSWORD_HELP)
    p.add_argument(f"--{name}-stdin", dest=f"{name}_stdin", action="store_true",
                   help="read the password from the first line of stdin")
    p.add_argument("--prompt", action="store_true",
                   help="ask for the password (twice) without echoing it")


def _given(values: dict[str, Any], name: str) -> str | None:
    if values.get(name):
        print(PASSWORD_FLAG_WARNING, file=sys.stderr)
        return str(values[name])
    if values.get(f"{name}_stdin"):
        return sys.stdin.readline().rstrip("\r\n")
    if values.get("prompt"):
        first = getpass.getpass("new password: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ; nothing was changed")
        return first
    return settings.PASSWORD.get()


def fill(values: dict[str, Any], name: str) -> str:
    """``values`` with the password ``name`` as given, else a new one; returns what to show
    after the success line (``"; password: ..."`` for a made one, else nothing)."""
    given = _given(values, name)
    values[name] = given or secrets.token_urlsafe(18)
    return "" if given else f"; password: {values[name]}"
