"""``PYTHONPATH`` for a child process that runs a given checkout's code: its top (``antre``,
``antre_cli``, ``bench``) and the folders that hold ``antre_web`` and ``antre_worker``."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def code_path(root: str = ROOT) -> str:
    root = os.path.realpath(root)
    return os.pathsep.join([root, os.path.join(root, "webapp"), os.path.join(root, "worker")])


def use(root: str = ROOT) -> None:
    """Put ``code_path(root)``'s folders first on this process's ``sys.path``."""
    import sys
    for folder in reversed(code_path(root).split(os.pathsep)):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
