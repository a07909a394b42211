"""Where the shop enqueues its tasks."""

from celery import chain, chord, group

from .tasks import add, fetch_rate, notify, total


def place_order(order_id, amounts):
    notify.delay(order_id, "order received")
    fetch_rate.apply_async(args=("EUR",), countdown=30)
    receipt = chord(group(add.s(a, 0) for a in amounts), total.s())()
    chained = chain(add.s(1, 2), add.s(10), add.s(100)).apply_async()
    return receipt, chained
