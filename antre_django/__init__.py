"""Antre for Django: a backend for Django's Tasks framework (``django.tasks``, or the
``django-tasks`` backport before Django 6) and the worker app that runs the tasks.

- ``antre_django.backend.AntreBackend``: the ``TASKS`` backend (settings in its docstring and
  the README's *Django* section);
- ``antre_django.worker:app``: ``antre worker antre_django.worker:app``.

Nothing here is imported by ``antre`` itself: the core has no web framework in it.
"""
