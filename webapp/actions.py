"""Every change the dashboard and the API can make, in one place: do it through the core, then
write the audit entry (ok, failed or refused) with before/after figures. The HTML views flash
``Result.message``; the API returns ``Result.to_json()``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from antre.control.abandoned import RESOLUTIONS, AbandonedRecords, ResolveError
from antre.control.bulk import TaskNotFound, TaskStateError
from antre.control.cancel import CancelError
from antre.errors import LeaseLost
from antre.limits.flow import FlowControl
from antre.control.pause import PauseError
from antre.control.pause import unknown_target as pause_target_unknown
from antre.control.purge import PurgeError, PurgeFilter
from antre.observe.finder import Finder
from antre.observe.readmodels import DeadFilter, PauseInfo
from antre.stores.users import UnknownUser, UserExists, WeakPassword

from . import services
from .security import Attempt, TooManyTries, audit, client_addr, current_user, start_session
from .security import throttled
from .services import REDIS_ERRORS, Services

MAX_EXTEND_S = 24 * 3600
MAX_BULK = 1_000_000
MAX_SELECTED = 500  # rows one selection may act on (a page holds at most 500)


@dataclass
class Result:
    ok: bool
    message: str
    status: int = 200
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message, **self.detail}


def _svc() -> Services:
    return services.get()


def _done(action: str, target: str, reason: str, result: Result) -> Result:
    outcome = "ok" if result.ok else ("refused" if result.status in (400, 403, 503) else "failed")
    audit(action, target, outcome, reason, {"message": result.message, **result.detail})
    return result


def guarded(action: str, target: str, reason: str, fn: Any) -> Result:
    """Run ``fn`` unless the audit log is unreachable; audit a Redis failure, then re-raise it
    so the page shows the outage."""
    svc = _svc()
    if svc.outages.since("database") is not None:
        return Result(False, "the database holding the audit log is unreachable: changes are "
                             "refused until it is back", 503)
    try:
        result: Result = fn()
    except REDIS_ERRORS as exc:
        audit(action, target, "failed", reason,
              {"message": f"Redis unreachable: {services.scrubbed(exc)}"})
        raise
    return _done(action, target, reason, result)


def _reason(reason: str | None) -> str:
    return (reason or "").strip()[:2000]


def _actor() -> str:
    """Who, on the job's timeline: the logged-in user."""
    user = current_user()
    return user.name if user else "(anonymous)"


def _note(reason: str | None) -> dict[str, Any] | None:
    return {"reason": _reason(reason)} if _reason(reason) else None


# -- one job ----------------------------------------------------------------------------------
def replay_one(queue: str, job_id: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        before = svc.reads.count_dead(queue)
        job = svc.reads.job(queue, job_id)
        warn = ""
        if job is not None and svc.idempotent(job.type) is False:
            warn = (f" Warning: handler '{job.type}' is marked not idempotent; its effects may "
                    "happen twice.")
        if not svc.antre.queue(queue).replay(job_id, _actor(), _note(reason)):
            return Result(False, f"job {job_id} is not in the dead-letter queue of {queue} "
                                 "(already replayed or discarded?); nothing was changed", 409,
                          {"dead_before": before})
        return Result(True, f"job {job_id} replayed: back in the ready list with its "
                            f"attempts reset and its idempotency key kept.{warn}", 200,
                      {"dead_before": before, "dead_after": svc.reads.count_dead(queue)})
    return guarded("dlq.replay", f"{queue}/{job_id}", _reason(reason), run)


def discard_one(queue: str, job_id: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        before = svc.reads.count_dead(queue)
        if not svc.antre.queue(queue).discard(job_id, _actor(), _note(reason)):
            return Result(False, f"job {job_id} is not in the dead-letter queue of {queue}; "
                                 "nothing was changed", 409, {"dead_before": before})
        return Result(True, f"job {job_id} discarded", 200,
                      {"dead_before": before, "dead_after": svc.reads.count_dead(queue)})
    return guarded("dlq.discard", f"{queue}/{job_id}", _reason(reason), run)


def run_now(queue: str, job_id: str, reason: str | None) -> Result:
    def run() -> Result:
        if not _svc().antre.queue(queue).run_now(job_id, _actor(), _note(reason)):
            return Result(False, f"job {job_id} is no longer scheduled (it already ran or "
                                 "moved); nothing was changed", 409)
        return Result(True, f"job {job_id} moved to the ready list")
    return guarded("scheduled.run_now", f"{queue}/{job_id}", _reason(reason), run)


# -- periodic schedules (antre/control/periodic.py) ----------------------------------------------------
def schedule_pause(name: str, paused: bool, reason: str | None) -> Result:
    """Pause (its ticks are skipped, not caught up later) or resume a schedule."""
    def run() -> Result:
        user = current_user()
        try:
            info = _svc().schedules.set_paused(name, paused, user.name if user else "")
        except KeyError as exc:
            return Result(False, str(exc.args[0]), 404)
        verb = "paused: its ticks are skipped until resumed" if paused else \
            "resumed: it runs from its next tick (paused ticks are not caught up)"
        return Result(True, f"schedule {name} {verb}", 200, {"paused": info.paused})
    action = "schedules.pause" if paused else "schedules.resume"
    return guarded(action, name, _reason(reason), run)


def schedule_run_now(name: str, reason: str | None) -> Result:
    def run() -> Result:
        try:
            job_id = _svc().schedules.run_now(name)
        except KeyError as exc:
            return Result(False, str(exc.args[0]), 404)
        return Result(True, f"schedule {name}: job {job_id} enqueued now (its ticks are "
                            "unchanged)", 200, {"job_id": job_id})
    return guarded("schedules.run_now", name, _reason(reason), run)


def extend(queue: str, job_id: str, epoch: int, seconds: int, reason: str | None) -> Result:
    def run() -> Result:
        if not 1 <= seconds <= MAX_EXTEND_S:
            return Result(False, f"seconds must be between 1 and {MAX_EXTEND_S}", 400)
        svc = _svc()
        before = svc.reads.job(queue, job_id)
        detail = {"epoch": epoch, "seconds": seconds,
                  "deadline_before": before.deadline if before else None}
        try:
            deadline = svc.antre.queue(queue).extend(job_id, epoch, seconds * 1000, mode="add",
                                                     actor=_actor(), note=_note(reason))
        except LeaseLost as exc:
            return Result(False, "the lease changed under you (job was re-delivered/finished); "
                                 f"nothing was changed. ({exc})", 409, detail)
        return Result(True, f"lease of job {job_id} extended by {seconds}s", 200,
                      {**detail, "deadline_after": deadline})
    return guarded("inflight.extend", f"{queue}/{job_id}", _reason(reason), run)


def reset_breaker(name: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        flow = FlowControl(svc.redis, svc.clock)
        known = {b.name: b for b in flow.breakers()}
        if name not in known:
            return Result(False, f"no circuit breaker named {name!r}", 404)
        state = known[name]
        before = state.state
        flow.breaker(name, state.failure_threshold, state.window_s, state.cooldown_s).reset()
        return Result(True, f"circuit breaker {name} closed by hand (was {before})", 200,
                      {"before": before, "after": "closed"})
    return guarded("flow.reset_breaker", name, _reason(reason), run)


def release_lock(key: str, token: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        if not token:
            return Result(False, "the holder token is required", 400)
        if not svc.locks.release_token(key, token):
            return Result(False, f"lock {key!r} is no longer held by that token (released, "
                                 "expired or re-taken since); nothing was changed", 409)
        return Result(True, f"lock {key!r} released", 200, {"token": token})
    return guarded("locks.release", key, _reason(reason), run)


def resolve_abandoned(key: str, to: str, reason: str | None) -> Result:
    """Mark an abandoned idempotency record failed, or reset it (``antre.control.abandoned``);
    SQL only: a Redis outage does not stop it."""
    def run() -> Result:
        svc = _svc()
        finder = Finder(svc.redis, svc.clock, svc.idempotency)
        try:
            was = AbandonedRecords(finder, svc.idempotency).resolve(key, to, by=_actor(),
                                                                    reason=_reason(reason))
        except ResolveError as exc:
            return Result(False, str(exc), 409 if to in RESOLUTIONS else 400)
        done = "marked failed" if to == "failed" else "reset: a resend runs afresh"
        return Result(True, f"abandoned idempotency record {key!r} {done}", 200,
                      {"to": to, "job_id": was.job_id, "fence": was.fence,
                       "abandoned_since_ms": was.since_ms})
    return guarded("idempotency.resolve", key, _reason(reason), run)


# -- selected rows ----------------------------------------------------------------------------
def each_selected(verb: str, ids: list[str], one: Callable[[str], Result]) -> Result:
    """``one`` per selected job (each writes its own audit entry), summed up in one result:
    ``"3 jobs replayed"``, with what went wrong for the others."""
    results = [(job_id, one(job_id)) for job_id in ids]
    done = [job_id for job_id, r in results if r.ok]
    problems = [r.message for _, r in results if not r.ok]
    message = f"{_jobs(len(done))} {verb}"
    if problems:
        message += f"; {_jobs(len(problems))} not"
    status = 200 if not problems else max(r.status for _, r in results if not r.ok)
    return Result(not problems, message, status, {"done": done, "problems": problems})


def _jobs(n: int) -> str:
    return "1 job" if n == 1 else f"{n} jobs"


# -- filtered sets ----------------------------------------------------------------------------
def bulk_start(queue: str, flt: DeadFilter, rate: float, maximum: int,
               reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        user = current_user()
        try:
            task = svc.bulk.start(queue, flt, rate, min(maximum, MAX_BULK),
                                  user.name if user else "?", _reason(reason))
        except ValueError as exc:
            return Result(False, str(exc), 400)
        warn = _not_idempotent_warning(flt)
        return Result(True, f"bulk replay {task.id} started: {task.total} jobs match "
                            f"({flt.describe()}), at most {task.maximum} at "
                            f"{task.rate_per_s:g} jobs/s.{warn}", 200,
                      {"task": task.to_dict(), "filter": flt.describe(), "dry_run": task.total,
                       "dead_before": svc.reads.count_dead(queue)})
    return guarded("dlq.bulk_replay.start", f"{queue} [{flt.describe()}]", _reason(reason), run)


def _not_idempotent_warning(flt: DeadFilter) -> str:
    svc = _svc()
    bad = [name for name, spec in svc.antre.handlers.items()
           if not spec.idempotent and (flt.job_type in (None, name))]
    if not bad:
        return ""
    return (" Warning: not idempotent handlers in this set may repeat effects: "
            + ", ".join(sorted(bad)) + ".")


def bulk_change(queue: str, task_id: str, op: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        fn = {"pause": svc.bulk.pause, "resume": svc.bulk.resume, "cancel": svc.bulk.cancel}[op]
        try:
            task = fn(queue, task_id)
        except TaskNotFound:
            return Result(False, f"no bulk replay {task_id} in {queue}", 409)
        except TaskStateError as exc:
            return Result(False, str(exc), 409)
        return Result(True, f"bulk {task.kind} {task_id}: {task.state} (done "
                            f"{task.replayed}, skipped {task.skipped})", 200,
                      {"task": task.to_dict()})
    return guarded(f"dlq.bulk_replay.{op}", f"{queue}/{task_id}", _reason(reason), run)


def confirmed(typed: str, count: int, word: str) -> bool:
    typed = (typed or "").strip()
    return typed == str(count) or typed.lower() == word


def discard_filtered(queue: str, flt: DeadFilter, maximum: int, confirm: str,
                     reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        count = svc.bulk.dry_run(queue, flt)
        if not confirmed(confirm, count, "discard"):
            return Result(False, f"not confirmed: type {count} (the number of matching jobs) "
                                 "or the word 'discard'; nothing was changed", 400,
                          {"dry_run": count})
        out = svc.bulk.discard_filtered(queue, flt, max(0, min(maximum, MAX_BULK)), _actor())
        return Result(True, f"discarded {out.done} dead jobs ({flt.describe()})", 200,
                      {"dry_run": count, "filter": flt.describe(), **out.to_dict()})
    return guarded("dlq.discard_filtered", f"{queue} [{flt.describe()}]", _reason(reason), run)


def replay_filtered_now(queue: str, flt: DeadFilter, maximum: int, reason: str | None) -> Result:
    def run() -> Result:
        out = _svc().bulk.replay_filtered_now(queue, flt, max(0, min(maximum, MAX_BULK)),
                                              _actor())
        return Result(True, f"replayed {out.done} dead jobs ({flt.describe()})"
                            + _not_idempotent_warning(flt), 200,
                      {"filter": flt.describe(), **out.to_dict()})
    return guarded("dlq.replay_filtered_now", f"{queue} [{flt.describe()}]", _reason(reason),
                   run)


# -- users ------------------------------------------------------------------------------------
def user_add(name: str, role: str, password: str, reason: str | None) -> Result:
    def run() -> Result:
        try:
            info = _svc().users.add(name, role, password)
        except (UserExists, ValueError) as exc:
            return Result(False, str(exc), 400)
        return Result(True, f"user {info.name} added as {info.role}", 200, {"role": info.role})
    return guarded("users.add", name, _reason(reason), run)


def user_set_role(name: str, role: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        me = current_user()
        if me and me.name == name and role != "admin":
            return Result(False, "you cannot take the admin role from yourself", 400)
        before = svc.users.get(name)
        try:
            svc.users.set_role(name, role)
        except (UnknownUser, ValueError) as exc:
            return Result(False, str(exc).strip("'\""), 400)
        if me is not None and me.name == name and me.via == "session":
            start_session(svc.users.get(name))  # the change ends sessions; not this one
        return Result(True, f"user {name} is now {role}", 200,
                      {"role_before": before.role if before else None, "role_after": role})
    return guarded("users.set_role", name, _reason(reason), run)


def user_set_disabled(name: str, disabled: bool, reason: str | None) -> Result:
    """A disabled user cannot log in (browser or HTTP Basic) and their open sessions end on
    their next request; enabling gives the same account back."""
    action = "users.disable" if disabled else "users.enable"

    def run() -> Result:
        me = current_user()
        if me and me.name == name and disabled:
            return Result(False, "you cannot disable yourself", 400)
        try:
            _svc().users.set_disabled(name, disabled)
        except UnknownUser:
            return Result(False, f"no user {name}", 400)
        return Result(True, f"user {name} {'disabled' if disabled else 'enabled'}")
    return guarded(action, name, _reason(reason), run)


def user_delete(name: str, reason: str | None) -> Result:
    def run() -> Result:
        me = current_user()
        if me and me.name == name:
            return Result(False, "you cannot delete yourself", 400)
        if not _svc().users.delete(name):
            return Result(False, f"no user {name}", 400)
        return Result(True, f"user {name} deleted")
    return guarded("users.delete", name, _reason(reason), run)


def password_change(current: str, new: str) -> Result:
    """The logged-in user changes their own password (the current one is asked again). Their
    other sessions end; this one carries on, signed with the new session generation."""
    me = current_user()
    assert me is not None  # @requires

    def run() -> Result:
        svc = _svc()
        try:  # limited like logins: guessing it here is guessing the password
            right = throttled(Attempt.of(me.name, client_addr()),
                              lambda: svc.users.password_is(me.name, current))
        except TooManyTries as exc:
            return Result(False, f"{exc}; nothing was changed", 429)
        if not right:
            return Result(False, "the current password is wrong; nothing was changed", 403)
        try:
            svc.users.set_password(me.name, new)
        except WeakPassword as exc:
            return Result(False, f"{exc}; nothing was changed", 400)
        if me.via == "session":
            start_session(svc.users.get(me.name))
        return Result(True, "password changed; your other sessions are logged out")
    return guarded("users.password.change", me.name, "", run)


def password_reset(name: str, password: str, reason: str | None) -> Result:
    """An admin sets another user's password; that user's open sessions end. Their own takes
    the current one (``password_change``): a stolen session must not be enough to take the
    account over."""
    def run() -> Result:
        me = current_user()
        if me is not None and me.name == name:
            return Result(False, "to change your own password, give the current one: use your "
                                 "account page (/account) or POST /api/account/password; "
                                 "nothing was changed", 403)
        try:
            _svc().users.set_password(name, password)
        except WeakPassword as exc:
            return Result(False, f"{exc}; nothing was changed", 400)
        except UnknownUser:
            return Result(False, f"no user {name}", 400)
        return Result(True, f"password of {name} reset; their open sessions are logged out")
    return guarded("users.password.reset", name, _reason(reason), run)


def user_end_sessions(name: str, reason: str | None) -> Result:
    """Log a user out everywhere: every session signed before now ends."""
    def run() -> Result:
        try:
            _svc().users.end_sessions(name)
        except UnknownUser:
            return Result(False, f"no user {name}", 400)
        return Result(True, f"every session of {name} is logged out")
    return guarded("users.logout_everywhere", name, _reason(reason), run)


# -- incident controls: pause / resume, delete, purge -----------------------------------------
def unknown_target(queue: str, job_type: str | None) -> Result | None:
    """A 400 naming what exists when ``queue`` (or ``job_type`` in it) is not known."""
    svc = _svc()
    message = pause_target_unknown(svc.redis, queue, job_type,
                                   {n: s.queue for n, s in svc.antre.handlers.items()},
                                   svc.antre.queues())
    return None if message is None else Result(False, message, 400)


def pause(queue: str, job_type: str | None, reason: str | None) -> Result:
    def run() -> Result:
        bad = unknown_target(queue, job_type)
        if bad is not None:
            return bad
        try:
            info = _svc().pauses.pause(queue, job_type, _actor(), _reason(reason))
        except PauseError as exc:
            return Result(False, f"{exc}; nothing was changed", 409 if "already" in str(exc)
                          else 400)
        return Result(True, f"{info.target} paused: workers reserve none of its jobs until it "
                            "is resumed (jobs in flight finish)", 200,
                      {"paused": _plain_pause(info)})
    return guarded("queue.pause", _target(queue, job_type), _reason(reason), run)


def resume(queue: str, job_type: str | None, reason: str | None) -> Result:
    def run() -> Result:
        bad = unknown_target(queue, job_type)
        if bad is not None:
            return bad
        svc = _svc()
        before = svc.pauses.get(queue, job_type)
        try:
            moved = svc.pauses.resume(queue, job_type)
        except PauseError as exc:
            return Result(False, f"{exc}; nothing was changed", 409)
        return Result(True, f"{_target(queue, job_type)} resumed ({moved} parked jobs back "
                            "in the ready list)", 200,
                      {"unparked": moved, "was": _plain_pause(before) if before else None})
    return guarded("queue.resume", _target(queue, job_type), _reason(reason), run)


def _target(queue: str, job_type: str | None) -> str:
    return queue if job_type is None else f"{queue}/{job_type}"


def _plain_pause(info: PauseInfo) -> dict[str, Any]:
    return {"queue": info.queue, "job_type": info.job_type, "by": info.by, "at_ms": info.at_ms,
            "reason": info.reason}


def delete_job(queue: str, job_id: str, reason: str | None) -> Result:
    def run() -> Result:
        try:
            where = _svc().purger.delete(queue, job_id)
        except PurgeError as exc:
            return Result(False, str(exc), 409)
        return Result(True, f"job {job_id} deleted from {where}", 200, {"was": where})
    return guarded("job.delete", f"{queue}/{job_id}", _reason(reason), run)


def purge_start(queue: str, flt: PurgeFilter, rate: float, maximum: int, confirm: str,
                reason: str | None) -> Result:
    """A paced purge of the filtered set, once ``confirm`` is the dry-run count or 'purge'."""
    def run() -> Result:
        svc = _svc()
        try:
            flt.check()
        except PurgeError as exc:
            return Result(False, str(exc), 400)
        bad = unknown_target(queue, None)
        if bad is not None:
            return bad
        count = svc.purger.count(queue, flt)
        if count == 0:
            return Result(False, f"no job matches ({flt.describe()}); nothing was changed", 400,
                          {"dry_run": 0, "filter": flt.describe()})
        if not confirmed(confirm, count, "purge"):
            return Result(False, f"not confirmed: type {count} (the number of matching jobs) "
                                 "or the word 'purge'; nothing was changed", 400,
                          {"dry_run": count, "filter": flt.describe()})
        try:
            task = svc.bulk.start_purge(queue, flt, rate, min(maximum, MAX_BULK), _actor(),
                                        _reason(reason))
        except ValueError as exc:
            return Result(False, str(exc), 400)
        return Result(True, f"purge {task.id} started: {count} jobs match ({flt.describe()}), "
                            f"at most {task.maximum} at {task.rate_per_s:g} jobs/s", 200,
                      {"task": task.to_dict(), "filter": flt.to_dict(), "dry_run": count})
    return guarded("purge.start", f"{queue} [{flt.describe()}]", _reason(reason), run)


def purge_change(queue: str, task_id: str, op: str, reason: str | None) -> Result:
    def run() -> Result:
        svc = _svc()
        task = svc.bulk.get(queue, task_id)
        if task is None or task.kind != "purge":
            return Result(False, f"no purge {task_id} in {queue}", 409)
        fn = {"pause": svc.bulk.pause, "resume": svc.bulk.resume, "cancel": svc.bulk.cancel}[op]
        try:
            task = fn(queue, task_id)
        except TaskStateError as exc:
            return Result(False, str(exc), 409)
        return Result(True, f"purge {task_id}: {task.state} ({task.replayed} removed)", 200,
                      {"task": task.to_dict()})
    return guarded(f"purge.{op}", f"{queue}/{task_id}", _reason(reason), run)


def cancel_job(queue: str, job_id: str, to: str, reason: str | None) -> Result:
    """Ask the worker running ``job_id`` to stop it; it ends in the DLQ or is discarded."""
    def run() -> Result:
        svc = _svc()
        try:
            req = svc.cancels.request(queue, job_id, _actor(), to, _reason(reason))
        except CancelError as exc:
            return Result(False, str(exc), 409 if "not running" in str(exc) else 400)
        where = "the dead-letter queue" if req.to == "dlq" else "discarded"
        return Result(True, f"cancel of job {job_id} requested: its worker stops it within "
                            f"the handler's grace period, then it is {where}", 200,
                      {"to": req.to})
    return guarded("job.cancel", f"{queue}/{job_id}", _reason(reason), run)
