"""Encrypted payloads: AES-256-GCM under a ring of versioned keys.

A sealed payload is stored as the JSON object ``{"$enc": "<version>:<base64url nonce+ct>"}``
(``SEALED_KEY``), so every reader sees valid JSON and can tell it is encrypted
(``is_sealed``). The plaintext is the payload's stored JSON text; the associated data binds
the ciphertext to its queue, job type and job id, so a ciphertext copied to another job does
not open. New payloads are sealed under the ring's newest version; any version on the ring
opens (``cryptography``'s AESGCM: ``pip install antre[encrypt]``). Keys come from ``ANTRE_PAYLOAD_KEYS`` (``ring_from_env``):
``"v2:<base64 of 32 bytes>,v1:<base64 of 32 bytes>"``, newest first."""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

import antre.settings as settings
from antre.errors import InvalidJob

SEALED_KEY = "$enc"
KEYS_SETTING = settings.PAYLOAD_KEYS.name
KEY_BYTES = 32
NONCE_BYTES = 12
_VERSION = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


class CannotOpen(Exception):
    """A sealed payload that this ring cannot open (unknown version, wrong key, tampered or
    moved ciphertext); its message says which, for the job's burial reason."""


def is_sealed(payload: Any) -> bool:
    """Whether a decoded payload is a sealed one (``{"$enc": "..."}``)."""
    return (type(payload) is dict and len(payload) == 1
            and isinstance(payload.get(SEALED_KEY), str))


def associated_data(queue: str, job_type: str, job_id: str) -> bytes:
    """What a ciphertext is bound to: its queue, job type and job id."""
    return f"antre1\x1f{queue}\x1f{job_type}\x1f{job_id}".encode()


def parse_key(version: str, text: str) -> bytes:
    """A ring key from its base64 text (standard or URL-safe); ``ValueError`` saying what to
    pass unless it is 32 bytes under a valid version name."""
    if not _VERSION.match(version):
        raise ValueError(f"bad payload key version {version!r}: use 1-32 of A-Z a-z 0-9 _ . -")
    try:
        key = base64.b64decode(text.strip().replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"payload key {version!r} is not base64: pass 32 random bytes in "
                         "base64 (python -c \"import os,base64;print(base64.b64encode("
                         "os.urandom(32)).decode())\")") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"payload key {version!r} is {len(key)} bytes: AES-256-GCM needs "
                         f"{KEY_BYTES} (base64 of 32 random bytes)")
    return key


def parse_ring(text: str) -> dict[str, bytes]:
    """``"v2:<base64>,v1:<base64>"`` as an ordered ring, newest first (``ValueError`` on
    anything else, saying what to pass)."""
    ring: dict[str, bytes] = {}
    for item in (part.strip() for part in text.split(",")):
        version, sep, key = item.partition(":")
        if not item or not sep:
            raise ValueError(f"bad {KEYS_SETTING} entry {item!r}: pass "
                             "'<version>:<base64 key>' entries separated by commas, newest first")
        if version in ring:
            raise ValueError(f"payload key version {version!r} is given twice")
        ring[version] = parse_key(version, key)
    return ring


def ring_from_env(environ: Mapping[str, str] | None = None) -> dict[str, bytes]:
    """The key ring from ``ANTRE_PAYLOAD_KEYS`` ({} when unset)."""
    text = settings.PAYLOAD_KEYS.get(environ)
    return parse_ring(text) if text.strip() else {}


@dataclass(frozen=True)
class PayloadCipher:
    """Seals and opens payload texts under ``ring`` (``{version: 32-byte key}``, newest
    first: ``newest`` seals)."""

    ring: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if not self.ring:
            raise ValueError(f"a payload cipher needs at least one key: set {KEYS_SETTING}="
                             "'v1:<base64 of 32 random bytes>' or pass ring={'v1': key}")
        for version, key in self.ring.items():
            if not _VERSION.match(version) or len(key) != KEY_BYTES:
                raise ValueError(f"payload key {version!r}: pass a version of A-Z a-z 0-9 _ . - "
                                 f"and a key of {KEY_BYTES} bytes")

    @classmethod
    def from_setting(cls, text: str) -> "PayloadCipher":
        return cls(parse_ring(text))

    @classmethod
    def from_env(cls) -> "PayloadCipher":
        return cls(ring_from_env())

    @property
    def newest(self) -> str:
        return next(iter(self.ring))

    def seal(self, text: str, queue: str, job_type: str, job_id: str) -> str:
        """``text`` (a payload's JSON) as the stored JSON of its sealed form."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.ring[self.newest]).encrypt(
            nonce, text.encode(), associated_data(queue, job_type, job_id))
        token = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f'{{"{SEALED_KEY}":"{self.newest}:{token}"}}'

    def open(self, sealed: Any, queue: str, job_type: str, job_id: str) -> str:
        """The payload JSON text inside a sealed payload (``is_sealed``); ``CannotOpen``
        saying why when it cannot be opened."""
        version, _, token = str(sealed[SEALED_KEY]).partition(":")
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        key = self.ring.get(version)
        if key is None:
            have = ", ".join(self.ring)
            raise CannotOpen(f"payload sealed under key version {version!r}, which is not in "
                             f"{KEYS_SETTING} (versions here: {have}); add it back, then replay")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            plain = AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:],
                                        associated_data(queue, job_type, job_id))
        except (InvalidTag, ValueError, binascii.Error):
            raise CannotOpen(f"payload does not open under key version {version!r}: a wrong "
                             "key, or a ciphertext altered or moved from another job") from None
        return plain.decode()

    def reseal(self, sealed: Any, queue: str, job_type: str, job_id: str) -> str | None:
        """A sealed payload under the newest version, or None when it already is."""
        if str(sealed[SEALED_KEY]).partition(":")[0] == self.newest:
            return None
        return self.seal(self.open(sealed, queue, job_type, job_id), queue, job_type, job_id)


def encrypted_queues(value: Any) -> frozenset[str] | None:
    """``Antre(encrypt=)`` as the queues it seals: None for every queue (True), else names."""
    if value is True:
        return None
    if value is False:
        return frozenset()
    if (isinstance(value, (list, tuple, set, frozenset))
            and all(isinstance(q, str) for q in value)):
        return frozenset(value)
    raise InvalidJob(f"encrypt={value!r}: pass True (every queue), False, or a list of "
                     "queue names")
