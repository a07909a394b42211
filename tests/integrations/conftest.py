"""Django configured once for this folder from ``djshop.settings`` (a real settings module:
the worker subprocess test uses it as ``DJANGO_SETTINGS_MODULE``); each test points ``TASKS``
at its own Redis with Django's ``override_settings``."""

from __future__ import annotations

import django
from django.conf import settings

import djshop.settings as djshop_settings

if not settings.configured:
    settings.configure(**{k: getattr(djshop_settings, k) for k in dir(djshop_settings)
                          if k.isupper()})
    django.setup()
