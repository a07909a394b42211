"""A small Django project for the Antre backend's tests: its settings, tasks and views."""
