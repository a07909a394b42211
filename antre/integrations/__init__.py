"""Antre with the tools a team already runs, each built on the lifecycle hooks
(``antre.hooks``): ``antre.integrations.sentry`` (``pip install antre[sentry]``)."""
