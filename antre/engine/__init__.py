"""The queue engine: every Redis key (``keys``), every Lua transition (``lua/`` loaded by
``scripts``), the envelope codec (``envelope``), the retry policy (``retry``), the queue's
transitions (``queue``) and the business-key locks (``locks``).

May import: ``antre.errors``, ``antre.clock`` and redis. Nothing else in Antre; every other
room builds on this one.
"""
