"""A bench runs the tree it is run from (``bench/tree.py``): its worker children import
``antre_worker`` and ``antre_web`` from that tree's ``worker/`` and ``webapp/``, not from the
tree the shared venv was installed from, in a worktree (``.pkgs`` links) and in a plain
checkout (links made under the temp folder)."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import antre_bench as ab
from bench import tree

WHERE = "import antre_worker, antre_web; print(antre_worker.__file__); print(antre_web.__file__)"


def imported_from(pythonpath: str, cwd: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", WHERE], env={**env, "PYTHONPATH": pythonpath},
                         cwd=cwd, capture_output=True, text=True, check=True, timeout=120)
    return [os.path.realpath(line) for line in out.stdout.split()]


def fake_tree(root) -> str:
    root.mkdir()
    for folder in ("worker", "webapp"):
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")
    return str(root)


def test_a_plain_checkout_runs_its_own_worker_and_web_packages(tmp_path):
    root = fake_tree(tmp_path / "checkout")
    assert imported_from(root, root) != [os.path.join(root, "worker", "__init__.py"),
                                         os.path.join(root, "webapp", "__init__.py")]
    assert imported_from(tree.code_path(root), root) == [
        os.path.realpath(os.path.join(root, "worker", "__init__.py")),
        os.path.realpath(os.path.join(root, "webapp", "__init__.py"))]
    assert tree.code_path(root) == tree.code_path(root)  # the same links, made once


def test_a_worktree_uses_its_pkgs_links(tmp_path):
    root = fake_tree(tmp_path / "wt")
    (tmp_path / "wt" / ".pkgs").mkdir()
    os.symlink("../worker", tmp_path / "wt" / ".pkgs" / "antre_worker")
    os.symlink("../webapp", tmp_path / "wt" / ".pkgs" / "antre_web")
    assert tree.code_path(root).split(os.pathsep) == [
        os.path.join(os.path.realpath(root), ".pkgs"), os.path.realpath(root)]


def test_the_bench_workers_env_runs_this_tree():
    env = ab._env("redis://127.0.0.1:1/0")
    root = os.path.realpath(ab.ROOT)
    assert imported_from(env["PYTHONPATH"], root) == [
        os.path.join(root, "worker", "__init__.py"), os.path.join(root, "webapp", "__init__.py")]
