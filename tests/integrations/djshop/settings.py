"""The settings a Django project writes to run its tasks on Antre (the tests override
``TASKS`` with the test's own Redis; a worker subprocess reads these as they are)."""

import importlib.util
import os

SECRET_KEY = "djshop-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "djshop.urls"
DATABASES: dict[str, dict[str, str]] = {}
# Django 6 has django.tasks built in; before it the backport is an app (its signal handlers
# reset the backends when a test overrides TASKS)
INSTALLED_APPS = ["djshop"] + ([] if importlib.util.find_spec("django.tasks") else ["django_tasks"])

TASKS = {
    "default": {
        "BACKEND": "antre_django.backend.AntreBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "REDIS_URL": os.environ.get("ANTRE_REDIS_URL", "redis://127.0.0.1:6379/0"),
            "DATABASE_URL": os.environ.get("ANTRE_DATABASE_URL"),
            "JOB_OPTIONS": {"max_attempts": 2},
        },
    }
}
