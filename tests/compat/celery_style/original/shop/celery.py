"""The Celery app (the broker URL from the environment, as the shop deploys it)."""

import os

from celery import Celery

app = Celery("shop", broker=os.environ.get("SHOP_BROKER_URL"))
