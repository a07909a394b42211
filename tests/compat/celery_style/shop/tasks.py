"""The shop's tasks."""

from antre.compat.celery import shared_task


@shared_task
def add(x, y):
    return x + y


@shared_task
def total(amounts):
    return sum(amounts)


@shared_task(bind=True, max_retries=3, default_retry_delay=10)
def fetch_rate(self, currency):
    if self.request.retries == 0:  # the rates service drops the first call of the day
        raise self.retry(exc=ConnectionError("rates service timed out"), countdown=5)
    return {"EUR": 1.1, "GBP": 1.3}[currency]


@shared_task(autoretry_for=(TimeoutError,), max_retries=2)
def notify(user_id, message):
    if user_id == 0:
        raise TimeoutError("push gateway timed out")
    return f"sent {message!r} to {user_id}"


@shared_task
def import_feed(url):
    raise ValueError(f"feed {url} is not valid XML")
