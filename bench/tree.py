"""Which tree's code a bench runs: the one it is run from.

The shared venv's editable install maps ``antre_web`` and ``antre_worker`` (the installed names
of ``webapp/`` and ``worker/``, pyproject's package-dir) onto the tree it was installed from,
so a bench run from another checkout or a worktree with only its root on ``PYTHONPATH`` would
start that other tree's worker. ``code_path`` is a ``PYTHONPATH`` for a child process that runs
the given tree's own code; ``use`` puts the same folders first on this process's ``sys.path``
(for a harness that imports ``antre_web`` or ``antre_worker`` itself). Nothing here imports
Antre, so a harness may call it before its first import of it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIRS = {"antre_web": "webapp", "antre_worker": "worker"}


def code_path(root: str = ROOT) -> str:
    """A folder where ``antre_web`` and ``antre_worker`` are links to ``root``'s ``webapp/``
    and ``worker/``, then ``root`` itself (``antre``, ``antre_cli``, ``bench``). The folder is
    a worktree's ``.pkgs`` when it has those links (``/tmp/tools/wt-setup.sh``), else one made
    once under the system's temp folder for that tree (a plain checkout, an archived revision)."""
    root = os.path.realpath(root)
    pkgs = os.path.join(root, ".pkgs")
    if not links_to(pkgs, root):
        tag = uuid.uuid5(uuid.NAMESPACE_URL, root).hex[:12]
        pkgs = os.path.join(tempfile.gettempdir(), f"antre-bench-pkgs-{tag}")
        os.makedirs(pkgs, exist_ok=True)
        for name, folder in PACKAGE_DIRS.items():
            link = os.path.join(pkgs, name)
            if not os.path.islink(link):
                os.symlink(os.path.join(root, folder), link)
    return os.pathsep.join([pkgs, root])


def links_to(pkgs: str, root: str) -> bool:
    """Whether ``pkgs`` holds ``antre_web`` and ``antre_worker`` as ``root``'s folders."""
    return all(os.path.realpath(os.path.join(pkgs, name))
               == os.path.realpath(os.path.join(root, folder))
               for name, folder in PACKAGE_DIRS.items())


def use(root: str = ROOT) -> None:
    """``code_path(root)``'s folders first on ``sys.path`` (before any import of Antre)."""
    for folder in reversed(code_path(root).split(os.pathsep)):
        while folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
