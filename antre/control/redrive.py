"""A paced replay that watches what it replayed and stops itself, and the
replay of a dead job into another queue.

Watching costs the scripts nothing per job beyond the jobs a task replayed: ``replay.lua``
keeps the task's id on each job it replays (field ``rtask``), and when such a job fails again
``retry.lua`` / ``bury_job`` bump the task's counters in the queue's ``replay_watch`` HASH
(``redrive_failed`` in ``lua/_burial.lua``): ``failed`` once per job (its first failure since
the replay), ``died`` per death, ``same`` when it died in the error group it came from,
``last`` the group it died in. ``BulkReplays.step`` reads them (one HMGET) before each step and
pauses the task, saying why on its progress row, once more than ``stop_pct`` percent of at
least ``min_sample`` jobs replayed (since the task started or was last resumed) failed again.

``move_dead`` replays a dead job into another queue: its copy is stored there under the same
id (``enqueue.lua``: an id that exists is left as it is, so doing it twice stores one copy),
carrying the task's id, then the original is discarded from the dead-letter queue, its
timeline saying where it went. The two queues are two hash tags (two cluster slots), so this
is two scripts; between them the job is in both queues, never in none. A job of a fair-share
group keeps its group, the group's slots (``group_concurrency``) and rate there: it takes its
turn in the group's line of the queue it goes to. What belongs to the source queue stays
there: an operator's override of the group's slots and a pause of the group; the timeline's
``not_moved`` says so for each job it concerns, and the start of such a replay says it once
(``TARGET_NOTE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from antre.engine import keys, partitions
from antre.engine.envelope import MAX_GROUP_CONCURRENCY, JobSpec
from antre.engine.queue import Queue
from antre.groups.read import GROUP_TARGET
from antre.engine import states

DEFAULT_STOP_PCT = 20.0
DEFAULT_MIN_SAMPLE = 20
FIELDS = ("failed", "died", "same", "last")
DEFAULT_GROUP_SLOTS = 128  # a group naming no group_concurrency (GROUP_WINDOW in lua/_groups.lua)
TARGET_NOTE = ("jobs of a fair-share group keep their group, its slots (group_concurrency) and "
               "its rate in queue {target}; an operator's override or pause of a group in "
               "queue {queue} does not follow them")


@dataclass(frozen=True)
class Watch:
    """What the jobs a task replayed did since: ``failed`` of them failed again at least once,
    ``died`` deaths, ``same`` of them in the error group they were replayed from, ``last``
    the error group of the newest death."""

    failed: int = 0
    died: int = 0
    same: int = 0
    last: str = ""


def watch_key(queue: str, target: str) -> str:
    """The HASH counting a task's replayed jobs: in the queue they were replayed into."""
    return keys.QueueKeys(target or queue).replay_watch


def watch_keys(client: "redis.Redis", queue: str, target: str) -> list[str]:
    """``watch_key`` of each partition of the queue replayed into."""
    return [k.replay_watch for k in partitions.all_keys(client, target or queue)]


def merged(watches: list[Watch]) -> Watch:
    """The partitions' counts of one task added up (``last``: the first partition's that
    has one)."""
    return Watch(sum(w.failed for w in watches), sum(w.died for w in watches),
                 sum(w.same for w in watches), next((w.last for w in watches if w.last), ""))


def watch_fields(task_id: str) -> list[str]:
    return [f"{task_id}|{name}" for name in FIELDS]


def watch_of(values: list[Any]) -> Watch:
    """A ``Watch`` from the HMGET of ``watch_fields`` (missing or damaged counters read 0)."""
    def num(v: Any) -> int:
        try:
            return max(0, int(v or 0))
        except (TypeError, ValueError):
            return 0
    failed, died, same, last = (list(values) + [None] * 4)[:4]
    return Watch(num(failed), num(died), num(same), str(last or ""))


def read_watch(client: "redis.Redis", queue: str, target: str, task_id: str) -> Watch:
    return merged([watch_of(client.hmget(key, watch_fields(task_id)))
                   for key in watch_keys(client, queue, target)])


def check_guard(stop_pct: float, min_sample: int) -> None:
    """``ValueError`` saying what to pass, unless the guard's settings make sense."""
    pct = float(stop_pct)
    if not 0 <= pct <= 100 or pct != pct:
        raise ValueError("stop_pct must be between 0 and 100 (percent of replayed jobs that "
                         "may fail again; 0: never stop)")
    if int(min_sample) < 1:
        raise ValueError("min_sample must be at least 1 (replayed jobs before the guard judges)")


def verdict(replayed: int, failed: int, stop_pct: float, min_sample: int, same: int,
            signature: str) -> str:
    """'' to go on; else why the task pauses itself. ``replayed`` and ``failed`` count since
    the task started or was last resumed; ``same`` and ``signature`` say where they died."""
    if stop_pct <= 0 or replayed < max(1, min_sample) or failed * 100 <= stop_pct * replayed:
        return ""
    where = ""
    if same:
        where = f", {same} died again in group {signature or '(unknown)'}"
    return (f"paused: {failed} of {replayed} replayed jobs failed again (more than "
            f"{stop_pct:g}%){where}; resume or cancel")


def check_target(known: list[str], queue: str, target: str) -> str:
    """The queue to replay into ('' the job's own); ``ValueError`` naming the queues that
    exist for one that does not."""
    target = (target or "").strip()
    if not target or target == queue:
        return ""
    if target not in known:
        names = ", ".join(known) or "(none)"
        raise ValueError(f"unknown queue {target!r} to replay into: pass one of {names}")
    return target


def move_dead(src: Queue, dst: Queue, job_id: str, task_id: str, actor: str,
              note: dict[str, Any]) -> bool:
    """Replay dead ``job_id`` of ``src`` into ``dst`` (see the module's docstring); False when
    it is not dead there (replayed or discarded meanwhile) or cannot be stored in ``dst``."""
    job = src.get(job_id)
    if job is None or job.state != states.DEAD or job.payload_error:
        return False
    slots = _slots(src.redis.hget(src.keys.job(job_id), "gconc")) if job.group else None
    spec = JobSpec(job.type, job.payload, job.idempotency_key, job.lock_key or None, 0.0,
                   job.max_attempts, job.timeout_s, job.visibility_timeout_ms / 1000,
                   job.max_deliveries, dict(job.headers), job.trace_id or None, job_id=job.id,
                   group=job.group or None, group_concurrency=slots,
                   group_rate=job.group_rate or None)
    now = dst.clock()
    try:
        names, values = dst.encode(spec, now)
    except ValueError:  # (InvalidJob) a record the other queue cannot take: left where it is
        return False
    names += ("rtask", "moved_from")
    values += [task_id, f"{src.name}/{job_id}"]
    ((_, outcome),) = dst.store([(names, values)], now)
    if outcome not in ("stored", "exists"):
        return False
    note = {**note, "moved_to": dst.name}
    if job.group:
        note.update(_group_note(src, job.group, slots, job.group_rate))
    return src.discard(job_id, actor, note)


def _slots(raw: Any) -> int | None:
    """A stored 'gconc' as ``group_concurrency`` takes it (None: the default, or unreadable)."""
    try:
        n = int(raw or 0)
    except (TypeError, ValueError):
        return None
    return n if 1 <= n <= MAX_GROUP_CONCURRENCY else None


def _group_note(src: Queue, group: str, slots: int | None, rate: str) -> dict[str, str]:
    """The timeline's words on a moved job's group: what followed it, and what stayed in
    ``src`` (the override of the group's slots, its pause), if any."""
    held = f"{slots or DEFAULT_GROUP_SLOTS} at a time" + (f", {rate}" if rate else "")
    out = {"group": f"{group} ({held})"}
    pipe = src.redis.pipeline(transaction=False)
    pipe.hexists(src.keys.group_limits, group)
    pipe.hexists(src.keys.paused, GROUP_TARGET + group)
    override, paused = pipe.execute()
    stayed = [what for what, there in (("its override of the group's slots", override),
                                      ("its pause of the group", paused)) if there]
    if stayed:
        out["not_moved"] = f"{' and '.join(stayed)} stayed in queue {src.name}"
    return out
