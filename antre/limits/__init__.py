"""Limits: how many jobs of a kind may run at once, how fast they may start, and when to stop
sending them to a failing downstream.

- ``admission``: concurrency slots, rate limits and circuit breakers per job type or downstream
  (``LimitPolicy``, ``Limits``), checked by the worker before it runs a handler;
- ``gates``: the limits held at reserve (``Gates``): a job over its type's or downstream's
  slots waits in the gate's line instead of being delivered and snoozed;
- ``overrides``: the checks an operator's override of slots and/or rate passes
  (``checked_override``), shared by a gate's and a fair-share group's (``antre.groups``).

May import: ``antre.engine``, ``antre.errors``, ``antre.clock``. Never ``antre.stores``,
``antre.observe``, ``antre.control`` or ``antre.app`` (they import this room).
"""
