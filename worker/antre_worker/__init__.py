"""The worker pool: supervisor of processes (``pool``), job execution in one process
(``executor``), scheduled duties (``duties``), and the ``antre worker`` / ``antre sweep`` CLI."""
