"""Loads the Lua scripts shipped in ``antre/engine/lua`` (one file per atomic transition).

``_lib.lua`` holds helpers shared by several scripts. On a server with Redis Functions (Redis 7
and later) every script is a function of one library whose top level is ``_lib.lua``
(``library()``, loaded once per server; each transition is one ``FCALL``); elsewhere the
helpers a script uses are prepended to it and each transition is one self-contained EVALSHA.

Spans: while ``SPANS`` (set by ``antre.observe.tracing``, a higher room, when OpenTelemetry is
installed) says spans are recorded, every round trip of scripts (a script's call, a ``Batch``, a
``direct`` / ``Pinned`` write) is one CLIENT span naming its scripts (bounded attributes: the
script names and the number of calls; never keys, arguments or payloads). Otherwise the only
cost is one question per round trip.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from itertools import chain
from importlib import resources
from typing import Any, cast, overload

import redis
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import (ConnectionError, InvalidResponse, NoScriptError, ResponseError,
                              TimeoutError)

import antre.settings as settings
from antre.engine import keys, states
from antre.engine.envelope import PLAIN_FIELDS, RESERVE_FIELDS

_hiredis_pack: Any
_HiredisReader: Any
try:
    from hiredis import Reader as _HiredisReader
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - without hiredis, redis-py packs and reads
    _hiredis_pack = _HiredisReader = None



class ScriptSpans:
    """What ``SPANS`` holds: whether spans are recorded now, and the span of one round trip."""

    def recording(self) -> bool:
        return False

    def span(self, names: Sequence[str], calls: int) -> Any:
        raise NotImplementedError


SPANS: ScriptSpans | None = None  # set by antre.observe.tracing
MAX_SPAN_NAMES = 8


def _spans() -> ScriptSpans | None:
    spans = SPANS
    return spans if spans is not None and spans.recording() else None


def _names(scripts: Iterable[Any]) -> list[str]:
    """The distinct script names of a round trip (``command`` for a plain command), bounded."""
    out: list[str] = []
    for script in scripts:
        name = getattr(script, "antre_name", "script") if script is not None else "command"
        if name not in out:
            out.append(name)
            if len(out) == MAX_SPAN_NAMES:
                break
    return out


log = logging.getLogger("antre.scripts")


class Library:
    """How the scripts of one ``Scripts`` are called: as ``FCALL`` of the functions of
    ``library()`` (loaded once per server), or as ``EVALSHA`` of each script's source (a
    server without Redis Functions, before Redis 7; a user whose ACL refuses them; a Redis
    Cluster, where redis-py would ask ``COMMAND GETKEYS`` before each ``FCALL``; or
    ``ANTRE_REDIS_FUNCTIONS=0``). A refusal that says the server cannot take the library
    (unknown command, no permission, a Lua it refuses) turns this client to ``EVALSHA`` for
    good, with one warning; a server that lost the library (a restart, ``FUNCTION FLUSH``)
    gets it again, as a script cache gets a script again after ``NOSCRIPT``."""

    def __init__(self, client: Any) -> None:
        self.name, self.code = library()
        self.functions = (settings.REDIS_FUNCTIONS.get()
                          and not isinstance(client, RedisCluster))

    def load(self, client: Any, script: Script, why: Any = None) -> None:
        """After ``script``'s call was refused (``why``): load what the next call needs."""
        if self._library_next(why):
            try:
                client.function_load(self.code, replace=True)
                return
            except ResponseError as exc:
                self._load_refused(exc)
        script.sha = client.script_load(script.script)

    async def aload(self, client: Any, script: Script, why: Any = None) -> None:
        """``load`` on a ``redis.asyncio`` client."""
        if self._library_next(why):
            try:
                await client.function_load(self.code, replace=True)
                return
            except ResponseError as exc:
                self._load_refused(exc)
        script.sha = await client.script_load(script.script)

    def _library_next(self, why: Any) -> bool:
        """Whether the library is what to load after the refusal ``why`` (else the script, for
        EVALSHA): not when FCALL itself was refused (an unknown command, no permission)."""
        if self.functions and _command_refused(why):
            self._fall_back(why)
        return self.functions

    def _load_refused(self, exc: ResponseError) -> None:
        """``FUNCTION LOAD`` was refused: raised when the server is busy or failing over, else
        this client turns to EVALSHA."""
        if _transient(exc):
            raise exc
        self._fall_back(exc)

    def _fall_back(self, why: Any) -> None:
        self.functions = False
        log.warning("Redis Functions are not usable on this server (%s): Antre's scripts go "
                    "as EVALSHA (a few µs more of Redis CPU per call; set %s=0 to say so)",
                    why, FUNCTIONS_ENV)


# error replies of a server that is busy or failing over: raised, not a reason to give up
# Redis Functions
_TRANSIENT = ("OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
              "NOREPLICAS", "MOVED", "ASK")


def _transient(exc: BaseException) -> bool:
    return str(exc).startswith(_TRANSIENT)


def _command_refused(reply: Any) -> bool:
    """``reply`` refuses FCALL itself (a server before Redis 7, an ACL without it)."""
    if not isinstance(reply, ResponseError):
        return False
    text = str(reply).lower()
    return "fcall" in text and ("unknown command" in text or "no permissions" in text)


def refused(reply: Any) -> bool:
    """``reply`` is a script call the server refused without running it: NOSCRIPT, the
    library not loaded, FCALL not known or not permitted."""
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError)
        and (str(reply).startswith("Function not found") or _command_refused(reply)))


class NamedScript(Script):
    """A registered script that knows its name (for its span) and how it is called
    (``Library``: its function ``<library>_<name>``, or EVALSHA)."""

    def __init__(self, client: "redis.Redis", name: str, lib: "Library | None" = None) -> None:
        super().__init__(client, source(name))
        self.antre_name = name
        self.lib = lib if lib is not None else Library(client)
        self.function = f"{self.lib.name}_{name}"

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        if self.lib.functions:
            return ("FCALL", self.function, len(keys), *keys, *args)
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        spans = _spans()
        if spans is None:
            return self._call(keys, args, client)
        with spans.span([self.antre_name], 1):
            return self._call(keys, args, client)

    def _call(self, keys: Any, args: Any, client: Any) -> Any:
        keys, args = list(keys or ()), list(args or ())
        client = self.registered_client if client is None else client
        try:
            return client.execute_command(*self.command(keys, args))
        except ResponseError as exc:
            if not refused(exc):
                raise
            self.load(client, exc)
        return client.execute_command(*self.command(keys, args))

    def load(self, client: Any, why: Any = None) -> None:
        self.lib.load(client, self, why)


_LIB_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)", re.M)


def _lib_parts(lib: str) -> tuple[str, list[tuple[str, str]]]:
    """``_lib.lua`` as its header and its top-level definitions: (name, text) in order, each
    running up to the next one."""
    found = [(m.start(), m.group(1)) for m in _LIB_DEFINITION.finditer(lib)]
    ends = [start for start, _ in found[1:]] + [len(lib)]
    return lib[:found[0][0]], [(name, lib[start:end]) for (start, name), end in zip(found, ends)]


@lru_cache(maxsize=None)
def source(name: str) -> str:
    """The script ``name`` with the definitions of ``_lib.lua`` it uses (directly or through
    another one), in the library's order: Redis runs the whole source on every call, and each
    ``local function`` is a closure made each time (~0.15 µs apiece)."""
    files = resources.files("antre.engine.lua")
    header, parts, refs = _lib()
    body = files.joinpath(f"{name}.lua").read_text()
    used: set[str] = set()
    todo = [w for w in set(_WORD.findall(body)) if w in refs]
    while todo:  # the definitions the body names, then those they name, ...
        part_name = todo.pop()
        if part_name not in used:
            used.add(part_name)
            todo.extend(refs[part_name] - used)
    return header + "".join(part for n, part in parts if n in used) + "\n" + body


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a line '-- #include _<name>.lua' of _lib.lua stands for that file's text (a section kept in a
# file of its own, in its place in the library's order)
_INCLUDE = re.compile(r"^-- #include (_[a-z_]+\.lua)$", re.M)


@lru_cache(maxsize=None)
def _lib() -> tuple[str, list[tuple[str, str]], dict[str, set[str]]]:
    """``_lib.lua``'s header, its definitions (those of the files it includes in their
    place), and for each the other definitions it names (read once per process: one pass over
    the text instead of a search per definition)."""
    files = resources.files("antre.engine.lua")
    text = _INCLUDE.sub(lambda m: files.joinpath(m.group(1)).read_text(),
                        files.joinpath("_lib.lua").read_text())
    # reserve's fields, as the client reads them (envelope.from_row): one list for both sides
    text = text.replace("--[[RESERVE_FIELDS]]", ", ".join(f"'{n}'" for n in RESERVE_FIELDS))
    text = text.replace("--[[PLAIN_FIELDS]]", ", ".join(f"'{n}'" for n in PLAIN_FIELDS))
    text = text.replace("--[[KEYS]]", _lua_table(keys.lua_keys()))
    text = text.replace("--[[RECORDS]]", ", ".join(
        f"{r.name} = {{name = '{r.name}', type = '{r.redis_type}', fields = "
        f"{{{', '.join(repr(f) for f in r.fields)}}}}}" for r in keys.RECORDS))
    tables = states.lua_tables()
    text = text.replace("--[[JOB_STATES]]", _lua_table(tables["S"]))
    text = text.replace("--[[FLOW_STATES]]", _lua_table(tables["FS"]))
    header, parts = _lib_parts(text)
    names = {n for n, _ in parts}
    refs = {n: (set(_WORD.findall(text)) & names) - {n} for n, text in parts}
    return header, parts, refs


def _lua_table(names: dict[str, str]) -> str:
    """The fields of a Lua table of names (``ready = 'ready', turns = 'kturn'``)."""
    return ", ".join(f"{name} = '{value}'" for name, value in names.items())


FUNCTIONS_ENV = settings.REDIS_FUNCTIONS.name  # off: every script goes as EVALSHA (as before Functions)


@lru_cache(maxsize=None)
def library() -> tuple[str, str]:
    """The Redis Functions library of every script: ``(name, code)``.

    ``_lib.lua`` (whole) is the library's top level, made once when the library is loaded
    (``FUNCTION LOAD``); each script is a function ``<name>_<script>`` whose body is the
    script's file, with ``KEYS`` and ``ARGV`` its parameters. A call (``FCALL``) runs only the
    script's own body: with ``EVALSHA`` Redis runs the whole source on each call, remaking the
    ~60 helper closures it includes (~100k instructions a call before its first line,
    bench/results/cost.md). The name carries a digest of the code, so two versions of Antre on one
    server each call their own library (``FUNCTION LOAD REPLACE`` of the same name is the same
    code)."""
    files = resources.files("antre.engine.lua")
    header, parts, _ = _lib()
    top = header + "".join(part for _, part in parts)
    bodies = [(n, files.joinpath(f"{n}.lua").read_text()) for n in NAMES]
    digest = hashlib.sha1("\0".join([top] + [b for _, b in bodies]).encode()).hexdigest()
    name = f"antre_{digest[:16]}"
    out = [f"#!lua name={name}\n", top, "\n"]
    for script, body in bodies:
        # allow-cross-slot-keys: what a script without flags may do (EVALSHA), kept as it was
        # guard_reset: the records a call found sound are looked at again in the next one
        out.append(f"redis.register_function{{function_name='{name}_{script}', "
                   f"flags={{'allow-cross-slot-keys'}}, callback=function(KEYS, ARGV)\n"
                   f"guard_reset()\n{body}\nend}}\n")
    return name, "".join(out)


class Lua:
    """One script of ``antre/engine/lua/``, declared as an attribute of ``Scripts`` with its
    file beside it (``reserve = Lua("reserve.lua")``: "go to definition" on
    ``scripts.reserve`` lands on the line naming the file). An instance of ``Scripts`` holds the
    registered script (a ``NamedScript``) under the same name; ``NAMES`` is made from these
    declarations, in their order (``tests/engine/test_functions.py``: names, files and
    attributes agree)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.name = file.removesuffix(".lua")

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"Scripts.{name} declares {self.file}: the name is the file's")

    @overload
    def __get__(self, obj: None, owner: type) -> Lua: ...

    @overload
    def __get__(self, obj: object, owner: type) -> NamedScript: ...

    def __get__(self, obj: object, owner: type) -> Lua | NamedScript:
        if obj is None:
            return self
        raise AttributeError(self.name)  # not reached: Scripts() sets each on the instance

    def source(self) -> str:
        """The file's text."""
        return resources.files("antre.engine.lua").joinpath(self.file).read_text()


class Scripts:
    """The registered scripts of one Redis client (redis-py re-loads them after NOSCRIPT),
    and the client's per-thread connections for the producer's hot path (``pinned``; None on
    clients ``Pinned`` does not serve). Each script is declared once, below, by its file."""

    def __init__(self, client: "redis.Redis") -> None:
        self.library = Library(client)
        for name in NAMES:  # on the instance, read from there without the descriptor
            setattr(self, name, NamedScript(client, name, self.library))
        self.pinned = Pinned.of(client)

    pinned: "Pinned | None"

    enqueue = Lua("enqueue.lua")
    enqueue_one = Lua("enqueue_one.lua")
    reserve = Lua("reserve.lua")
    ack = Lua("ack.lua")
    ack_many = Lua("ack_many.lua")
    retry = Lua("retry.lua")
    bury = Lua("bury.lua")
    fail_many = Lua("fail_many.lua")
    extend_lease = Lua("extend_lease.lua")
    promote_due = Lua("promote_due.lua")
    sweep_expired = Lua("sweep_expired.lua")
    replay = Lua("replay.lua")
    replay_edited = Lua("replay_edited.lua")
    discard = Lua("discard.lua")
    run_now = Lua("run_now.lua")
    lock_acquire = Lua("lock_acquire.lua")
    lock_release = Lua("lock_release.lua")
    lock_renew = Lua("lock_renew.lua")
    lock_fence_raise = Lua("lock_fence_raise.lua")
    lock_conflict = Lua("lock_conflict.lua")
    lock_contention = Lua("lock_contention.lua")
    checkpoint = Lua("checkpoint.lua")

    # encrypted payloads re-sealed under the newest key version (antre/control/rekey.py)
    reseal = Lua("reseal.lua")

    # a locked job's ack with its key's hand-over to the next head (Queue.handover)
    handover = Lua("handover.lua")

    # a queue's published partition count, only ever grown (antre/engine/partitions.py)
    partitions_grow = Lua("partitions_grow.lua")

    # flow control (antre/limits/admission.py)
    sem_acquire = Lua("sem_acquire.lua")
    sem_release = Lua("sem_release.lua")
    rate_take = Lua("rate_take.lua")
    breaker_allow = Lua("breaker_allow.lua")
    breaker_success = Lua("breaker_success.lua")
    breaker_failure = Lua("breaker_failure.lua")
    breaker_release = Lua("breaker_release.lua")

    # login throttling (antre/stores/logins.py)
    failure_add = Lua("failure_add.lua")
    login_try = Lua("login_try.lua")

    # incident controls (antre/control/pause.py, antre/control/purge.py)
    pause_set = Lua("pause_set.lua")
    unpark = Lua("unpark.lua")
    purge = Lua("purge.lua")
    cancel_request = Lua("cancel_request.lua")
    cancel_finish = Lua("cancel_finish.lua")

    # retention (antre/maintenance/retention.py)
    retention = Lua("retention.lua")

    # records too broken to be dead jobs
    quarantine = Lua("quarantine.lua")

    # live control of fair-share groups (antre/groups/control.py)
    group_limit = Lua("group_limit.lua")

    # flow limits held at reserve, and their overrides (antre/limits/gates.py)
    gates_declare = Lua("gates_declare.lua")
    gates_override = Lua("gates_override.lua")

    # producers waiting for a result, handlers' progress (antre/observe/waiting.py)
    result_wait = Lua("result_wait.lua")
    progress = Lua("progress.lua")

    # flows: chains, groups, chords, batches (antre/flows/)
    enqueue_flow = Lua("enqueue_flow.lua")
    flow_inputs = Lua("flow_inputs.lua")
    flow_close = Lua("flow_close.lua")
    flow_cancel = Lua("flow_cancel.lua")


# every script's name, in the order declared (the order of the library's functions)
NAMES: tuple[str, ...] = tuple(name for name, value in vars(Scripts).items()
                               if isinstance(value, Lua))


class Batch:
    """Commands and scripts sent to Redis in one round trip (a non-transactional pipeline).

    redis-py's own pipelines ask ``SCRIPT EXISTS`` before every execution that holds a script,
    one more round trip each time; a batch sends ``EVALSHA`` straight away instead. If a script
    is missing (the server restarted or its script cache was flushed) its calls come back
    ``NOSCRIPT`` without having run: the batch loads the script and sends only those calls
    again. On a Redis Cluster (where redis-py refuses ``EVALSHA`` in pipelines) every call is
    sent on its own. ``execute()`` returns the replies in order and raises the first error.
    """

    def __init__(self, client: "redis.Redis") -> None:
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self._calls: list[tuple[Script | None, str, tuple[Any, ...], dict[str, Any]]] = []

    def script(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> "Batch":
        self._calls.append((script, "", (list(keys), list(args)), {}))
        return self

    def command(self, name: str, *args: Any, **kwargs: Any) -> "Batch":
        """A redis-py command by its method name: ``batch.command("zadd", key, {m: s})``."""
        self._calls.append((None, name, args, kwargs))
        return self

    def __len__(self) -> int:
        return len(self._calls)

    def execute(self) -> list[Any]:
        calls, self._calls = self._calls, []
        spans = _spans()
        if spans is None:
            return self._execute(calls)
        with spans.span(_names(c[0] for c in calls), len(calls)):
            return self._execute(calls)

    def _execute(self, calls: list[tuple[Script | None, str, tuple[Any, ...], dict[str, Any]]]
                 ) -> list[Any]:
        if self.cluster:
            return [script(keys=a[0], args=a[1]) if script is not None
                    else getattr(self.client, name)(*a, **kw) for script, name, a, kw in calls]
        rounds = Resend([call[0] for call in calls])
        while rounds.pending:
            pipe = self.client.pipeline(transaction=False)
            for i in rounds.pending:
                script, name, a, kw = calls[i]
                if script is not None:
                    getattr(pipe, "execute_command")(*script_command(script, a[0], a[1]))
                else:
                    getattr(pipe, name)(*a, **kw)
            for script in rounds.take(pipe.execute(raise_on_error=False)):
                load(self.client, script, rounds.why[id(script)])
        return rounds.replies_or_raise()


class Resend:
    """The rounds of one pipelined send of calls (``Batch.execute``, ``aio.send``): the calls
    still to send (``pending``: all, then those a server without their script refused with
    NOSCRIPT in the first round, which ran nothing), their replies in order. ``take`` stores a
    round's replies and returns the scripts to load before the next round (one each); a second
    round is the last."""

    def __init__(self, scripts: Sequence["Script | None"]) -> None:
        self.scripts = scripts  # each call's script (None: a plain command)
        self.replies: list[Any] = [None] * len(scripts)
        self.pending = list(range(len(scripts)))
        self.first = True
        self.why: dict[int, Any] = {}  # id(script) -> the refusal that asks to load it

    def take(self, out: Sequence[Any]) -> list["Script"]:
        """Store the replies of ``pending``; returns the scripts to load, unique (each one's
        refusal in ``why``)."""
        missing = []
        for i, reply in zip(self.pending, out):
            if self.first and refused(reply):
                missing.append(i)
                self.why.setdefault(id(self.scripts[i]), reply)
        again = set(missing)
        for i, reply in zip(self.pending, out):
            if i not in again:
                self.replies[i] = reply
        self.pending, self.first = missing, False
        found = {id(s): s for s in (self.scripts[i] for i in missing) if s is not None}
        return list(found.values())

    def replies_or_raise(self) -> list[Any]:
        """The replies in order; the first error reply raised."""
        for reply in self.replies:
            if isinstance(reply, Exception):
                raise reply
        return self.replies


# one call of ``direct``: (script, keys, args), or (None, a raw command's words, ())
Call = tuple["Script | None", Sequence[Any], Sequence[Any]]


def direct_ok(client: "redis.Redis") -> bool:
    """Whether ``direct`` may be used: not on a cluster or a single-connection client."""
    return not isinstance(client, RedisCluster) and client.connection is None


def direct(client: "redis.Redis", calls: Sequence[Call], raw: bool = False) -> list[Any]:
    """Scripts and raw commands written to one pooled connection at once (one round trip);
    returns the replies in order and raises the first error once all are read. The hot paths'
    way (a single enqueue; a wait for work with the reserve behind it): a third of a redis-py
    pipeline's client time (no pipeline object, no per-command bookkeeping). The connection's
    retry policy applies as it does to any command. ``NOSCRIPT``: the script is loaded and only
    the script calls are sent again (a blocking pop before them is not repeated). Callers
    check ``direct_ok`` first. ``raw``: the replies are read undecoded (bytes), whatever the
    client decodes (a reply holding bytes that are not UTF-8 must not fail as a whole)."""
    spans = _spans()
    if spans is not None:
        with spans.span(_names(c[0] for c in calls), len(calls)):
            return _pooled(client, calls, raw)
    return _pooled(client, calls, raw)


def _pooled(client: "redis.Redis", calls: Sequence[Call], raw: bool) -> list[Any]:
    pool = client.connection_pool
    conn: Any = pool.get_connection()
    try:
        return cast(list[Any], conn.retry.call_with_retry(
            lambda: _direct(client, conn, calls, raw=raw), lambda error: conn.disconnect()))
    finally:
        pool.release(conn)


_forks = [0]  # how many times this process is a fork child (checked instead of getpid())
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


class _Held:
    """One connection checked out of a pool by one thread of one process; back to the pool
    when the thread ends (its ``threading.local`` slot is dropped) or the ``Pinned`` goes."""

    __slots__ = ("pool", "pid", "forks", "conn", "io", "__weakref__")

    def __init__(self, pool: Any) -> None:
        self.pool, self.pid, self.forks = pool, os.getpid(), _forks[0]
        self.conn = pool.get_connection()
        self.io: _SocketIO | None = None  # for the connection's current socket, if direct

    def __del__(self) -> None:
        # in a forked child the connection is the parent's: redis-py's pool makes new ones
        # there, and this one is only dropped (never shut down: the parent still uses it)
        if self.pid == os.getpid():
            try:
                self.pool.release(self.conn)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


def _utf8(name: str) -> bool:
    try:
        return codecs.lookup(name).name == "utf-8"
    except LookupError:
        return False


_MORE = object()  # hiredis: the reply is not complete yet


class _SocketIO:
    """Direct reads and writes on one socket of a pinned connection: what redis-py does for a
    command, without its per-call layers (about a tenth of a single enqueue's time,
    bench/experiments/enqueue.md). The replies are parsed by a hiredis reader set up as redis-py's
    own parser is (same error classes, same decoding); the connection's checks stay: the
    pool's check before use (a closed or out-of-step socket is found by one ``poll``, then
    redis-py's own ``can_read`` decides), its health check PING, its timeout (the socket's).
    Made for each new socket of the connection, so nothing read is ever carried from one
    socket to the next. Used for plain TCP and unix-socket connections speaking RESP2 on
    POSIX with hiredis installed (``Pinned.direct_io``); others keep redis-py's path."""

    __slots__ = ("sock", "fd", "reader", "poller", "encoding", "errors")

    def __init__(self, conn: Any) -> None:
        self.sock = conn._sock
        self.fd = self.sock.fileno()
        self.errors = conn.encoder.encoding_errors
        self.encoding = conn.encoder.encoding if conn.encoder.decode_responses else None
        kwargs = {"protocolError": InvalidResponse, "replyError": conn._parser.parse_error,
                  "errors": self.errors, "notEnoughData": _MORE}
        if self.encoding is not None:
            kwargs["encoding"] = self.encoding
        self.reader = _HiredisReader(**kwargs)
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)

    def idle(self) -> bool:
        """Nothing to read: the server has not closed the socket and sent nothing unasked."""
        return not self.poller.poll(0)

    def write_read(self, conn: Any, data: bytes, n: int, raw: bool = False) -> list[Any]:
        """Write ``data`` (``n`` commands), read their ``n`` replies (error replies as
        exception instances, as ``_reply`` returns them; ``raw``: bytes, undecoded)."""
        if not raw or self.encoding is None:
            return self.exchange(conn, ((data, n),))
        self.reader.set_encoding(None, None)
        try:
            return self.exchange(conn, ((data, n),))
        finally:
            self.reader.set_encoding(self.encoding, self.errors)

    def exchange(self, conn: Any, pieces: Iterable[tuple[bytes, int]]) -> list[Any]:
        """``write_read`` of pieces (packed commands and how many) that are written one by one
        as ``pieces`` makes them, then every reply is read: the server runs a piece while the
        caller makes the next (``Pinned.call_made``)."""
        if conn.health_check_interval:
            conn.check_health()  # redis-py's PING when idle too long (read by its parser)
            if conn._sock is not self.sock:  # it reconnected: the caller's retry makes a new one
                raise ConnectionError("reconnected by the health check")
        try:
            n = 0
            for data, count in pieces:
                n += count
                try:  # one write, no poll first (the socket's timeout is for waiting, below)
                    sent = os.write(self.fd, data)
                except BlockingIOError:
                    sent = 0
                if sent < len(data):
                    self.sock.sendall(memoryview(data)[sent:])
            replies: list[Any] = []
            reader = self.reader
            while len(replies) < n:
                reply = reader.gets()
                if reply is _MORE:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        raise ConnectionError("Connection closed by server.")
                    reader.feed(chunk)
                else:
                    replies.append(reply)
        except socket.timeout:
            conn.disconnect()
            raise TimeoutError("Timeout reading from or writing to socket") from None
        except OSError as exc:
            conn.disconnect()
            raise ConnectionError(f"Error while writing to or reading from socket: {exc}") \
                from exc
        if conn.health_check_interval:
            conn.next_health_check = time.monotonic() + conn.health_check_interval
        return replies


def _socket_io(held: _Held) -> _SocketIO:
    """The direct I/O of ``held``'s connection on its current socket (connected first if it
    is not): the one made for that socket, or a new one after a reconnect."""
    conn = held.conn
    if conn._sock is None:
        conn.connect()
    if held.io is None or held.io.sock is not conn._sock:
        held.io = _SocketIO(conn)
    return held.io


class Pinned:
    """A connection per thread, held out of the client's pool, for the producer's hot path (a
    single enqueue, a batch of them): no pool checkout and release per call (redis-py 8's
    checkout and release with their bookkeeping are a third of a single enqueue's CPU).

    Each thread's connection is checked out of the pool the first time the thread enqueues and
    goes back to the pool when the thread ends; a forked child checks out its own (the
    parent's is never used or shut down there). Before each use it gets the check the pool
    makes at checkout (``can_read``: a connection the server closed, after a restart or
    ``CLIENT KILL``, is reconnected before anything is written); any error while writing or
    reading disconnects it, the connection's retry policy applies as to any command, and the
    next call connects again. ``client.close()`` disconnects it as it does every connection of
    the pool. Commands are packed with hiredis when the connection encodes UTF-8 strictly.

    Not for a cluster, a single-connection client or a client-side-caching pool
    (``Pinned.of`` returns None: those keep the pooled path)."""

    def __init__(self, client: "redis.Redis") -> None:
        self.client = client
        self.pool = client.connection_pool
        self._local = threading.local()
        kwargs = self.pool.connection_kwargs
        self.fast_pack = (_hiredis_pack is not None
                          and _utf8(kwargs.get("encoding", "utf-8"))
                          and kwargs.get("encoding_errors", "strict") == "strict")
        # the pool's own rule: pending data is an error unless push messages may be pending
        maint = getattr(self.pool, "maint_notifications_enabled", None)
        self.strict = not (maint() if maint is not None else False)
        # reads and writes on the socket itself (_SocketIO) where redis-py would do the same
        # (RESP2 only: no push messages, so any data pending before a write is out of step)
        self.direct_io = (self.fast_pack and _HiredisReader is not None
                          and os.name == "posix" and hasattr(select, "poll")
                          and self.pool.connection_class in (Connection,
                                                             UnixDomainSocketConnection)
                          and kwargs.get("protocol", 2) in (2, "2", None))

    @classmethod
    def of(cls, client: "redis.Redis") -> "Pinned | None":
        if not direct_ok(client) or getattr(client.connection_pool, "cache", None) is not None:
            return None
        return cls(client)

    def connection(self) -> Any:
        return self._connection()[0]

    def _connection(self) -> tuple[Any, "_SocketIO | None"]:
        """This thread's connection, checked as the pool checks one it hands out, and its
        direct I/O (None: redis-py's path)."""
        held = getattr(self._local, "held", None)
        if held is None or held.forks != _forks[0]:  # new thread, or a forked child
            held = self._local.held = _Held(self.pool)
        conn = held.conn
        io = held.io
        if io is not None and conn._sock is io.sock and io.idle():
            return conn, io  # the common case: one poll
        try:  # what ConnectionPool.get_connection checks before it hands a connection out
            if conn.can_read() and (self.strict or self.direct_io):
                raise ConnectionError("Connection has data")
        except (ConnectionError, TimeoutError, OSError):
            conn.disconnect()  # the write below connects again
        return conn, (_socket_io(held) if self.direct_io else None)

    def call(self, calls: Sequence[Call], raw: bool = False) -> list[Any]:
        """``direct(client, calls, raw)`` on this thread's connection."""
        spans = _spans()
        if spans is not None:
            with spans.span(_names(c[0] for c in calls), len(calls)):
                return self._call(calls, raw)
        return self._call(calls, raw)

    def _call(self, calls: Sequence[Call], raw: bool = False) -> list[Any]:
        conn, io = self._connection()
        held = self._local.held
        # a retry after a reconnect gets the I/O of the new socket
        return self._retried(conn, lambda: _direct(self.client, conn, calls, self.fast_pack,
                                                   None if io is None else _socket_io(held),
                                                   raw))

    def call_made(self, calls: Iterable[Call]) -> list[Any]:
        """``call`` of calls that ``calls`` makes one at a time (a generator): each is written
        as soon as it is made, so the server runs it while the next is made; the replies are
        read once all are written. With redis-py's I/O (no ``direct_io``) the calls are made
        first, then sent as ``call`` sends them. A retry after a connection error sends every
        call made so far again (as ``call``'s retry does), then makes and writes the rest as
        the first attempt would have. An error raised while making a call leaves the calls
        written before it sent (the caller checks what can fail before it makes any)."""
        if not self.direct_io:
            return self.call(list(calls))
        spans = _spans()
        if spans is not None:
            with spans.span(["(streamed)"], 0):
                return self._call_made(calls)
        return self._call_made(calls)

    def _call_made(self, calls: Iterable[Call]) -> list[Any]:
        made: list[Call] = []
        source = iter(calls)
        conn, _ = self._connection()
        held = self._local.held

        def attempt() -> list[Any]:
            again = made[:]  # a retry: the calls made so far again, then the rest as made
            made.clear()
            return _direct_made(self.client, conn, chain(again, source), made,
                                _socket_io(held))

        return self._retried(conn, attempt)

    @staticmethod
    def _retried(conn: Any, attempt: Callable[[], list[Any]]) -> list[Any]:
        """``attempt()`` under the connection's retry policy; any failure but an error reply
        disconnects it."""
        try:
            return cast(list[Any], conn.retry.call_with_retry(
                attempt, lambda error: conn.disconnect()))
        except ResponseError:
            raise  # every reply was read: the connection is in step
        except BaseException:
            conn.disconnect()  # whatever was left unread goes with it
            raise

    def release(self) -> None:
        """Give this thread's connection back to the pool now (it is checked out again on the
        next call)."""
        self._local.__dict__.pop("held", None)


def script_and_command(client: "redis.Redis", script: Script, keys: Sequence[Any],
                       args: Sequence[Any], command: Sequence[Any]) -> Any:
    """One script call and one plain command (``("SADD", key, member)``) in one round trip;
    returns the script's reply (the single enqueue). Clients ``direct`` cannot use go through
    ``Batch``."""
    if not direct_ok(client):
        return Batch(client).script(script, keys, args).command(
            str(command[0]).lower(), *command[1:]).execute()[0]
    return direct(client, [(script, keys, args), (None, command, ())])[0]


def script_raw(client: "redis.Redis", script: Script, keys: Sequence[Any],
               args: Sequence[Any]) -> Any:
    """One script call whose reply is read undecoded (bytes), on any client (a cluster, a
    single-connection client): what ``direct(..., raw=True)`` does for the others."""
    execute: Callable[..., Any] = client.execute_command
    try:
        return execute(*script_command(script, keys, args), **{NEVER_DECODE: True})
    except ResponseError as exc:
        if not refused(exc):
            raise
        load(client, script, exc)
    return execute(*script_command(script, keys, args), **{NEVER_DECODE: True})


def _direct(client: "redis.Redis", conn: Any, calls: Sequence[Call],
            fast_pack: bool = False, io: "_SocketIO | None" = None,
            raw: bool = False) -> list[Any]:
    return _settle(client, conn, calls, _write_read(conn, calls, fast_pack, io, raw),
                   fast_pack, io, raw)


def _settle(client: "redis.Redis", conn: Any, calls: Sequence[Call], replies: list[Any],
            fast_pack: bool, io: "_SocketIO | None", raw: bool = False) -> list[Any]:
    """The replies of ``calls`` (``replies``: the first round's): the rounds ``Resend`` keeps,
    as ``Batch`` and ``aio.send`` do. The calls a server without their script refused
    (NOSCRIPT: a restart, ``SCRIPT FLUSH``) are sent once more on ``conn`` after their script
    is loaded once (a plain command before them, a blocking pop, is not repeated); the first
    error reply raised."""
    rounds = Resend([call[0] for call in calls])
    while True:
        for script in rounds.take(replies):
            load(client, script, rounds.why[id(script)])
        if not rounds.pending:
            return rounds.replies_or_raise()
        replies = _write_read(conn, [calls[i] for i in rounds.pending], fast_pack, io, raw)


def _direct_made(client: "redis.Redis", conn: Any, source: Iterator[Call], made: list[Call],
                 io: "_SocketIO") -> list[Any]:
    """``_direct`` of the calls ``source`` makes, each written as it is made (kept in ``made``
    for a retry)."""
    def pieces() -> Iterator[tuple[bytes, int]]:
        for call in source:
            made.append(call)
            yield _hiredis_pack(_command(call)), 1

    return _settle(client, conn, made, io.exchange(conn, pieces()), True, io)


def _write_read(conn: Any, calls: Sequence[Call], fast_pack: bool = False,
                io: "_SocketIO | None" = None, raw: bool = False) -> list[Any]:
    commands = [_command(call) for call in calls]
    if io is not None:  # fast_pack holds too (Pinned.direct_io)
        return io.write_read(conn, b"".join([_hiredis_pack(c) for c in commands]), len(calls),
                             raw)
    if fast_pack:  # str (UTF-8), bytes and int arguments only: what the hot paths send
        conn.send_packed_command([b"".join([_hiredis_pack(c) for c in commands])])
    else:  # a client of another encoding: Antre's values travel as UTF-8 all the same
        conn.send_packed_command(conn.pack_commands([_utf8_words(c) for c in commands]))
    return [_reply(conn, raw) for _ in calls]  # read every reply: the connection stays in step


def _utf8_words(command: tuple[Any, ...]) -> tuple[Any, ...]:
    """``command`` with its ``str`` words as UTF-8 bytes, whatever the client's encoding (redis-py
    8.2 encodes ``str`` with it; earlier releases sent UTF-8)."""
    return tuple(w.encode() if isinstance(w, str) else w for w in command)


def _command(call: Call) -> tuple[Any, ...]:
    """The command a call sends: its script's FCALL or EVALSHA, or the plain command it
    names."""
    script, words, args = call
    return tuple(words) if script is None else script_command(script, words, args)


def script_command(script: Script, keys: Sequence[Any], args: Sequence[Any]
                   ) -> tuple[Any, ...]:
    """The command that calls ``script`` (a ``NamedScript``: as its library says; any other
    redis-py ``Script``: EVALSHA)."""
    if isinstance(script, NamedScript):
        return script.command(keys, args)
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


def load(client: Any, script: Script, why: Any = None) -> None:
    """After ``script``'s call was refused (``why``, ``refused``): what the next call needs
    loaded (the library, or the script into the script cache)."""
    if isinstance(script, NamedScript):
        script.load(client, why)
    else:
        script.sha = client.script_load(script.script)


async def aload(client: Any, script: Script, why: Any = None) -> None:
    """``load`` for an asyncio client."""
    if isinstance(script, NamedScript):
        await script.lib.aload(client, script, why)
    else:
        script.sha = await client.script_load(script.script)


def _reply(conn: Any, raw: bool = False) -> Any:
    try:
        return conn.read_response(disable_decoding=raw)
    except ResponseError as exc:  # NoScriptError is one; a connection error propagates
        return exc
