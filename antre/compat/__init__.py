"""Other queues' call sites on Antre, to move over one import at a time:
``antre.compat.celery`` (``shared_task``, ``.delay``, ``.apply_async``, canvas) and
``antre.compat.rq`` (``Queue(...).enqueue(f, *args)``)."""
