"""The job-log capture handler on the root logger leaves Python's last resort alone: a process
that configured no logging still sees warnings on stderr."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging
from antre.observe import joblog
joblog.install()
logging.getLogger("app.billing").warning("card declined for %s", "order-7")
logging.getLogger("antre.worker").error("lease lost")
logging.getLogger("app.billing").info("not shown: below the last resort's level")
"""


def test_warnings_reach_stderr_in_a_process_without_logging_configured() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stderr.splitlines() == ["card declined for order-7", "lease lost"]


def test_a_configured_handler_takes_them_instead() -> None:
    script = "import logging, sys\nlogging.basicConfig(stream=sys.stdout, format='%(message)s')\n"
    done = subprocess.run([sys.executable, "-c", script + SCRIPT], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stderr == ""
    assert done.stdout.splitlines() == ["card declined for order-7", "lease lost"]
