"""Flow control: per-type and per-downstream concurrency slots, rate limits and circuit
breakers (``flow``), as the worker's admission step and the dashboard read them.

May import: ``antre.engine``, ``antre.errors``, ``antre.clock``.
"""
