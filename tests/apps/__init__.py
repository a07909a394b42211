"""Small Antre apps the worker tests run in subprocesses (they read ANTRE_REDIS_URL)."""
