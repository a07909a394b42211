"""Secrets out of everything shown: the one redaction of URLs (Redis, SQL, webhooks alike) and of
exception texts that embed them, for log lines, the audit log, pages and the CLI.

``redact_url`` blanks the userinfo password (``redis://:***@host``) and the value of every query
parameter whose name looks like a secret (``password``, ``pass``, ``pwd``, ``secret``,
``token``, ``key`` and names containing them, such as ``api_key`` or ``auth_token``).
``scrub`` takes any text (an exception message from redis-py or SQLAlchemy, say), redacts
every URL in it, and blanks each secret of the ``urls`` given wherever it appears, quoted or
not (SQLAlchemy prints the password of a failed connection in its own words). ``redact_value``
takes a job's payload (any JSON value) for what is sent out of Antre (an error tracker): the
value of every secret-looking field blanked, URLs in text redacted.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["MASK", "redact_url", "redact_value", "scrub", "secrets_of"]

MASK = "***"
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|key|auth|credential|signature", re.I)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_MIN_SECRET_CHARS = 3  # shorter "secrets" would blank ordinary text
_MAX_DEPTH = 20  # redact_value: deeper than this, a value is blanked whole


def _redact_netloc(netloc: str) -> str:
    if "@" not in netloc:
        return netloc
    userinfo, host = netloc.rsplit("@", 1)
    if ":" not in userinfo:
        return netloc
    user = userinfo.split(":", 1)[0]
    return f"{user}:{MASK}@{host}"


def _redact_query(query: str) -> str:
    if not query:
        return query
    out = []
    for part in query.split("&"):
        name, sep, value = part.partition("=")
        secret = sep and value and _SECRET_PARAM.search(unquote(name))
        out.append(f"{name}={MASK}" if secret else part)
    return "&".join(out)


def redact_url(url: str) -> str:
    """``url`` fit to show anyone: no userinfo password, no secret-looking query values. Never
    raises; text that is not a URL is returned as it is, unless it has a userinfo part."""
    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:  # e.g. a broken IPv6 host: keep only the scheme
        return text.split("://", 1)[0] + f"://{MASK}" if "://" in text else MASK
    netloc, query = _redact_netloc(parts.netloc), _redact_query(parts.query)
    out = text  # edited in place: urlunsplit would drop sqlite's empty host
    if netloc != parts.netloc:
        out = out.replace(parts.netloc, netloc, 1)
    if query != parts.query:
        out = out.replace("?" + parts.query, "?" + query, 1)
    return out


def secrets_of(url: str) -> list[str]:
    """The secrets ``url`` holds (the password, secret-looking query values), raw and decoded;
    the longest first, so that a secret containing another is blanked whole."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return []
    found: set[str] = set()
    netloc = parts.netloc
    if "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
        raw = netloc.rsplit("@", 1)[0].split(":", 1)[1]
        found.update({raw, unquote(raw)})
    for part in parts.query.split("&"):
        name, sep, value = part.partition("=")
        if sep and value and _SECRET_PARAM.search(unquote(name)):
            found.update({value, unquote(value)})
    for (name, value) in parse_qsl(parts.query):
        if _SECRET_PARAM.search(name) and value:
            found.add(value)
    return sorted((s for s in found if len(s) >= _MIN_SECRET_CHARS), key=len, reverse=True)


def scrub(text: object, *urls: str) -> str:
    """``str(text)`` with every URL in it redacted and every secret of ``urls`` blanked."""
    out = _URL.sub(lambda m: redact_url(m.group(0)), str(text))
    for url in urls:
        if url:
            for secret in secrets_of(url):
                out = out.replace(secret, MASK)
    return out


def redact_value(value: object, _depth: int = 0) -> object:
    """A copy of ``value`` (a JSON value: dicts, lists, text, numbers) fit to send out: each
    field whose name looks like a secret (as a query parameter's, ``_SECRET_PARAM``: ``password``,
    ``api_key``, ``token``, ...) blanked, every URL in text redacted (``redact_url``), and
    anything nested past ``_MAX_DEPTH`` blanked."""
    if _depth > _MAX_DEPTH:
        return MASK
    if isinstance(value, dict):
        return {k: MASK if _SECRET_PARAM.search(str(k)) else redact_value(v, _depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, _depth + 1) for v in value]
    if isinstance(value, str):
        return scrub(value) if "://" in value else value
    return value
