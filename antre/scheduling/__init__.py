"""Per-key scheduling (issue 23, issue 28's room of its own): everything in Python that is
about keys, groups and limits rather than single jobs.

- ``flow``: concurrency slots, rate limits and circuit breakers per job type or downstream
  (``FlowPolicy``, ``FlowControl``), as the worker's admission step and the dashboard take them;
- ``groups``: the read model of fair-share groups and per-key turns (``Groups``: the Groups
  page, the API, the CLI and ``/metrics``);
- ``controls``: the operator's live controls of groups (``GroupControl``: slots overrides,
  pause and resume through the pause room handed in);
- ``overrides``: the checks an override of slots and/or rate passes (``checked_override``),
  a group's (``controls``) and a job type's or downstream's (``gates``).

The turns, lines and slots themselves live in the Lua scripts (``antre/engine/lua/_lib.lua``,
"Per-key turns", "Groups"); this room reads and steers them.

May import: ``antre.engine``, ``antre.errors``, ``antre.clock``. Never ``antre.stores``,
``antre.observe``, ``antre.control`` or ``antre.app`` (they import this room).
"""
