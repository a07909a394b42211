"""A Celery project moved to Antre by changing only its import lines (celery_style/shop;
celery_style/original/shop is the Celery code it was): ``@shared_task`` tasks, ``.delay``,
``.apply_async(countdown=)``, ``self.retry``, ``autoretry_for``, chain / group / chord, run by
the worker's code (``antre.testing.drain``) on an embedded Redis."""

from __future__ import annotations

import difflib
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from antre.compat.celery import TaskFailed, UnsupportedOption
from antre.compat.rq import Queue, job
from antre.testing import assert_enqueued, bind, clear, drain

HERE = Path(__file__).parent / "celery_style"


@pytest.fixture(scope="module")
def shop(antre_server):
    sys.path.insert(0, str(HERE))
    try:
        import shop.celery
        import shop.checkout
        import shop.tasks
        bind(shop.celery.app.antre, antre_server.url)
        yield shop
    finally:
        sys.path.remove(str(HERE))


@pytest.fixture
def app(shop):
    antre = shop.celery.app.antre
    antre.redis.flushall()
    clear(antre)
    yield antre


def test_antre_worker_serves_the_celery_app(shop):
    from antre_worker.loader import load_app
    assert load_app("shop.celery:app") is shop.celery.app.antre


def test_only_the_import_lines_changed():
    for name in ("celery.py", "tasks.py", "checkout.py"):
        before = (HERE / "original" / "shop" / name).read_text().splitlines()
        after = (HERE / "shop" / name).read_text().splitlines()
        changed = [line[1:] for line in difflib.unified_diff(before, after, lineterm="", n=0)
                   if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        assert changed and all(line.startswith(("from ", "import ")) for line in changed), name


def test_delay_and_apply_async_with_countdown_run_on_antre(shop, app):
    tasks = shop.tasks
    now = app.clock()
    first = tasks.add.delay(2, 3)
    later = tasks.add.apply_async(args=(4, 5), countdown=30)
    [scheduled] = assert_enqueued(app, type="shop.tasks.add", payload={"x": 4, "y": 5})
    assert scheduled.delay_s == 30 and app.job(later.id).state == "scheduled"
    done = drain(app)
    assert first.get(timeout=1) == 5 and later.get(timeout=1) == 9
    assert first.successful() and later.state == "SUCCESS"
    assert done.advanced_ms >= 30_000 and app.clock() - now >= 30_000
    assert tasks.add(1, 1) == 2  # calling a task runs it here, as in Celery


def test_the_checkout_runs_whole(shop, app):
    receipt, chained = shop.checkout.place_order(7, [10, 20, 30])
    done = drain(app)
    assert receipt.get(timeout=1) == 60  # the chord's callback: the total of the group
    assert chained.get(timeout=1) == 113  # ((1 + 2) + 10) + 100
    [rate] = assert_enqueued(app, type="shop.tasks.fetch_rate")
    assert [e.job_type for e in done.retried] == ["shop.tasks.fetch_rate"]  # self.retry once
    assert app.result(rate.idempotency_key).result == 1.1
    assert not done.dead


def test_failures_follow_celerys_rules(shop, app):
    tasks = shop.tasks
    bad = tasks.import_feed.delay("https://example.org/feed")
    flaky = tasks.notify.delay(0, "hello")
    done = drain(app)
    dead = {e.job_type: e for e in done.dead}
    assert dead["shop.tasks.import_feed"].attempt == 1  # not in autoretry_for: no retry
    assert dead["shop.tasks.notify"].attempt == 3  # autoretry_for, max_retries=2
    assert bad.failed() and flaky.state == "FAILURE"
    with pytest.raises(TaskFailed, match="not valid XML"):
        bad.get(timeout=1)


def test_eta_is_a_datetime(shop, app):
    eta = datetime.fromtimestamp(app.clock() / 1000, timezone.utc) + timedelta(hours=1)
    result = shop.tasks.add.apply_async((1, 2), eta=eta)
    assert assert_enqueued(app, type="shop.tasks.add")[0].delay_s == pytest.approx(3600, abs=1)
    drain(app)
    assert result.get(timeout=1) == 3


def test_task_id_is_the_idempotency_key(shop, app):
    a = shop.tasks.add.apply_async((1, 2), task_id="order-7-sum")
    assert a.idempotency_key == "order-7-sum"
    drain(app)
    assert app.result("order-7-sum").result == 3


@pytest.mark.parametrize("option,hint", [("priority", "queue of its own"),
                                         ("expires", "max_age_s"), ("link", "chain"),
                                         ("serializer", "JSON")])
def test_unsupported_options_are_refused_saying_what_instead(shop, app, option, hint):
    with pytest.raises(UnsupportedOption, match=hint):
        shop.tasks.add.apply_async((1, 2), **{option: 1})
    with pytest.raises(UnsupportedOption, match="countdown= or eta="):
        shop.tasks.add.apply_async((1, 2), countdown=1, eta=datetime.now(timezone.utc))
    assert app.redis.dbsize() == 0  # nothing was enqueued


def test_arguments_that_do_not_fit_are_refused_at_delay(shop, app):
    with pytest.raises(ValueError, match="add"):
        shop.tasks.add.delay(1, 2, 3)


def test_rq_style_queue_enqueue(shop, app):
    @job("default")
    def shout(text):
        return text.upper()

    q = Queue("default", connection=shop.celery.app)
    r = q.enqueue(shout, "hi")
    later = q.enqueue_in(timedelta(minutes=5), shout, "later")
    drain(app)
    assert (r.get_status(), r.result, later.result) == ("finished", "HI", "LATER")
    with pytest.raises(ValueError, match="not a task"):
        q.enqueue(print, "x")
    with pytest.raises(UnsupportedOption, match="depends_on"):
        q.enqueue(shout, "x", depends_on="abc")
