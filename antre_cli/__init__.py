"""The ``antre`` console command: the one place that fronts the core, the worker pool and the
dashboard together."""
