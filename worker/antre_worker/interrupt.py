"""Ending one handler past its hard timeout without ending its process: ``HardTimeout`` is
raised into the handler's own thread (``PyThreadState_SetAsyncExc``), which works while the
thread runs Python code. A thread blocked in a C call (a socket read without a timeout, a
``time.sleep``, a lock's wait) sees it only when that call returns: if it does not within the
grace, the process retires (runner.py), letting the jobs of its other threads finish first.

The exception may arrive anywhere the thread is until it is raised, also right after the
handler returned: ``Running.handler_guard`` orders the two sides. The heartbeat raises it only
while ``r.in_handler`` (under the guard); the handler's thread, once the handler returned,
clears ``in_handler`` and any exception still pending for itself under the same guard, inside
the region that turns a ``HardTimeout`` into the job's ``JobTimeout`` (``execution._call``): one
raised there, in the race with the handler's return, times the job out; none is raised
later."""

from __future__ import annotations

import ctypes
import threading

from antre import JobTimeout


class HardTimeout(JobTimeout):
    """Raised into a handler's thread at its hard timeout (made with no arguments by the
    interpreter; ``Execution`` turns it into a ``JobTimeout`` saying how long it ran)."""


def raise_in(thread_id: int, exc: type[BaseException] = HardTimeout) -> bool:
    """Ask the interpreter to raise ``exc`` in the thread ``thread_id`` at its next Python
    instruction; False when no such thread runs."""
    if not thread_id:
        return False
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                                      ctypes.py_object(exc))
    if done > 1:  # more than one thread state matched: undo (the C API's own advice)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
        return False
    return bool(done)


def clear_pending() -> None:
    """Drop an exception ``raise_in`` left for this thread and it has not raised yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)
