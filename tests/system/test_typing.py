"""The ``antre``, ``worker`` and ``webapp`` packages type-check under ``mypy --strict`` (config:
``[tool.mypy]`` in pyproject.toml).

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
PACKAGES = ("antre", "worker", "webapp")


def test_mypy_strict_passes() -> None:
    if importlib.util.find_spec("mypy") is None:
        if IN_CI:
            pytest.fail("mypy is not installed (CI=true: install the 'test' extra)")
        pytest.skip("mypy is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *PACKAGES],
        cwd=REPO_ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        print(output)
    assert proc.returncode == 0, f"mypy --strict {' '.join(PACKAGES)} failed:\n{output}"
