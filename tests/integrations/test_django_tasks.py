"""The Django Tasks backend on the real stack: Django's test client and ``override_settings``,
a real Redis, real SQLite for the idempotency store, a real in-process worker (``burst``) and
``antre worker antre_django.worker:app --burst`` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from django.utils import timezone

from antre.clock import ManualClock
from antre_django import backend as backend_module
from antre_django.backend import AntreBackend
from antre_django.compat import (SUCCESSFUL, InvalidTask, TaskResultDoesNotExist,
                                 TaskResultStatus, task, task_backends)
from antre_django.jobs import DjangoAntre
from antre_django.worker import make_app
from antre_worker.runner import WorkerProcess
from helpers import REPO, run_async

from djshop import tasks

HERE = Path(__file__).resolve().parent


def tasks_setting(redis_url: str, database_url: str | None = None,
                  **options: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": "antre_django.backend.AntreBackend",
                        "QUEUES": ["default", "emails"],
                        "OPTIONS": {"REDIS_URL": redis_url, "DATABASE_URL": database_url,
                                    "JOB_OPTIONS": {"max_attempts": 2}, **options}}}


@pytest.fixture(autouse=True)
def fresh_producers() -> Iterator[None]:
    """Each test's producer apps are its own: an app remembers which queues it registered,
    and the test Redis is flushed between tests."""
    tasks.CALLS.clear()
    yield
    for app in list(backend_module._APPS.values()):
        app.redis.close()
    backend_module._APPS.clear()


@pytest.fixture
def on_antre(redis_url: str) -> Iterator[None]:
    """``TASKS`` on the test's Redis, no database."""
    with override_settings(TASKS=tasks_setting(redis_url)):
        yield


def run_worker(clock: ManualClock) -> Any:
    """The worker app ``antre worker antre_django.worker:app`` serves, built from the
    current settings, run in burst mode on every queue it serves."""
    app = make_app(clock=clock)
    try:
        w = WorkerProcess(app, queues=app.queues(), threads=1, worker_id="w1", clock=clock,
                          heartbeat_s=60, stop_grace_s=2)
        return w.run_burst()
    finally:
        if app._sql:
            app.engine.dispose()


def backend() -> AntreBackend:
    b = task_backends["default"]
    assert isinstance(b, AntreBackend)
    return b


def test_a_view_enqueues_a_worker_runs_it_and_the_result_reads_back(on_antre, r, clock):
    client = Client()
    answer = client.post("/add", {"a": "2", "b": "3"})
    assert answer.status_code == 202
    result_id = answer.json()["id"]
    assert answer.json()["status"] == "READY"
    # one Antre job: the task's path as its type, the arguments as its payload
    stored = backend().antre.job(result_id)
    assert (stored.job_type, stored.queue, stored.state) == ("djshop.tasks.add", "default",
                                                            "ready")
    assert client.get(f"/result/{result_id}").json() == {"status": "READY"}
    assert tasks.CALLS["add:2:3"] == 0

    run_worker(clock)

    assert tasks.CALLS["add:2:3"] == 1
    assert client.get(f"/result/{result_id}").json() == {"status": "SUCCESSFUL", "value": 5}
    result = tasks.add.get_result(result_id)
    assert result.status == SUCCESSFUL and result.return_value == 5
    assert result.args == [2, 3] and result.kwargs == {}
    assert result.attempts == 1 and result.worker_ids == ["w1"]
    assert result.enqueued_at is not None and result.finished_at is not None


def test_a_failing_task_is_retried_then_ends_failed_with_its_error(on_antre, clock):
    result = tasks.charge.enqueue(order_id=7)
    run_worker(clock)
    result.refresh()
    # attempt 1 failed: waiting for its retry, which Django calls ready again
    assert result.status == TaskResultStatus.READY and len(result.errors) == 1
    assert backend().antre.job(result.id).state == "scheduled"

    clock.advance(3_600_000)  # past the retry's backoff
    run_worker(clock)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    assert len(result.errors) == 2 and result.attempts == 2
    error = result.errors[-1]
    assert error.exception_class is ValueError
    assert "card declined for order 7" in error.traceback
    assert "Traceback (most recent call last)" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value
    assert backend().antre.job(result.id).state == "dead"


def test_the_task_context_carries_the_attempt_and_the_result_id(on_antre, clock):
    result = tasks.whoami.enqueue("x")
    run_worker(clock)
    assert tasks.whoami.get_result(result.id).return_value == {
        "tag": "x", "attempt": 1, "id": result.id}


def test_queue_name_is_the_antre_queue_and_key_names_the_effect(on_antre, clock):
    result = tasks.send_email.enqueue("a@example.org", subject="hi")
    job = backend().antre.job(result.id)
    assert job.queue == "emails" and job.idempotency_key == "email:a@example.org:hi"
    given = tasks.send_email.using(idempotency_key="email:resend:1").enqueue("a@example.org",
                                                                            subject="hi")
    assert backend().antre.job(given.id).idempotency_key == "email:resend:1"
    run_worker(clock)
    assert tasks.send_email.get_result(result.id).return_value == {"to": "a@example.org",
                                                                  "subject": "hi"}


def test_the_derived_key_is_the_same_for_the_same_call(on_antre):
    first, again, other = tasks.add.enqueue(2, 3), tasks.add.enqueue(2, 3), tasks.add.enqueue(2, 4)
    antre = backend().antre
    keys = [antre.job(x.id).idempotency_key for x in (first, again, other)]
    assert keys[0] == keys[1] != keys[2]
    assert keys[0].startswith("django:djshop.tasks.add:")
    # the arguments are bound to the parameters: by name or by position, one call, one key
    assert antre.job(tasks.add.enqueue(2, b=3).id).idempotency_key == keys[0]
    assert antre.job(tasks.add.enqueue(b=3, a=2).id).idempotency_key == keys[0]
    # arguments that do not fit the function are refused at enqueue, not in the worker
    with pytest.raises(TypeError):
        tasks.add.enqueue(1, 2, 3)
    with pytest.raises(TypeError):
        tasks.send_email.using(idempotency_key="k").enqueue("a@example.org", subjcet="hi")


def test_with_a_database_a_resent_task_runs_once(redis_url, sqlite_url, clock):
    with override_settings(TASKS=tasks_setting(redis_url, sqlite_url)):
        first, resent = tasks.add.enqueue(20, 22), tasks.add.enqueue(20, 22)
        assert first.id != resent.id
        run_worker(clock)
        assert tasks.CALLS["add:20:22"] == 1  # the second delivery found the key completed
        for r_id in (first.id, resent.id):
            assert tasks.add.get_result(r_id).status == SUCCESSFUL
        assert backend().antre.result(backend().antre.job(first.id).idempotency_key
                                      ).result == 42
        later = tasks.add.enqueue(a=20, b=22)  # the same call, after it completed
        run_worker(clock)
        assert tasks.CALLS["add:20:22"] == 1
        assert tasks.add.get_result(later.id).return_value == 42


def test_a_return_value_json_cannot_hold_fails_without_a_rerun(on_antre, clock):
    result = tasks.returns_a_date.enqueue()
    run_worker(clock)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and tasks.CALLS["returns_a_date"] == 1
    assert result.errors[-1].exception_class_path == "antre.errors.Permanent"
    assert "not JSON" in result.errors[-1].traceback


def test_run_after_is_a_delayed_job(on_antre, clock):
    result = tasks.add.using(run_after=timezone.now() + timedelta(minutes=5)).enqueue(1, 1)
    run_worker(clock)
    assert tasks.CALLS["add:1:1"] == 0
    job = backend().antre.job(result.id)
    assert job.state == "scheduled"
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY


def test_what_antre_does_not_support_is_refused_as_the_tasks_api_expects(on_antre):
    assert AntreBackend.supports_priority is False
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=10)
    with pytest.raises(InvalidTask, match="async"):
        task(tasks.a_coroutine)
    with pytest.raises(InvalidTask, match="not valid for backend"):
        tasks.add.using(queue_name="nowhere")
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result("no-such-job")


def test_bad_options_are_refused_at_configuration(redis_url):
    with override_settings(TASKS=tasks_setting(redis_url, JOB_OPTIONS={"max_atempts": 3})):
        with pytest.raises(ImproperlyConfigured, match="max_atempts"):
            task_backends["default"]
    with override_settings(TASKS=tasks_setting(redis_url, REDIS=redis_url)):
        with pytest.raises(ImproperlyConfigured, match="REDIS"):
            task_backends["default"]


def test_aenqueue_enqueues_on_redis_asyncio(on_antre, clock):
    async def produce() -> str:
        result = await tasks.add.aenqueue(4, 5)
        await backend().antre.aredis.aclose()
        backend().antre._aredis = None
        return result.id

    result_id = run_async(produce())
    run_worker(clock)
    assert tasks.add.get_result(result_id).return_value == 9


def test_the_worker_app_serves_the_backends_queues(on_antre):
    app = make_app()
    assert isinstance(app, DjangoAntre)
    assert app.queues() == ["default", "emails"]
    assert app.handlers.get("djshop.tasks.add") is not None
    assert app.handlers.get("djshop.tasks.nothing") is None
    assert app.handlers.get("os.path.join") is None  # importable, but not a Django task


def subprocess_env(redis_url: str) -> dict[str, str]:
    env = {**os.environ, "ANTRE_REDIS_URL": redis_url,
           "DJANGO_SETTINGS_MODULE": "djshop.settings",
           "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO),
                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("ANTRE_DATABASE_URL", None)
    return env


def test_djangos_own_test_runner_runs_the_projects_task_tests(redis_url, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "django", "test", "djshop", "-v", "2"],
                          cwd=HERE, env=subprocess_env(redis_url), capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Ran 2 tests" in proc.stderr and "\nOK" in proc.stderr, proc.stderr[-3000:]


def test_antre_worker_runs_django_tasks_from_the_command_line(on_antre, redis_url, tmp_path):
    out = tmp_path / "out.txt"
    result = tasks.write_file.enqueue(str(out), "from the worker")
    env = subprocess_env(redis_url)
    proc = subprocess.run([sys.executable, "-m", "antre_cli", "worker", "antre_django.worker:app",
                           "--burst", "--processes", "1", "--threads", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == "from the worker"
    assert tasks.write_file.get_result(result.id).return_value == "from the worker"



def test_the_worker_imports_no_module_outside_the_installed_apps(on_antre, clock):
    """A job type is whatever was written to Redis: one naming a module of no installed app is
    not imported (no side effect of importing it runs) and the job is buried as unknown."""
    import sys as _sys
    from antre_django.jobs import resolve_task

    assert resolve_task("djshop.tasks.add") is not None
    assert "this" not in _sys.modules  # importing it prints the Zen of Python: a side effect
    assert resolve_task("this.s") is None
    assert "this" not in _sys.modules


def test_reading_a_result_back_imports_no_module_outside_the_installed_apps(on_antre):
    """``get_result`` of a job whose type names a module of no installed app: not imported (no
    side effect of importing it runs), and the job is no Django task's."""
    job_id = backend().antre.queue("default").enqueue("this.s", {"args": []},
                                                      idempotency_key="zen")
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        backend().get_result(job_id)
    assert "this" not in sys.modules  # importing it prints the Zen of Python
