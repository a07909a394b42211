"""Process faults shared by the fault-injection runs (``bench/chaos``, ``bench/flows_chaos``,
``bench/cluster_chaos``): a pool's live worker processes, kill -9 of one, SIGSTOP of one for a
while and SIGCONT after."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any


def children(pid: int, min_age_s: float = 0.0) -> list[Any]:
    """The live (not zombie) child processes of ``pid`` (a pool's supervisor) that have been up
    ``min_age_s`` seconds; [] once it is gone."""
    import psutil
    now = time.time()
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    out = []
    for c in kids:
        try:
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE \
                    and now - c.create_time() >= min_age_s:
                out.append(c)
        except psutil.NoSuchProcess:
            continue
    return out


def kill9(procs: list[Any], rng: random.Random) -> int | None:
    """kill -9 of one of ``procs`` picked by ``rng``: its pid, or None (none left, or it was
    gone already)."""
    if not procs:
        return None
    victim = rng.choice(procs)
    try:
        os.kill(victim.pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return int(victim.pid)


def pause(pid: int, seconds: float) -> bool:
    """SIGSTOP of ``pid`` now and SIGCONT ``seconds`` later (on a daemon thread); False when
    the process was gone."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False

    def resume() -> None:
        time.sleep(seconds)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    threading.Thread(target=resume, daemon=True).start()
    return True
