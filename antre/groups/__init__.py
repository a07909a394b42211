"""Fair-share groups and per-key turns: a group (``enqueue(group=...)``) is a tenant whose jobs
share slots and a rate; a lock key's turn (``enqueue(lock_key=...)``) runs its jobs one at a
time in enqueue order.

- ``read``: what the Groups page, the API, the CLI and ``/metrics`` read about groups and
  lock-key lines (``Groups``);
- ``control``: the operator's live controls of a group (``GroupControl``: slots and rate
  overrides, pause and resume through the pause room handed in).

The turns, lines and slots themselves live in the Lua scripts (``antre/engine/lua/``); this room
reads and steers them.

May import: ``antre.engine``, ``antre.limits``, ``antre.errors``, ``antre.clock``. Never
``antre.stores``, ``antre.observe``, ``antre.control`` or ``antre.app``.
"""
