"""Every package of the wheel (``antre``, ``antre_worker``, ``antre_web``, ``antre_django``,
``antre_cli``, ``antre_demo``) and ``examples/`` type-check under ``mypy --strict`` (config:
``[tool.mypy]`` in pyproject.toml).

``antre_worker`` and ``antre_web`` are the folders ``worker/antre_worker`` and
``webapp/antre_web``; pyproject's ``mypy_path`` finds them under the names a user imports.

Skipped when mypy is not installed locally; under ``CI=true`` a missing mypy is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"
PACKAGES = ("antre", "worker/antre_worker", "webapp/antre_web", "antre_django", "antre_cli",
            "antre_demo", "examples")


def test_mypy_strict_passes(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        if IN_CI:
            pytest.fail("mypy is not installed (CI=true: install the 'test' extra)")
        pytest.skip("mypy is not installed")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *PACKAGES],
        cwd=REPO_ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        print(output)
    assert proc.returncode == 0, f"mypy --strict {' '.join(PACKAGES)} failed:\n{output}"


TYPED_TASKS = '''
from antre import Antre, JobContext

app = Antre()


@app.task(key=lambda to, subject: f"email:{to}:{subject}")
def send_email(ctx: JobContext, to: str, subject: str) -> dict[str, str]:
    return {"to": to, "subject": subject}


send_email.enqueue(to="a@example.org", subject="welcome")
send_email.using(idempotency_key="email:1").enqueue("a@example.org", "hi")
send_email.enqueue(to=42, subject="welcome")  # line 14: wrong type
send_email.using(idempotency_key="k").enqueue(to="a@example.org", subjet="x")  # line 15: typo
'''


def test_typed_tasks_let_mypy_check_a_producers_arguments(tmp_path: Path) -> None:
    """``@app.task``: a wrong argument type and a misspelt field are mypy errors at the
    producer's line, and the right calls pass."""
    if importlib.util.find_spec("mypy") is None:
        if IN_CI:
            pytest.fail("mypy is not installed (CI=true: install the 'test' extra)")
        pytest.skip("mypy is not installed")
    src = tmp_path / "producer.py"
    src.write_text(TYPED_TASKS)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(src)],
        cwd=REPO_ROOT, env={**os.environ, "MYPYPATH": str(REPO_ROOT)}, check=False,
        capture_output=True, text=True, timeout=600)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["14", "15"], proc.stdout
    assert 'incompatible type "int"; expected "str"' in errors[0]
    assert '"subjet"' in errors[1]
