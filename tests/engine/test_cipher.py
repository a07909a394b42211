"""antre.engine.cipher: the key ring's parsing and the seal's binding (no Redis)."""

from __future__ import annotations

import base64
import json
import os

import pytest

from antre.engine.cipher import CannotOpen, PayloadCipher, encrypted_queues, is_sealed, parse_ring
from antre.errors import InvalidJob

K1, K2 = os.urandom(32), os.urandom(32)


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_a_sealed_payload_opens_only_for_its_own_job():
    cipher = PayloadCipher({"v1": K1})
    sealed = json.loads(cipher.seal('{"a":1}', "q", "t", "id1"))
    assert is_sealed(sealed) and sealed["$enc"].startswith("v1:")
    assert cipher.open(sealed, "q", "t", "id1") == '{"a":1}'
    for other in (("q2", "t", "id1"), ("q", "t2", "id1"), ("q", "t", "id2")):
        with pytest.raises(CannotOpen, match="moved from another job"):
            cipher.open(sealed, *other)


def test_the_newest_version_seals_and_the_older_ones_open():
    old = PayloadCipher({"v1": K1})
    ring = PayloadCipher(parse_ring(f"v2:{_b64(K2)},v1:{_b64(K1)}"))
    from_old = json.loads(old.seal("1", "q", "t", "i"))
    assert ring.open(from_old, "q", "t", "i") == "1"
    resealed = json.loads(ring.reseal(from_old, "q", "t", "i") or "")
    assert resealed["$enc"].startswith("v2:") and ring.reseal(resealed, "q", "t", "i") is None
    with pytest.raises(CannotOpen, match="'v2', which is not in ANTRE_PAYLOAD_KEYS"):
        old.open(resealed, "q", "t", "i")


def test_a_wrong_key_under_the_same_version_does_not_open():
    sealed = json.loads(PayloadCipher({"v1": K1}).seal("1", "q", "t", "i"))
    with pytest.raises(CannotOpen, match="wrong key"):
        PayloadCipher({"v1": K2}).open(sealed, "q", "t", "i")


@pytest.mark.parametrize("text, says", [
    ("v1:" + _b64(os.urandom(16)), "is 16 bytes: AES-256-GCM needs 32"),
    ("v1:not base64!", "is not base64"),
    (_b64(K1), "'<version>:<base64 key>'"),
    (f"v1:{_b64(K1)},v1:{_b64(K2)}", "given twice"),
    (f"v 1:{_b64(K1)}", "bad payload key version"),
])
def test_a_bad_ring_is_refused_saying_what_to_pass(text, says):
    with pytest.raises(ValueError, match=says):
        parse_ring(text)


def test_an_empty_ring_and_a_bad_encrypt_option_are_refused():
    with pytest.raises(ValueError, match="at least one key"):
        PayloadCipher({})
    assert encrypted_queues(True) is None and encrypted_queues(["a"]) == {"a"}
    with pytest.raises(InvalidJob, match="list of queue names"):
        encrypted_queues("a")
