"""Flow control shared by every worker: concurrency limits, rate limits and circuit breakers.

Each is Redis state changed by one Lua script per transition (``antre/engine/lua/sem_*.lua``,
``rate_take.lua``, ``breaker_*.lua``), so the limits hold across processes and hosts. Time is
always passed in as ``now_ms`` from the injected clock; nothing here sleeps.

- ``Semaphore``: at most ``limit`` holders at once. A slot is scored by its expiry (the holder's
  lease deadline), so the slot of a worker that died frees itself when the lease would have
  ended; a live worker renews its slot together with its lease.
- ``RateLimiter``: a token bucket (``rate_per_s`` refill, ``burst`` capacity).
- ``CircuitBreaker``: closed -> open after ``failure_threshold`` failures within ``window_s``;
  open holds every caller for ``cooldown_s``; then exactly one caller is let through as the
  probe (half_open); its success closes the breaker, its failure opens it for another cooldown.
- ``Limits``: what is in use (an index of every name with its settings) for the dashboard
  and metrics, and ``admit``: the executor's one call before running a handler.

Over a limit, the job is not failed: the executor snoozes it (no attempt spent) for the wait
these return, e.g. ``raise RateLimited(wait_s)``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from antre.engine import keys
from antre.clock import Clock, system_ms
from antre.errors import InvalidJob, RateLimited
from antre.engine.scripts import Scripts

STATES = ("closed", "half_open", "open")


def _register(client: "redis.Redis", kind: str, name: str, settings: dict[str, Any]) -> None:
    if not keys.valid_name(name):
        raise ValueError(f"bad {kind} name {name!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
    client.hset(keys.flow_index(), f"{kind}:{name}", json.dumps(settings, sort_keys=True))


class Semaphore:
    """A counting semaphore across all workers whose slots expire (see the module docstring)."""

    def __init__(self, client: "redis.Redis", name: str, limit: int, clock: Clock = system_ms,
                 *, scripts: Scripts | None = None) -> None:
        if limit < 1:
            raise ValueError("a semaphore limit must be at least 1")
        self.redis, self.name, self.limit, self.clock = client, name, int(limit), clock
        self.key = keys.semaphore(name)
        self.scripts = scripts or Scripts(client)
        self._registered = False

    def _call(self, holder: str, expires_at_ms: int, renew: bool) -> list[Any]:
        if not self._registered:
            _register(self.redis, "sem", self.name, {"limit": self.limit})
            self._registered = True
        return list(self.scripts.sem_acquire(
            keys=[self.key], args=[holder, int(expires_at_ms), self.clock(), self.limit,
                                   int(renew)]))

    def acquire(self, holder: str, expires_at_ms: int) -> bool:
        """Take a slot until ``expires_at_ms`` (re-acquiring a held slot moves its expiry)."""
        return int(self._call(holder, expires_at_ms, False)[0]) == 1

    def try_acquire(self, holder: str, expires_at_ms: int) -> float:
        """0 when a slot was taken, else the seconds until the soonest slot expires (at most;
        a release frees one sooner)."""
        reply = self._call(holder, expires_at_ms, False)
        return 0.0 if int(reply[0]) == 1 else int(reply[2]) / 1000

    def renew(self, holder: str, expires_at_ms: int) -> bool:
        """Move a held slot's expiry; False when the slot is gone (it expired and was freed)."""
        return int(self._call(holder, expires_at_ms, True)[0]) == 1

    def release(self, holder: str) -> bool:
        reply = self.scripts.sem_release(keys=[self.key], args=[holder, self.clock()])
        return int(reply[0]) == 1

    def count(self) -> int:
        """Slots in use now (slots past their expiry are not counted)."""
        return int(self.redis.zcount(self.key, self.clock(), "+inf"))

    def holders(self) -> list[tuple[str, int]]:
        """(holder, expiry ms) of the live slots, soonest expiry first."""
        rows: list[tuple[str, float]] = cast(Any, self.redis.zrangebyscore(
            self.key, self.clock(), "+inf", withscores=True))
        return [(h, int(score)) for h, score in rows]


class RateLimiter:
    """A token bucket shared by all workers: ``rate_per_s`` sustained, ``burst`` at once."""

    def __init__(self, client: "redis.Redis", name: str, rate_per_s: float, burst: int,
                 clock: Clock = system_ms, *, scripts: Scripts | None = None) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be positive and burst at least 1")
        self.redis, self.name, self.clock = client, name, clock
        self.rate_per_s, self.burst = float(rate_per_s), int(burst)
        self.key = keys.rate_bucket(name)
        self.scripts = scripts or Scripts(client)
        self._registered = False

    def take(self, n: int = 1) -> float:
        """Take ``n`` tokens: 0 when allowed, else the seconds to wait (nothing was taken)."""
        if n > self.burst:
            raise ValueError(f"cannot take {n} tokens at once from a bucket of {self.burst}")
        if not self._registered:
            _register(self.redis, "rate", self.name,
                      {"rate_per_s": self.rate_per_s, "burst": self.burst})
            self._registered = True
        reply = self.scripts.rate_take(keys=[self.key],
                                       args=[repr(self.rate_per_s), self.burst, n, self.clock()])
        return 0.0 if int(reply[0]) == 1 else int(reply[1]) / 1000

    def take_or_raise(self, n: int = 1) -> None:
        """``take``, raising ``RateLimited(wait)`` when the bucket is short."""
        wait = self.take(n)
        if wait > 0:
            raise RateLimited(wait, f"rate limit {self.name!r} ({self.rate_per_s:g}/s, burst "
                                    f"{self.burst}): retry after {wait:g}s")

    def tokens(self) -> float:
        """Tokens available now (read only)."""
        raw = self.redis.hmget(self.key, "tokens", "ts")
        if raw[0] is None or raw[1] is None:
            return float(self.burst)
        elapsed = max(0, self.clock() - int(float(raw[1])))
        return min(float(self.burst), float(raw[0]) + elapsed * self.rate_per_s / 1000)


@dataclass(frozen=True)
class BreakerState:
    """A circuit breaker as the dashboard and metrics show it. Times are epoch ms."""

    name: str
    state: str  # closed | open | half_open
    failures: int  # in the current window (closed only)
    failure_threshold: int
    window_s: float
    cooldown_s: float
    opened_at: int
    open_until: int
    retry_after_s: float  # open: until the probe may go; 0 otherwise
    probe: str  # holder of the probe while half_open
    probe_until: int
    changed_at: int
    opens: int
    probes: int
    failures_total: int
    successes_total: int
    last_failure_at: int

    @property
    def code(self) -> int:
        """0 closed, 1 half_open, 2 open (the ``antre_circuit_breaker_state`` gauge)."""
        return STATES.index(self.state) if self.state in STATES else 0


def _int(value: Any) -> int:
    try:
        return int(float(value or 0))
    except (TypeError, ValueError):
        return 0


class CircuitBreaker:
    """A circuit breaker per downstream, shared by all workers (see the module docstring)."""

    def __init__(self, client: "redis.Redis", name: str, failure_threshold: int = 5,
                 window_s: float = 60.0, cooldown_s: float = 30.0, clock: Clock = system_ms,
                 *, probe_timeout_s: float = 60.0, hold_s: float = 1.0,
                 scripts: Scripts | None = None) -> None:
        if failure_threshold < 1 or window_s <= 0 or cooldown_s <= 0 or probe_timeout_s <= 0:
            raise ValueError("failure_threshold >= 1 and positive window_s, cooldown_s, "
                             "probe_timeout_s")
        self.redis, self.name, self.clock = client, name, clock
        self.failure_threshold = int(failure_threshold)
        self.window_ms, self.cooldown_ms = int(window_s * 1000), int(cooldown_s * 1000)
        self.probe_timeout_ms, self.hold_ms = int(probe_timeout_s * 1000), int(hold_s * 1000)
        self.key, self.failures_key = keys.breaker(name), keys.breaker_failures(name)
        self.scripts = scripts or Scripts(client)
        self._registered = False

    def _register(self) -> None:
        if not self._registered:
            _register(self.redis, "breaker", self.name, {
                "failure_threshold": self.failure_threshold, "window_s": self.window_ms / 1000,
                "cooldown_s": self.cooldown_ms / 1000})
            self._registered = True

    def allow(self, holder: str = "") -> tuple[bool, str, float]:
        """(allowed, state, retry_after_s). Open: held for the rest of the cooldown. After it,
        the first caller gets the probe (state half_open) and the others are held until the
        probe reports or times out. ``holder`` names the caller (e.g. ``job_id:epoch``); the
        probe holder asking again is allowed again."""
        self._register()
        ok, state, wait_ms = self.scripts.breaker_allow(
            keys=[self.key], args=[holder, self.clock(), self.probe_timeout_ms, self.hold_ms])
        return int(ok) == 1, str(state), int(wait_ms) / 1000

    def record_success(self) -> str:
        """Returns the state after: half_open closes; closed and open stay as they are."""
        self._register()
        return str(self.scripts.breaker_success(keys=[self.key, self.failures_key],
                                                args=[self.clock()]))

    def record_failure(self) -> str:
        """Returns the state after: closed opens at the threshold; half_open opens again."""
        self._register()
        reply = self.scripts.breaker_failure(
            keys=[self.key, self.failures_key],
            args=[self.clock(), self.failure_threshold, self.window_ms, self.cooldown_ms])
        return str(reply[0])

    def release_probe(self, holder: str) -> bool:
        """Give the probe back unused (the caller was then held by another limit)."""
        return int(self.scripts.breaker_release(keys=[self.key],
                                                args=[holder, self.clock()])) == 1

    def reset(self) -> None:
        """Close the breaker and forget its failures (an operator's action)."""
        self.redis.delete(self.key, self.failures_key)

    def state(self) -> BreakerState:
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.key)
        pipe.zcount(self.failures_key, now - self.window_ms + 1, "+inf")
        h, failures = pipe.execute()
        state = h.get("state") or "closed"
        open_until = _int(h.get("open_until"))
        wait = max(0, open_until - now) / 1000 if state == "open" else 0.0
        return BreakerState(
            name=self.name, state=state, failures=int(failures) if state == "closed" else 0,
            failure_threshold=self.failure_threshold, window_s=self.window_ms / 1000,
            cooldown_s=self.cooldown_ms / 1000, opened_at=_int(h.get("opened_at")),
            open_until=open_until, retry_after_s=wait, probe=h.get("probe") or "",
            probe_until=_int(h.get("probe_until")), changed_at=_int(h.get("changed_at")),
            opens=_int(h.get("opens")), probes=_int(h.get("probes")),
            failures_total=_int(h.get("failures_total")),
            successes_total=_int(h.get("successes_total")),
            last_failure_at=_int(h.get("last_failure_at")))


@dataclass(frozen=True)
class SemaphoreState:
    name: str
    limit: int
    in_use: int
    holders: list[tuple[str, int]]


@dataclass(frozen=True)
class RateLimiterState:
    name: str
    rate_per_s: float
    burst: int
    tokens: float


@dataclass(frozen=True)
class LimitPolicy:
    """Limits for one job type or downstream. ``None`` turns a mechanism off."""

    concurrency: int | None = None
    rate_per_s: float | None = None
    burst: int | None = None  # default: max(1, ceil(rate_per_s))
    failure_threshold: int | None = None  # a breaker when set
    window_s: float = 60.0
    cooldown_s: float = 30.0
    # concurrency and rate are held at reserve in the handler's queue (``antre.limits.
    # gates``); True keeps them as one semaphore and token bucket across queues, checked by
    # the worker after delivery (an excess job is snoozed)
    across_queues: bool = False

    def __post_init__(self) -> None:
        _count("concurrency", self.concurrency, "jobs of it in flight at once")
        _count("burst", self.burst, "starts at once under rate_per_s")
        _count("failure_threshold", self.failure_threshold, "failures that open the breaker")
        if self.rate_per_s is not None and not _positive(self.rate_per_s):
            raise InvalidJob(f"bad rate_per_s {self.rate_per_s!r}: a number above 0 (starts "
                             "per second), or None for no rate")
        if not _positive(self.window_s):
            raise InvalidJob(f"bad window_s {self.window_s!r}: seconds above 0")
        if not _positive(self.cooldown_s) and self.cooldown_s != 0:
            raise InvalidJob(f"bad cooldown_s {self.cooldown_s!r}: seconds, 0 or more")


MAX_POLICY_COUNT = 100_000


def _count(name: str, value: Any, what: str) -> None:
    if value is not None and (type(value) is not int or not 1 <= value <= MAX_POLICY_COUNT):
        raise InvalidJob(f"bad {name} {value!r}: an int from 1 to {MAX_POLICY_COUNT} ({what}), "
                         "or None for no limit")


def _positive(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


@dataclass
class Admission:
    """What ``Limits.admit`` took for one job; ``release`` it when the job ends."""

    allowed: bool
    wait_s: float = 0.0
    reason: str = ""  # breaker_open | concurrency_limited | rate_limited ('' when allowed)
    holder: str = ""
    semaphores: list[Semaphore] = field(default_factory=list)
    breaker: CircuitBreaker | None = None

    def renew(self, expires_at_ms: int) -> bool:
        """Move the slots' expiry with the lease (call it where the lease is extended)."""
        renewed = [s.renew(self.holder, expires_at_ms) for s in self.semaphores]  # every one
        return all(renewed)

    def succeeded(self) -> None:
        if self.breaker is not None:
            self.breaker.record_success()

    def failed(self) -> None:
        """The downstream failed (a retryable error or a timeout, not a bug in the payload)."""
        if self.breaker is not None:
            self.breaker.record_failure()

    def release(self) -> None:
        """Give the slots back, and the breaker's probe if it is still out unreported (the
        job ended neither way, e.g. rate limited by the downstream): call it in ``finally``."""
        for s in self.semaphores:
            s.release(self.holder)
        self.semaphores = []
        if self.breaker is not None:
            self.breaker.release_probe(self.holder)


class Limits:
    """Builds the limiters by name and lists every one in use (``keys.flow_index``)."""

    def __init__(self, client: "redis.Redis", clock: Clock = system_ms, *,
                 scripts: Scripts | None = None) -> None:
        self.redis, self.clock = client, clock
        self.scripts = scripts or Scripts(client)

    def semaphore(self, name: str, limit: int) -> Semaphore:
        return Semaphore(self.redis, name, limit, self.clock, scripts=self.scripts)

    def rate_limiter(self, name: str, rate_per_s: float, burst: int) -> RateLimiter:
        return RateLimiter(self.redis, name, rate_per_s, burst, self.clock, scripts=self.scripts)

    def breaker(self, name: str, failure_threshold: int = 5, window_s: float = 60.0,
                cooldown_s: float = 30.0, **options: Any) -> CircuitBreaker:
        return CircuitBreaker(self.redis, name, failure_threshold, window_s, cooldown_s,
                              self.clock, scripts=self.scripts, **options)

    # -- the executor's gate -------------------------------------------------------------------
    def admit(self, holder: str, expires_at_ms: int, *, job_type: str,
              type_policy: LimitPolicy | None = None, downstream: str | None = None,
              downstream_policy: LimitPolicy | None = None, held: tuple[bool, bool] = (False, False)
              ) -> Admission:
        """Breaker, then concurrency slots (job type, then downstream), then the rate limit.
        Denied: everything taken so far is given back and ``wait_s``/``reason`` say why; the
        caller snoozes the job for ``wait_s`` without spending an attempt. ``held``: whether
        the type's and the downstream's concurrency and rate were held at reserve already
        (``antre.limits.gates``): then only the breaker is checked here."""
        adm = Admission(True, holder=holder)
        dp = downstream_policy if downstream else None
        if dp is not None and dp.failure_threshold:
            adm.breaker = self.breaker(f"downstream:{downstream}", dp.failure_threshold,
                                       dp.window_s, dp.cooldown_s)
            ok, _, wait = adm.breaker.allow(holder)
            if not ok:
                return Admission(False, max(wait, 0.001), "breaker_open", holder)
        gates = [(f"type:{job_type}", None if held[0] else type_policy),
                 (f"downstream:{downstream}", None if held[1] else dp)]
        for name, policy in gates:
            if policy is not None and policy.concurrency:
                sem = self.semaphore(name, policy.concurrency)
                wait = sem.try_acquire(holder, expires_at_ms)
                if wait:
                    return self._deny(adm, wait, "concurrency_limited")
                adm.semaphores.append(sem)
        if dp is not None and dp.rate_per_s and not held[1]:
            burst = dp.burst or max(1, int(-(-dp.rate_per_s // 1)))
            wait = self.rate_limiter(f"downstream:{downstream}", dp.rate_per_s, burst).take()
            if wait:
                return self._deny(adm, wait, "rate_limited")
        return adm

    @staticmethod
    def _deny(adm: Admission, wait_s: float, reason: str) -> Admission:
        adm.release()
        return Admission(False, max(wait_s, 0.001), reason, adm.holder)

    # -- reading ---------------------------------------------------------------------------------
    def _index(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for field_name, raw in sorted(self.redis.hgetall(keys.flow_index()).items()):
            k, _, name = str(field_name).partition(":")
            if k == kind:
                try:
                    out.append((name, json.loads(raw)))
                except ValueError:
                    continue
        return out

    def breakers(self) -> list[BreakerState]:
        return [self.breaker(name, int(s.get("failure_threshold", 5)),
                             float(s.get("window_s", 60)), float(s.get("cooldown_s", 30))).state()
                for name, s in self._index("breaker")]

    def semaphores(self) -> list[SemaphoreState]:
        out = []
        for name, s in self._index("sem"):
            sem = self.semaphore(name, max(1, int(s.get("limit", 1))))
            holders = sem.holders()
            out.append(SemaphoreState(name, sem.limit, len(holders), holders))
        return out

    def rate_limiters(self) -> list[RateLimiterState]:
        out = []
        for name, s in self._index("rate"):
            rl = self.rate_limiter(name, float(s.get("rate_per_s", 1)), int(s.get("burst", 1)))
            out.append(RateLimiterState(name, rl.rate_per_s, rl.burst, rl.tokens()))
        return out

    def forget(self, kind: str, name: str) -> None:
        """Drop a name from the index (its state is left to expire)."""
        self.redis.hdel(keys.flow_index(), f"{kind}:{name}")
