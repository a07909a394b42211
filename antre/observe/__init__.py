"""Observability: the typed read models pages, API and CLI read (``readmodels``), the status
summary (``status``, ``sampling``), the job finder and timelines (``finder``), the live-worker
registry (``registry``), metrics, alerts, structured logs, tracing, and the one redaction of
URLs and error texts for everything shown (``redact``).

May import: ``antre.engine``, ``antre.limits``, ``antre.stores``, ``antre.errors``,
``antre.clock``. Never ``antre.control`` or ``antre.app``.
"""
