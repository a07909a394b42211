"""Stopping a running job (incident controls).

An operator's request (``Cancels.request``: one ``cancel_request.lua`` call) is kept in the
queue's ``cancels`` HASH and on the job itself. The worker that holds the job sees it on its
next heartbeat (one HGETALL per queue it holds jobs of) or with the job when it reserves it:
``ctx.cancelled`` is set, and a handler that looks at it (or calls ``ctx.checkpoint()``) stops;
one that has not returned after its handler's ``cancel_grace_s`` is abandoned like a hard
timeout (its process recycled). Either way its SQL effects are rolled back (the completion
never commits) and the job ends where the operator chose: the dead-letter queue with the
reason ``cancelled by NAME``, or discarded (``Queue.finish_cancelled``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

import redis

from antre.engine import keys, partitions
from antre.clock import Clock, system_ms
from antre.engine.envelope import CANCEL_TO
from antre.engine.scripts import Scripts
from antre.engine import states

MAX_REASON = 2000


class CancelError(ValueError):
    """A cancel request that was refused; the message says why."""


@dataclass(frozen=True)
class CancelRequest:
    by: str
    to: str  # 'dlq' | 'discard'
    reason: str
    at_ms: int

    def to_json(self) -> str:
        return json.dumps({"by": self.by, "to": self.to, "reason": self.reason,
                           "at": self.at_ms}, separators=(",", ":"))

    @property
    def dlq_reason(self) -> str:
        return f"cancelled by {self.by}" + (f": {self.reason}" if self.reason else "")

    @classmethod
    def parse(cls, text: str) -> "CancelRequest | None":
        """None for an empty or damaged value (then there is no request)."""
        try:
            data = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        to = data.get("to") if data.get("to") in CANCEL_TO else "dlq"
        return cls(str(data.get("by", "?")), str(to), str(data.get("reason", "")),
                   int(data.get("at", 0) or 0))


class Cancels:
    def __init__(self, client: "redis.Redis", clock: Clock = system_ms,
                 scripts: Scripts | None = None) -> None:
        self.redis = client
        self.clock = clock
        self.scripts = scripts or Scripts(client)

    def request(self, queue: str, job_id: str, by: str, to: str, reason: str) -> CancelRequest:
        """Ask for ``job_id`` to be stopped; raises ``CancelError`` unless it is running."""
        if to not in CANCEL_TO:
            raise CancelError(f"to must be one of {', '.join(CANCEL_TO)}, not {to!r}")
        if not keys.valid_name(queue) or not keys.valid_job_id(job_id):
            raise CancelError(f"no job {job_id!r} in queue {queue!r}")
        req = CancelRequest(by, to, (reason or "").strip()[:MAX_REASON], self.clock())
        k = keys.of_job(queue, job_id)
        reply = str(self.scripts.cancel_request(
            keys=[k.job(job_id), k.cancels, k.timeline(job_id)],
            args=[job_id, req.to_json(), req.at_ms]))
        if reply != "OK":
            raise CancelError(f"job {job_id} is not running (it is {reply}); only a job in "
                              "flight can be cancelled: nothing was changed")
        return req

    def of(self, queue: str, job_id: str) -> CancelRequest | None:
        """``job_id``'s request not carried out yet (None: none, or damaged)."""
        if not keys.valid_name(queue) or not keys.valid_job_id(job_id):
            return None
        raw = self.redis.hget(keys.of_job(queue, job_id).cancels, job_id)
        return CancelRequest.parse(str(raw)) if raw else None

    def pending(self, queue: str) -> dict[str, CancelRequest]:
        """The requests not carried out yet (job id -> request), of every partition."""
        raw: dict[str, str] = {}
        for k in partitions.all_keys(self.redis, queue):
            raw.update(cast(dict[str, str], self.redis.hgetall(k.cancels)))
        out = {}
        for job_id, text in raw.items():
            req = CancelRequest.parse(text)
            if req is not None:
                out[job_id] = req
        return out

    def prune(self, queue: str) -> int:
        """Forget requests whose job finished anyway (done, dead, or gone); a job put back
        in ready or scheduled after its worker died keeps its request."""
        return sum(self._prune(k) for k in partitions.all_keys(self.redis, queue))

    def _prune(self, k: keys.QueueKeys) -> int:
        ids = list(cast(dict[str, str], self.redis.hgetall(k.cancels)))
        if not ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(k.job(job_id), "state")
        stale = [i for i, state in zip(ids, pipe.execute())
                 if state not in (states.INFLIGHT, states.READY, states.SCHEDULED, states.WAITING)]
        if stale:
            self.redis.hdel(k.cancels, *stale)
        return len(stale)
