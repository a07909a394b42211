"""Every Redis key Antre uses is spelled here and nowhere else.

All keys of one queue share the hash tag ``{queue}`` so that every Lua script touching a queue
runs on one Redis Cluster slot. Keys that are not per queue (worker registry, locks, the queue
index) carry their own hash tag.

A queue spread over N partitions has N such tags: partition 0 keeps ``{queue}`` (a
queue of one partition is exactly as before), partition p > 0 has ``{queue~p}`` or
``{queue~p.<n>}`` (``partition_tag``: placed around the slot ring so that a Cluster's masters
get an even share; ``~`` is in no name, so no other queue's tag can be one of these). The ids of the jobs (and flows) made in
partition p > 0 end with ``~p`` (``partition_suffix``), so every reader finds a job's partition
from its id alone (``id_partition``).
"""

from __future__ import annotations

import re
from binascii import crc_hqx
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

PREFIX = "antre"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}\Z")  # \Z: "$" would let a final newline by
PARTITION_SEP = "~"  # in no valid name: partition p > 0's tag and its ids' suffix
MAX_PARTITIONS = 256


def valid_name(name: str) -> bool:
    """Queue names, job types and worker ids: printable, no braces, at most 100 characters
    (a value that is not a ``str`` is not a name)."""
    return isinstance(name, str) and bool(_NAME_RE.match(name))


SLOTS = 16384  # Redis Cluster's hash slots
SPREAD_WINDOW = 16  # slots: how close to its target a partition's tag lands


def _slot(tag: str) -> int:
    """The Redis Cluster slot of a key with hash tag ``tag`` (CRC16-XMODEM, as Redis)."""
    return crc_hqx(tag.encode(), 0) % SLOTS


def _spread(p: int) -> float:
    """Partition p's place around the slot ring, from partition 0's: base-3 van der Corput
    (1/3, 2/3, 1/9, 4/9, ...), so the first 3 partitions are a third of the ring apart (three
    masters holding equal ranges get one each), 9 get 3 each, and any N stays near even."""
    out, scale = 0.0, 1 / 3
    while p:
        p, digit = divmod(p, 3)
        out += digit * scale
        scale /= 3
    return out


@lru_cache(maxsize=8192)
def partition_tag(queue: str, partition: int) -> str:
    """The hash tag of a queue's partition: ``queue`` for partition 0, else ``queue~p`` or
    ``queue~p.<n>``, the first whose slot is within ``SPREAD_WINDOW`` of its place
    (``_spread``): a pure function of the two, the same on every host (~1,000 CRCs once)."""
    if not partition:
        return queue
    base = f"{queue}{PARTITION_SEP}{partition}"
    target = (_slot(queue) + round(_spread(partition) * SLOTS)) % SLOTS
    salt = 0
    while True:
        name = f"{base}.{salt}" if salt else base
        if (_slot(name) - target) % SLOTS < SPREAD_WINDOW:
            return name
        salt += 1


def partition_suffix(partition: int) -> str:
    """What ends the ids made in ``partition``: '' for partition 0, ``~p`` otherwise."""
    return f"{PARTITION_SEP}{partition}" if partition else ""


def id_partition(job_id: str) -> int:
    """The partition a job (or flow) id was made in: p for an id ending with ``~p`` (p > 0, no
    leading zero), else 0 (every id of a queue with one partition, every caller's own id)."""
    base, sep, tail = job_id.rpartition(PARTITION_SEP)
    if not sep or not base or not tail.isdigit() or tail[0] == "0":
        return 0
    return int(tail)


def valid_job_id(job_id: str) -> bool:
    """A job or flow id: a valid name, or one followed by a partition's suffix ``~p``."""
    if not isinstance(job_id, str):
        return False
    if valid_name(job_id):
        return True
    base, sep, tail = job_id.rpartition(PARTITION_SEP)
    return (bool(sep) and valid_name(base) and tail.isdigit() and tail[0] != "0"
            and int(tail) < MAX_PARTITIONS)


class Tagged:
    """What follows a queue partition's tag (``antre:{queue}:``) in the name of each key a
    script derives from a job prefix or a flow's key: the one spelling of each. ``QueueKeys``
    builds those keys from these, and the scripts read them as the Lua table ``K``
    (``K.turns`` is ``'kturn'``: ``lua_keys``, written into the library by
    ``antre/engine/scripts.py``), so no script spells a key (``tests/engine/test_lua_keys.py``).
    A name ending with ':' is followed by what it is per (a lock key, a group, a gate, a job or
    flow id); ``flow_*`` names starting with ':' follow a flow's own key."""

    ready = "ready"
    wake = "wake"
    scheduled = "scheduled"
    waiting = "waiting"
    held = "held"
    job = "job:"
    turns = "kturn"
    line = "kline:"
    group_held = "gheld:"
    group_line = "gline:"
    group_rate = "grate:"
    group_waiting = "gwait"
    group_slots = "gslots"
    group_limits = "glimits"
    gate_candidates = "lcand"
    gate_slots = "lconc"
    gate_rates = "lrate"
    gate_active = "lactive"
    gate_overrides = "lover"
    gate_held = "lheld:"
    gate_line = "lline:"
    gate_starts = "lstart:"
    timeline = "tl:"
    idem_index = "idem"
    result_wake = "rwake:"
    replay_watch = "rwatch"
    error_groups = "errgroups"
    error_tracebacks = "errtb"
    flow = "flow:"
    flows_by_state = "flows:"
    flow_trims = "flowtrim"
    flow_jobs = ":jobs"
    flow_results = ":res"
    flow_failed = ":failed"
    flow_wake = ":wake"
    quarantine = "quarantine"
    stats = "stats"


@dataclass(frozen=True)
class Record:
    """A kind of record the scripts keep beside the job hashes: its key's name in ``Tagged``,
    its Redis type, what it holds, and the fields a hash of the kind always has. A script
    reads one only through ``guard`` (``lua/_guard.lua``): a record of another type or
    without those fields (written by hand, by another program, by a bug) is reported in the
    queue's quarantine with what it was and removed, and the script goes on as for a record
    that is not there (``tests/engine/test_damaged_records.py`` damages each one)."""

    name: str
    redis_type: str
    doc: str
    fields: tuple[str, ...] = ()


RECORDS: tuple[Record, ...] = (
    Record("turns", "hash", "lock key -> the id of the job whose turn it is (its head)"),
    Record("line", "list", "a lock key's waiting ids, behind its head"),
    Record("waiting", "zset", "every job in state waiting -> when it joined its line"),
    Record("group_held", "set", "the ids holding one of a group's slots"),
    Record("group_line", "list", "a group's waiting ids"),
    Record("group_slots", "zset", "group -> slots held (the Groups page's index)"),
    Record("group_waiting", "zset", "group -> jobs in its line (the Groups page's index)"),
    Record("group_rate", "zset", "a group's starts under its rate"),
    Record("group_limits", "hash", "group -> an operator's override of its slots and rate"),
    Record("gate_active", "hash", "job type -> its gates with a limit"),
    Record("gate_slots", "hash", "gate -> its declared slots"),
    Record("gate_rates", "hash", "gate -> its declared rate"),
    Record("gate_overrides", "hash", "gate -> an operator's override of its slots and rate"),
    Record("gate_held", "set", "the ids in flight holding a gate's slot"),
    Record("gate_line", "list", "a gate's waiting ids"),
    Record("gate_starts", "zset", "a gate's starts under its rate"),
    Record("flow", "hash", "a flow's state and counters", ("state", "total", "pending")),
    Record("flow_results", "hash", "a flow's settled members -> their results"),
    Record("flow_failed", "set", "a flow's dead members not settled"),
    Record("flow_jobs", "list", "a flow's job ids"),
)


def sound(replies: list[Any], defaults: tuple[Any, ...]) -> list[Any]:
    """A pipeline's replies (``execute(raise_on_error=False)``) with each refused one (a record
    of another type: WRONGTYPE) read as its default (``defaults``, one per reply, repeated):
    a reader's page goes on past one damaged record; any other error is raised."""
    out = []
    for i, reply in enumerate(replies):
        if isinstance(reply, Exception):
            if "WRONGTYPE" not in str(reply):
                raise reply
            reply = defaults[i % len(defaults)]
        out.append(reply)
    return out


def lua_records() -> dict[str, str]:
    """Each record kind's Redis type, as ``TYPE`` names it: the scripts' table ``R``."""
    return {r.name: r.redis_type for r in RECORDS}


def lua_keys() -> dict[str, str]:
    """``Tagged``'s names and values: the scripts' table ``K``."""
    return {name: value for name, value in vars(Tagged).items()
            if not name.startswith("_") and isinstance(value, str)}


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue's partition (0 unless given). ``job_prefix`` + job id is a job's
    hash."""

    queue: str
    partition: int = 0

    @property
    def tag(self) -> str:
        if self.partition:
            return f"{PREFIX}:{{{partition_tag(self.queue, self.partition)}}}"
        return f"{PREFIX}:{{{self.queue}}}"

    @property
    def partition_count(self) -> str:
        """STRING: how many partitions the queue has (absent: 1); in partition 0's slot,
        only ever grown (``partitions_grow.lua``; antre/engine/partitions.py)."""
        return f"{PREFIX}:{{{self.queue}}}:partitions"

    @property
    def job_prefix(self) -> str:
        return f"{self.tag}:{Tagged.job}"

    def job(self, job_id: str) -> str:
        return f"{self.job_prefix}{job_id}"

    @property
    def ready(self) -> str:  # LIST, LPUSH newest, RPOP oldest
        return f"{self.tag}:{Tagged.ready}"

    @property
    def wake(self) -> str:  # LIST of wake-up tokens: idle workers BLPOP it (capped at 64)
        return f"{self.tag}:{Tagged.wake}"

    @property
    def scheduled(self) -> str:  # ZSET score = visible_at ms
        return f"{self.tag}:{Tagged.scheduled}"

    @property
    def inflight(self) -> str:  # ZSET score = lease deadline ms
        return f"{self.tag}:inflight"

    @property
    def dead(self) -> str:  # ZSET score = died_at ms
        return f"{self.tag}:dead"

    @property
    def dead_type_prefix(self) -> str:  # ZSET per job type, score = died_at ms
        return f"{self.tag}:dead:type:"

    def dead_by_type(self, job_type: str) -> str:
        return f"{self.dead_type_prefix}{job_type}"

    @property
    def dead_group_prefix(self) -> str:  # ZSET per error group, score = died_at ms
        return f"{self.tag}:dead:group:"

    def dead_by_group(self, group: str) -> str:
        return f"{self.dead_group_prefix}{group}"

    @property
    def error_groups(self) -> str:  # HASH group -> JSON {signature, count, first, last, sample}
        return f"{self.tag}:{Tagged.error_groups}"

    @property
    def error_tracebacks(self) -> str:
        """HASH group -> the traceback's head (all but its last line) that the group's dead
        jobs share: each keeps its last line and 'tb_group' (tb_share in
        lua/_failure.lua); scripts derive it from the job prefix ('<tag>:errtb')."""
        return f"{self.tag}:{Tagged.error_tracebacks}"

    @property
    def done(self) -> str:  # ZSET score = finished ms (kept a while for the UI)
        return f"{self.tag}:done"

    @property
    def stats(self) -> str:  # HASH of counters
        return f"{self.tag}:stats"

    @property
    def types(self) -> str:  # SET of job types seen in this queue
        return f"{self.tag}:types"

    @property
    def samples(self) -> str:  # ZSET score = sampled-at ms, member = JSON sample
        return f"{self.tag}:samples"

    @property
    def replays(self) -> str:  # HASH task id -> JSON bulk-replay task state
        return f"{self.tag}:replays"

    @property
    def replay_watch(self) -> str:
        """HASH '<task id>|failed|died|same|last' -> n (last: an error group): what the jobs a
        paced bulk replay put here did since (redrive_failed in lua/_burial.lua)."""
        return f"{self.tag}:{Tagged.replay_watch}"

    @property
    def durations(self) -> str:  # HASH '<kind>|<job type>|<bucket ms|inf|sum|count>' -> n
        return f"{self.tag}:durations"

    def perf(self, resolution: str, slot: int) -> str:
        """HASH '<job type>|runs|fail|d|w[|<bucket ms|inf|sum>]' -> n: the runs, failures,
        handler durations (d) and queue waits (w) of the jobs that ran in one time slot
        (``resolution`` 'm': 5 minutes, slot = ms // 300000, kept 2 h; 'h': an hour, slot =
        ms // 3600000, kept 7 d + 1 h; 'q': 6 hours, slot = ms // 21600000, kept 7 d + 6 h;
        'd': a day, slot = ms // 86400000, kept 8 d; antre/observe/perf.py). Expires by
        itself."""
        return f"{self.tag}:perf:{resolution}:{slot}"

    def perf_rank(self, resolution: str, slot: int) -> str:
        """ZSET job type -> runs in the slot ``perf(resolution, slot)`` (written with it, the
        same expiry): the performance index ranks the types of a window by their runs from
        these, one ZUNION per queue, and reads the figures of the types it shows only."""
        return f"{self.tag}:perfrank:{resolution}:{slot}"

    # -- incident controls (pause, parked jobs, purge) -------------------------------------
    @property
    def paused(self) -> str:  # HASH '*' (whole queue) or job type -> JSON {by, at, reason}
        return f"{self.tag}:paused"

    @property
    def parked_prefix(self) -> str:  # LIST per paused job type, LPUSH newest, RPOP oldest
        return f"{self.tag}:parked:"

    def parked(self, job_type: str) -> str:
        return f"{self.parked_prefix}{job_type}"

    @property
    def parked_types(self) -> str:  # SET of job types with a parked list (may be empty)
        return f"{self.tag}:parked_types"

    @property
    def cancels(self) -> str:  # HASH job id -> JSON {by, to, reason, at}: operator's requests
        return f"{self.tag}:cancels"

    @property
    def tombstones(self) -> str:  # STRING counter: purged ids still marked in ready/parked lists
        return f"{self.tag}:tombstones"

    @property
    def quarantine(self) -> str:  # LIST of JSON: ids too broken to be dead jobs (newest first)
        return f"{self.tag}:quarantine"

    # -- per-key turns: jobs sharing a lock_key run one at a time, in order -----------------
    # The scripts given only ``job_prefix`` derive these from it (antre/engine/lua/_turns.lua,
    # ``turns_key`` / ``line_key`` / ``waiting_key``).
    @property
    def turns(self) -> str:  # HASH lock_key -> id of the job whose turn it is (the key's head)
        return f"{self.tag}:{Tagged.turns}"

    @property
    def line_prefix(self) -> str:  # LIST per lock_key: jobs waiting behind the head
        return f"{self.tag}:{Tagged.line}"

    def line(self, lock_key: str) -> str:
        """LIST of the ids waiting behind ``lock_key``'s head, LPUSH newest, RPOP oldest (an id
        no longer in ``waiting``, e.g. purged, is stepped over when the turn passes)."""
        return f"{self.line_prefix}{lock_key}"

    @property
    def waiting(self) -> str:  # ZSET score = joined the line ms: the jobs in state 'waiting'
        return f"{self.tag}:{Tagged.waiting}"

    # fair-share groups: derived in the scripts from ``job_prefix`` as well
    def group_held(self, group: str) -> str:  # SET of the ids holding one of the group's slots
        return f"{self.tag}:{Tagged.group_held}{group}"

    def group_line(self, group: str) -> str:  # LIST: the group's waiting jobs, LPUSH newest
        return f"{self.tag}:{Tagged.group_line}{group}"

    def group_rate(self, group: str) -> str:
        """ZSET job id -> its start (ms) under the group's rate n/window: those of the last
        window and those ahead (rate_start in lua/_groups.lua); it expires a window after the
        newest."""
        return f"{self.tag}:{Tagged.group_rate}{group}"

    @property
    def group_waiting(self) -> str:  # ZSET group -> jobs in its line (the Groups page's index)
        return f"{self.tag}:{Tagged.group_waiting}"

    @property
    def group_slots(self) -> str:  # ZSET group -> slots held (ready, scheduled or in flight)
        return f"{self.tag}:{Tagged.group_slots}"

    @property
    def group_limits(self) -> str:  # HASH group -> '<slots>|<until ms>': operators' overrides
        return f"{self.tag}:{Tagged.group_limits}"

    @property
    def group_overrides(self) -> str:  # HASH group -> JSON {slots, by, reason, at, until_ms}
        return f"{self.tag}:goverrides"

    # flow limits held at reserve (lua/_gates.lua); a gate is
    # 'type:<job type>' or 'ds:<downstream>'. The scripts derive these from ``job_prefix``.
    @property
    def gate_candidates(self) -> str:  # HASH job type -> its gates, as its worker declared
        return f"{self.tag}:{Tagged.gate_candidates}"

    @property
    def gate_slots(self) -> str:  # HASH gate -> slots (declared concurrency)
        return f"{self.tag}:{Tagged.gate_slots}"

    @property
    def gate_rates(self) -> str:  # HASH gate -> '<n>/<window ms>' (declared rate)
        return f"{self.tag}:{Tagged.gate_rates}"

    @property
    def gate_active(self) -> str:  # HASH job type -> its gates with a limit (reserve reads it)
        return f"{self.tag}:{Tagged.gate_active}"

    @property
    def gate_overrides(self) -> str:  # HASH gate -> '<slots>|<until ms>|<n>/<window ms>'
        return f"{self.tag}:{Tagged.gate_overrides}"

    @property
    def gate_override_records(self) -> str:  # HASH gate -> JSON {slots, rate, by, reason, ...}
        return f"{self.tag}:loverrec"

    def gate_held(self, gate: str) -> str:  # SET of the ids in flight holding a gate's slot
        return f"{self.tag}:{Tagged.gate_held}{gate}"

    def gate_line(self, gate: str) -> str:  # LIST: the gate's waiting jobs, LPUSH newest
        return f"{self.tag}:{Tagged.gate_line}{gate}"

    def gate_starts(self, gate: str) -> str:  # ZSET id -> its start under the gate's rate
        return f"{self.tag}:{Tagged.gate_starts}{gate}"

    # -- finder and job timelines ------------------------------------------------------------
    # The Lua scripts that get only ``job_prefix`` derive these two from it (antre/engine/lua/_turns.lua,
    # ``tl_key`` / ``idem_index_key``: the prefix without its trailing 'job:').
    @property
    def timeline_prefix(self) -> str:  # LIST per job: its events as JSON, oldest first, capped
        return f"{self.tag}:{Tagged.timeline}"

    def timeline(self, job_id: str) -> str:
        return f"{self.timeline_prefix}{job_id}"

    @property
    def idem_index(self) -> str:  # HASH idempotency key -> id of the newest job carrying it
        return f"{self.tag}:{Tagged.idem_index}"

    def result_wake(self, job_id: str) -> str:
        """LIST of wake tokens for producers waiting on the job's end (``app.result(key)
        .wait()``): the script that ends a job whose field 'waiters' is set pushes that many
        and expires the list shortly after (``_waiters.lua`` ``result_wake``; derived there from
        the job prefix as ``<tag>:rwake:<id>``)."""
        return f"{self.tag}:{Tagged.result_wake}{job_id}"

    # -- producer side: unique jobs, periodic schedules, retention --------------------------
    @property
    def unique_prefix(self) -> str:  # STRING per idempotency key of a unique job (see below)
        return f"{self.tag}:uniq:"

    def unique(self, idempotency_key: str) -> str:
        """STRING: the id of the pending job holding ``idempotency_key`` (a unique job), or
        ``done:<id>`` with a TTL while a completed job's ``unique_for_s`` window lasts."""
        return f"{self.unique_prefix}{idempotency_key}"

    # -- flows: chains, groups, chords and batches; see lua/_flows.lua -----------------
    # The scripts derive these from ``job_prefix`` and the flow id (``flow_key`` in _flows.lua:
    # '<tag>:flow:<id>' and its suffixes), so all of a flow sits in its queue's slot.
    @property
    def held(self) -> str:  # ZSET score = enqueued ms: jobs in state 'held' (parents unfinished)
        return f"{self.tag}:{Tagged.held}"

    def flow(self, flow_id: str) -> str:
        """HASH: a flow's state, counters (total, done, failed, pending), policy, times."""
        return f"{self.tag}:{Tagged.flow}{flow_id}"

    def flow_jobs(self, flow_id: str) -> str:  # LIST: the flow's job ids, in the order made
        return f"{self.tag}:{Tagged.flow}{flow_id}{Tagged.flow_jobs}"

    def flow_results(self, flow_id: str) -> str:
        """HASH job id -> its result JSON once settled ('!' + JSON {job_id, error}: a failure
        the flow ignored); an id in it is settled (the exactly-once guard)."""
        return f"{self.tag}:{Tagged.flow}{flow_id}{Tagged.flow_results}"

    def flow_failed(self, flow_id: str) -> str:  # SET: dead children not settled (fail, wait)
        return f"{self.tag}:{Tagged.flow}{flow_id}{Tagged.flow_failed}"

    def flow_wake(self, flow_id: str) -> str:  # LIST: one token once the flow has finished
        return f"{self.tag}:{Tagged.flow}{flow_id}{Tagged.flow_wake}"

    def flows_by_state(self, state: str) -> str:
        """ZSET flow id -> created ms (finished_at ms for a finished state, since when it
        waits for 'waiting'): the flows in ``state`` (running, waiting, failed, succeeded,
        cancelled)."""
        return f"{self.tag}:{Tagged.flows_by_state}{state}"

    @property
    def flow_trims(self) -> str:
        """LIST of ids of failed / waiting flows past their retention whose records are gone
        and whose jobs' lists the retention is still walking, dropping their held jobs
        (``retention.lua``; derived there from the tag as ``<tag>:flowtrim``)."""
        return f"{self.tag}:{Tagged.flow_trims}"

    def schedule(self, name: str) -> str:
        """HASH: a periodic schedule's state (last_tick, last_job, last_enqueued_at, paused,
        paused_by), in the queue's slot so the enqueue script checks the tick atomically."""
        return f"{self.tag}:schedule:{name}"


def of_job(queue: str, job_id: str) -> QueueKeys:
    """The keys of the partition of ``queue`` that ``job_id`` (a job's or a flow's) was made
    in: the one place a reader needs to find a job from its id."""
    return QueueKeys(queue, id_partition(job_id))


def queues_index() -> str:
    """SET of queue names that ever had a job."""
    return f"{PREFIX}:queues"


def workers_index() -> str:
    """ZSET worker id -> last heartbeat ms."""
    return f"{PREFIX}:{{workers}}:index"


def worker_starts() -> str:
    """ZSET JSON {id, host, version} -> start ms: worker processes started in the last 7 days
    (at most 1,000), the performance page's deploy markers."""
    return f"{PREFIX}:{{workers}}:starts"


def worker_restarts() -> str:
    """ZSET JSON {id, host, cause, type, timeout_s, t} -> ms: worker processes restarted in the
    last 7 days (at most 1,000) and why, for the incident view."""
    return f"{PREFIX}:{{workers}}:restarts"


def worker_restart_counts() -> str:
    """HASH '<cause>|<job type>' -> worker processes restarted for it, ever (the metric)."""
    return f"{PREFIX}:{{workers}}:restart_counts"


def worker(worker_id: str) -> str:
    """HASH of one worker's heartbeat record."""
    return f"{PREFIX}:{{workers}}:w:{worker_id}"


def lock(key: str) -> str:
    """STRING holding the token of the lock on a business key."""
    return f"{PREFIX}:lock:{{{key}}}"


def lock_fence(key: str) -> str:
    """STRING counter: the fencing token of the last acquire of ``key``."""
    return f"{PREFIX}:lock:{{{key}}}:fence"


def locks_held() -> str:
    """ZSET business key -> lock expiry ms (index for the Locks page; pruned on read)."""
    return f"{PREFIX}:{{locks}}:held"


def locks_since() -> str:
    """HASH business key -> '<acquired ms>|<holder job>' of each held lock (the Locks page's
    "held since" and "by which job"; same slot as ``locks_held``, kept by the lock scripts)."""
    return f"{PREFIX}:{{locks}}:since"


def lock_conflicts() -> str:
    """ZSET business key -> conflicts counted."""
    return f"{PREFIX}:{{locks}}:conflicts"


def lock_conflict_times() -> str:
    """ZSET ``<ms>:<key>:<n>`` -> ms, conflicts in the last hour, for the per-minute rate."""
    return f"{PREFIX}:{{locks}}:conflict_times"


def lock_conflict_count() -> str:
    """STRING counter: conflicts ever, all keys."""
    return f"{PREFIX}:{{locks}}:conflicts:count"


def lock_conflict_minute(minute: int) -> str:
    """ZSET business key -> conflicts in one minute (``minute`` = epoch ms // 60000); expires an
    hour after the minute ends, so the last 5 minutes / hour per key are a few small ZSETs."""
    return f"{PREFIX}:{{locks}}:conflicts:m:{minute}"


def lock_contention_scratch() -> str:
    """ZSET, exists only inside ``lock_contention.lua``: the last hour's buckets summed."""
    return f"{PREFIX}:{{locks}}:conflicts:scratch"


def maintenance_lock(name: str) -> str:
    """STRING token: one pass of a pool duty (sweeper, sampler, ...) cluster-wide per tick."""
    return f"{PREFIX}:{{maint}}:{name}"


def alerts() -> str:
    """HASH rule -> JSON state of alerts."""
    return f"{PREFIX}:{{alerts}}:state"


def rate_bucket(name: str) -> str:
    return f"{PREFIX}:rl:{{{name}}}"


def semaphore(name: str) -> str:
    return f"{PREFIX}:sem:{{{name}}}"


def breaker(name: str) -> str:
    """HASH: a circuit breaker's state (see ``antre/engine/lua/breaker_*.lua``)."""
    return f"{PREFIX}:cb:{{{name}}}"


def breaker_failures(name: str) -> str:
    """ZSET ``<ms>:<seq>`` -> ms: a breaker's failures in its sliding window (same slot)."""
    return f"{PREFIX}:cb:{{{name}}}:failures"


def flow_index() -> str:
    """HASH ``<kind>:<name>`` -> JSON settings of every semaphore, rate limiter and breaker
    in use (kind is ``sem``, ``rate`` or ``breaker``), for the dashboard and metrics."""
    return f"{PREFIX}:{{flow}}:index"


def alert_points() -> str:
    """HASH queue -> JSON list of ``[ms, {counter: value}]`` the alert rules compare against."""
    return f"{PREFIX}:{{alerts}}:points"


def alert_quiet() -> str:
    """HASH incident id -> JSON acknowledgement or silence ``{kind, by, reason, at, until,
    episode}`` (``antre/observe/incidents.py``)."""
    return f"{PREFIX}:{{alerts}}:quiet"


def alert_thresholds() -> str:
    """HASH ``<queue>|<AlertConfig field>`` -> a number or ``off``: an admin's per-queue
    override of an alert threshold (the environment and code set the defaults)."""
    return f"{PREFIX}:{{alerts}}:thresholds"


def alert_signals() -> str:
    """HASH signal -> value measured by the alert check outside Redis (the outbox's oldest
    unsent row, from SQL), for ``/metrics``."""
    return f"{PREFIX}:{{alerts}}:signals"


def login_failures(digest: str) -> str:
    """ZSET ``<ms>:<n>`` -> ms: failed logins of one throttling bucket (a client address, an
    account, or the pair) in the window; ``digest`` is a hash of the bucket (never the raw,
    user-supplied name)."""
    return f"{PREFIX}:{{auth}}:login_failures:{digest}"


def schedules_index() -> str:
    """HASH schedule name -> JSON definition (cron or interval, timezone, job type, queue,
    catch-up policy), written by the schedulers, read by the Schedules page and the CLI."""
    return f"{PREFIX}:{{schedules}}:index"


def retention_policies() -> str:
    """HASH queue -> JSON retention policy in force (written by the retention duty, shown on
    the dead-letter page)."""
    return f"{PREFIX}:{{retention}}:policies"
