"""Maintenance: the work that runs on a timer rather than for one job.

- ``periodic``: periodic schedules (``Schedules``: cron and interval ticks, catch-up, pause);
- ``retention``: what is kept and for how long (finished jobs, timelines, the DLQ, SQL records).
- ``rescue``: the leases of a worker process that stopped beating, returned before their
  deadlines (``Rescuer``, ``ANTRE_WORKER_PAUSE_TOLERANCE_S``).

The worker pool's duties (``antre_worker.duties``) run these on APScheduler; nothing here
schedules itself.

May import every room below it: ``antre.engine``, ``antre.limits``, ``antre.groups``,
``antre.stores``, ``antre.observe``, ``antre.control``. Never ``antre.app``.
"""
