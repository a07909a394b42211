"""The settings room: every ``ANTRE_*`` setting, declared once (``declared.py``), read here
(``reader.py``: environment, then the ``ANTRE_CONFIG`` file, then the default; a bad value is
a ``SettingError``). ``from antre import settings; settings.REDIS_URL.get()``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# the declarations are this room's surface: settings.REDIS_URL, ...
from .declared import *
from .declared import ALL as ALL, ALERTS as ALERTS, ESSENTIAL as ESSENTIAL
from .reader import (CONFIG as CONFIG, DEFAULT as DEFAULT, ENVIRONMENT as ENVIRONMENT, MASK,
                     Setting as Setting, SettingError as SettingError, masked_url)

@dataclass(frozen=True)
class Effective:
    """One setting as ``antre config`` shows it."""

    name: str
    value: Any  # the value (None: unset); a secret's is MASK when set
    shown: str  # as text, masked
    source: str  # default, environment, or the file's path
    secret: bool


def check(env: Mapping[str, str] | None = None) -> None:
    """Read every setting once: the first bad value is a ``SettingError`` (the CLI's start)."""
    for setting in ALL.values():
        setting.read(env)


def effective(env: Mapping[str, str] | None = None) -> list[Effective]:
    """Every setting's effective value and where it came from (``SettingError`` on a bad
    one)."""
    out = []
    for setting in ALL.values():
        value, source = setting.read(env)
        shown = setting.show(value)
        if setting.secret and value:
            value = MASK
        elif setting.kind == "url" and isinstance(value, str):
            value = masked_url(value)
        out.append(Effective(setting.name, value, shown, source, setting.secret))
    return out


def unknown(env: Mapping[str, str] | None = None) -> list[str]:
    """The ``ANTRE_*`` variables of the environment that are no setting (a typo, or a tool's
    own: ``antre config`` lists them, nothing refuses them)."""
    env = os.environ if env is None else env
    return sorted(name for name in env if name.startswith("ANTRE_") and name not in ALL)


def preset(setting: Setting[Any], value: str) -> None:
    """Give ``setting`` this value for this process and its children, unless the environment
    or the file sets it (``antre demo``'s defaults)."""
    if not setting.given():
        os.environ[setting.name] = value
