"""A small shop's background jobs, written for Celery."""
