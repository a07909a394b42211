"""What a Django project's own test of its tasks looks like, run by Django's test runner
(``python -m django test djshop --settings=djshop.settings``; ``tests/integrations/
test_django_tasks.py`` runs it): enqueue through the backend, run an Antre worker in burst
mode in the test, read the result back."""

from __future__ import annotations

from django.test import SimpleTestCase

from antre_django.compat import SUCCESSFUL, TaskResultStatus
from antre_django.worker import make_app
from antre_worker.runner import WorkerProcess

from . import tasks


def run_worker() -> None:
    app = make_app()
    WorkerProcess(app, queues=app.queues(), threads=1, worker_id="django-test").run_burst()


class AntreBackendTests(SimpleTestCase):
    def test_a_task_runs_on_antre_and_its_result_reads_back(self) -> None:
        result = tasks.add.enqueue(20, 22)
        self.assertEqual(result.status, TaskResultStatus.READY)
        run_worker()
        result.refresh()
        self.assertEqual(result.status, SUCCESSFUL)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.worker_ids, ["django-test"])

    def test_a_failing_task_ends_failed_with_its_error(self) -> None:
        result = tasks.charge.using(idempotency_key="charge:django-test").enqueue(9)
        run_worker()  # attempt 1 of 2 fails: waiting for its retry
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual([e.exception_class for e in result.errors], [ValueError])
