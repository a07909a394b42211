"""What a setting is and how its value is found.

A setting (``Setting``) has a name (``ANTRE_...``), a kind, a default, its bounds or choices,
whether it is secret and one line of doc. Its value comes from, first found:

1. the process environment (``ANTRE_REDIS_URL=...``);
2. the TOML file named by ``ANTRE_CONFIG``, its keys the names without the prefix, in lower
   case (``redis_url = "redis://..."``);
3. the default.

An empty value (an empty variable, ``x = ""`` in the file) counts as unset, except for a setting declared
``empty=True`` (where ``""`` means "none", as ``ANTRE_ACCESS_LOG=``). Every read is made at
call time (a test's ``monkeypatch.setenv`` is seen at once); the file is parsed again only
when it changed. A value that the setting does not accept is refused (``SettingError``), never
clamped nor replaced by the default: the error names the setting, the value (masked when
secret), where it came from and what it accepts.

Flags take ``1``, ``true``, ``yes`` (on) and ``0``, ``false``, ``no`` (off), in any case; in
the file also TOML's ``true`` / ``false``.

This room imports nothing of Antre: every other room may read its settings here.
"""

from __future__ import annotations

import math
import os
import threading
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")

NAME_PREFIX = "ANTRE_"
CONFIG = "ANTRE_CONFIG"  # the file's path: from the environment only
KINDS = ("str", "int", "float", "flag", "choice", "url", "path")
TRUE = ("1", "true", "yes")
FALSE = ("0", "false", "no")
OFF = ("off", "none", "false")  # a rule turned off (the docs say off)
MASK = "***"
DEFAULT = "default"
ENVIRONMENT = "environment"


class SettingError(ValueError):
    """A setting's value was refused: ``name``, the ``value`` as given (masked when secret),
    ``source`` (environment, or the file's path) and what the setting ``accepts``."""

    def __init__(self, name: str, value: str, source: str, accepts: str) -> None:
        self.name, self.value, self.source, self.accepts = name, value, source, accepts
        where = "the environment" if source == ENVIRONMENT else source
        super().__init__(f"{name}={value} (from {where}) is refused: {name} takes {accepts}")


@dataclass(frozen=True, eq=False)
class Setting(Generic[T]):
    """One ``ANTRE_*`` setting, declared once in ``antre/settings/declared.py``."""

    name: str
    kind: str
    default: T
    doc: str
    min: float | None = None  # inclusive, unless ``above``
    max: float | None = None
    above: bool = False  # the value must be greater than ``min``
    choices: tuple[str, ...] = ()
    schemes: tuple[str, ...] = ()  # a URL's allowed schemes (none: any)
    secret: bool = False  # shown masked
    off: bool = False  # the word ``off`` is a value: None (a rule turned off)
    empty: bool = False  # ``""`` is a value, not "unset"
    unit: str = ""  # seconds, bytes, ...

    @property
    def key(self) -> str:
        """The setting's key in the ``ANTRE_CONFIG`` file: ``ANTRE_REDIS_URL`` -> ``redis_url``."""
        return self.name.removeprefix(NAME_PREFIX).lower()

    def get(self, env: Mapping[str, str] | None = None) -> T:
        """The effective value (``env``: the process environment unless given)."""
        return self.read(env)[0]

    def read(self, env: Mapping[str, str] | None = None) -> tuple[T, str]:
        """The effective value and where it came from: ``default``, ``environment`` or the
        file's path."""
        env = os.environ if env is None else env
        raw = env.get(self.name)
        if raw is not None and (raw.strip() or self.empty):
            return self.parse(raw, ENVIRONMENT), ENVIRONMENT
        path = env.get(CONFIG, "").strip()
        if path and self.name != CONFIG:
            given = config_file(path).get(self.key)
            if given is not None and (not isinstance(given, str) or given.strip() or self.empty):
                return self.parse(given, path), path
        return self.default, DEFAULT

    def given(self, env: Mapping[str, str] | None = None) -> bool:
        """Set in the environment or the file (not left to its default)."""
        return self.read(env)[1] != DEFAULT

    def parse(self, raw: object, source: str = ENVIRONMENT) -> T:
        """``raw`` (a string from the environment, a TOML value from the file) as this
        setting's value, else ``SettingError``."""
        value: Any = _parse(self, raw)
        if value is _BAD:
            shown = MASK if self.secret else repr(raw if not isinstance(raw, bool) else str(raw).lower())
            raise SettingError(self.name, shown, source, self.accepts())
        return value  # type: ignore[no-any-return]

    def accepts(self) -> str:
        """What the setting takes, in words: 'a whole number from 1 to 256'."""
        what = {"str": "a text", "int": "a whole number", "float": "a number",
                "flag": "a flag: 1, true, yes or 0, false, no", "path": "a file path",
                "choice": "one of " + ", ".join(self.choices),
                "url": "a URL" + (f" ({' or '.join(s + '://' for s in self.schemes)}...)"
                                  if self.schemes else " (scheme://...)")}[self.kind]
        if self.kind in ("int", "float"):
            what += _bounds(self)
            if self.unit:
                what += f" ({self.unit})"
            if self.off:
                what += ", or off"
        return what

    def bounds(self) -> str:
        """Bounds or choices, for the reference: '1 to 256', 'json, text', '> 0'."""
        if self.choices:
            return ", ".join(self.choices)
        if self.schemes:
            return ", ".join(s + "://" for s in self.schemes)
        text = _bounds(self).removeprefix(" ")
        return text + (", or off" if self.off else "")

    def show(self, value: object) -> str:
        """``value`` as ``antre config`` shows it: secrets masked, a URL's password too."""
        if value is None:
            return "(unset)" if not self.off else "off"
        if self.secret:
            return MASK if value else "(unset)"
        if value == "":
            return '""'
        if self.kind == "url":
            return masked_url(str(value))
        if self.kind == "flag":
            return "true" if value else "false"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)


_BAD: Any = object()


def _bounds(s: Setting[Any]) -> str:
    def fmt(n: float) -> str:
        return f"{n:g}" if s.kind == "float" else f"{int(n)}"

    if s.min is not None and s.max is not None:
        return f" from {fmt(s.min)} to {fmt(s.max)}"
    if s.min is not None:
        return f" above {fmt(s.min)}" if s.above else f" from {fmt(s.min)} up"
    if s.max is not None:
        return f" up to {fmt(s.max)}"
    return ""


def _parse(s: Setting[Any], raw: object) -> Any:
    text = raw.strip() if isinstance(raw, str) else None
    if s.off and text is not None and text.lower() in OFF:
        return None
    if s.kind == "flag":
        if isinstance(raw, bool):
            return raw
        word = text.lower() if text is not None else str(raw) if isinstance(raw, int) else None
        return True if word in TRUE else False if word in FALSE else _BAD
    if s.kind in ("int", "float"):
        number: Any
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            return _BAD
        try:
            if s.kind == "int":
                number = int(text) if text is not None else raw
                if not isinstance(number, int):
                    return _BAD
            else:
                number = float(text if text is not None else raw)
                if not math.isfinite(number):
                    return _BAD
        except ValueError:
            return _BAD
        if s.min is not None and (number <= s.min if s.above else number < s.min):
            return _BAD
        if s.max is not None and number > s.max:
            return _BAD
        return number
    if not isinstance(raw, str):
        return _BAD
    if s.kind == "choice":
        for choice in s.choices:
            if choice.lower() == raw.strip().lower():
                return choice
        return _BAD
    if s.kind == "url":
        try:
            parts = urlsplit(raw.strip())
        except ValueError:
            return _BAD
        if "://" not in raw or not parts.scheme or (s.schemes and parts.scheme not in s.schemes):
            return _BAD
        return raw.strip()
    if s.kind == "path":
        return raw.strip() or _BAD
    return raw


def masked_url(url: str) -> str:
    """``url`` with its password (if any) as ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))
    except ValueError:
        return MASK


# -- how declarations are written -----------------------------------------------------------
@overload
def text(name: str, default: str, doc: str, *, secret: bool = ..., empty: bool = ...,
         kind: str = ..., schemes: tuple[str, ...] = ...) -> Setting[str]: ...
@overload
def text(name: str, default: None, doc: str, *, secret: bool = ..., empty: bool = ...,
         kind: str = ..., schemes: tuple[str, ...] = ...) -> Setting[str | None]: ...
def text(name: str, default: str | None, doc: str, *, secret: bool = False,
         empty: bool = False, kind: str = "str", schemes: tuple[str, ...] = ()) -> Setting[Any]:
    return Setting(name, kind, default, doc, secret=secret, empty=empty, schemes=schemes)


@overload
def url(name: str, default: str, doc: str, *, schemes: tuple[str, ...] = ...,
        secret: bool = ...) -> Setting[str]: ...
@overload
def url(name: str, default: None, doc: str, *, schemes: tuple[str, ...] = ...,
        secret: bool = ...) -> Setting[str | None]: ...
def url(name: str, default: str | None, doc: str, *, schemes: tuple[str, ...] = (),
        secret: bool = False) -> Setting[Any]:
    return Setting(name, "url", default, doc, schemes=schemes, secret=secret)


def path(name: str, doc: str) -> Setting[str | None]:
    return Setting(name, "path", None, doc)


@overload
def integer(name: str, default: int, doc: str, *, min: int | None = ..., max: int | None = ...,
            unit: str = ...) -> Setting[int]: ...
@overload
def integer(name: str, default: None, doc: str, *, min: int | None = ...,
            max: int | None = ..., unit: str = ...) -> Setting[int | None]: ...
def integer(name: str, default: int | None, doc: str, *, min: int | None = None,
            max: int | None = None, unit: str = "") -> Setting[Any]:
    return Setting(name, "int", default, doc, min=min, max=max, unit=unit)


@overload
def number(name: str, default: float, doc: str, *, min: float | None = ...,
           max: float | None = ..., above: bool = ..., unit: str = ...) -> Setting[float]: ...
@overload
def number(name: str, default: None, doc: str, *, min: float | None = ...,
           max: float | None = ..., above: bool = ..., unit: str = ...
           ) -> Setting[float | None]: ...
def number(name: str, default: float | None, doc: str, *, min: float | None = None,
           max: float | None = None, above: bool = False, unit: str = "") -> Setting[Any]:
    return Setting(name, "float", default, doc, min=min, max=max, above=above, unit=unit)


def threshold(name: str, default: float, doc: str, unit: str = "") -> Setting[float | None]:
    """An alert rule's threshold: a number from 0 up, or ``off`` (the rule is not checked)."""
    return Setting(name, "float", default, doc, min=0, unit=unit, off=True)


def flag(name: str, default: bool, doc: str) -> Setting[bool]:
    return Setting(name, "flag", default, doc)


def choice(name: str, default: str, choices: tuple[str, ...], doc: str) -> Setting[str]:
    return Setting(name, "choice", default, doc, choices=choices)



# -- the file -------------------------------------------------------------------------------
_files: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
_files_lock = threading.Lock()
_known: set[str] = set()  # the keys a file may hold (declared.py fills it)


def known(settings: Iterable[Setting[Any]]) -> None:
    """The declared settings: the keys an ``ANTRE_CONFIG`` file may hold."""
    _known.update(s.key for s in settings if s.name != CONFIG)


def config_file(path: str) -> dict[str, Any]:
    """The ``ANTRE_CONFIG`` file's settings (parsed again when it changed), else
    ``SettingError`` saying what is wrong with it."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SettingError(CONFIG, repr(path), ENVIRONMENT,
                           f"the path of a readable TOML file ({exc.strerror})") from None
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _files.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingError(CONFIG, repr(path), ENVIRONMENT,
                           f"the path of a readable TOML file ({exc})") from None
    for key, value in data.items():
        if key not in _known or isinstance(value, (dict, list)):
            raise SettingError(CONFIG, repr(path), ENVIRONMENT,
                               f"a TOML file of settings (`antre config` lists them, as "
                               f"redis_url = \"...\"); {key!r} is not one")
    with _files_lock:
        _files[path] = (stamp, data)
    return data
