"""``antre --version``: the version written once, in ``antre.__version__``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import antre
from antre_cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_antre_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"antre {antre.__version__}\n"


def test_the_console_command_prints_it_too() -> None:
    done = subprocess.run([sys.executable, "-m", "antre_cli", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"antre {antre.__version__}"


def test_the_version_is_written_in_one_place() -> None:
    """PEP 440, and pyproject reads it from ``antre.__version__`` instead of stating its own."""
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", antre.__version__)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert 'version = { attr = "antre.__version__" }' in pyproject
    assert not re.search(r'^version = "', pyproject, re.M)
