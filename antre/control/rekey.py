"""Key rotation for encrypted payloads: the stored ready, scheduled and dead jobs of a queue
re-sealed under the newest version of the key ring (``antre keys rotate``), so an old version
can then be dropped from ``ANTRE_PAYLOAD_KEYS``.

Each page of jobs is read, re-sealed here (AES-GCM is not in Lua) and written back by
``reseal.lua``, which replaces a payload only if it is unchanged since it was read: a job that
ran, was replayed or was purged meanwhile is left as it is. A payload that does not open is
counted, not changed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import redis

from antre.engine import keys
from antre.engine.cipher import CannotOpen, PayloadCipher, is_sealed
from antre.engine.envelope import decode_stored
from antre.engine.scripts import Scripts
from antre.engine import states

PAGE = 500
SOURCES = (states.READY, states.SCHEDULED, states.DEAD)


@dataclass
class Rekeyed:
    """What a rotation did: payloads re-sealed, already under the newest version, and those
    that did not open (with the first few reasons)."""
    resealed: int = 0
    current: int = 0
    unopened: int = 0
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"resealed": self.resealed, "current": self.current,
                "unopened": self.unopened, "reasons": self.reasons[:5]}


def rotate(client: "redis.Redis", scripts: Scripts, cipher: PayloadCipher | None, queue: str,
           partitions: int = 1) -> Rekeyed:
    """Re-seal every stored ready, scheduled and dead job of ``queue`` (its ``partitions``)
    under the newest key version of ``cipher`` (``ValueError`` without one)."""
    if cipher is None:
        raise ValueError("keys rotate needs the key ring: set ANTRE_PAYLOAD_KEYS='v2:<new>,"
                         "v1:<old>' (newest first)")
    done = Rekeyed()
    for partition in range(partitions):
        k = keys.QueueKeys(queue, partition)
        for source in SOURCES:
            for ids in _pages(client, getattr(k, source), source == states.READY):
                _reseal_page(client, scripts, cipher, queue, k, ids, done)
    return done




def _pages(client: "redis.Redis", key: str, is_list: bool) -> Iterator[list[str]]:
    """The ids in a ready list or a scheduled / dead set, ``PAGE`` at a time (a job that moves
    meanwhile may be missed or seen twice: a second rotation finds what the first missed)."""
    read = client.lrange if is_list else client.zrange
    start = 0
    while True:
        ids = [str(i) for i in read(key, start, start + PAGE - 1)]
        if not ids:
            return
        yield ids
        start += PAGE


def _reseal_page(client: "redis.Redis", scripts: Scripts, cipher: PayloadCipher, queue: str,
                 k: keys.QueueKeys, ids: list[str], done: Rekeyed) -> None:
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(k.job(job_id), "type", "payload")
    job_keys: list[str] = []
    args: list[str] = []
    for job_id, (job_type, raw) in zip(ids, pipe.execute()):
        sealed, _ = decode_stored(raw or "")
        if not is_sealed(sealed):
            continue
        try:
            new = cipher.reseal(sealed, queue, str(job_type), job_id)
        except CannotOpen as exc:
            done.unopened += 1
            done.reasons.append(f"{job_id}: {exc}")
            continue
        if new is None:
            done.current += 1
        else:
            job_keys.append(k.job(job_id))
            args += [str(raw), new]
    if job_keys:
        done.resealed += int(scripts.reseal(keys=job_keys, args=args))
