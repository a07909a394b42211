"""The house's floors and rooms (docs/ARCHITECTURE.md): every import of every module of
``antre/``, ``worker/antre_worker/`` and ``webapp/antre_web/``, checked against the picture.

- inside ``antre/``, each folder and each top-level module is a room of its own with a rank
  (``RANK``, drawn in docs/ARCHITECTURE.md), and a room imports only rooms of a lower rank;
- ``antre/`` imports neither flask nor apscheduler, nor the worker, the dashboard or the CLI;
- ``antre_worker`` and ``antre_web`` never import each other (nor the CLI);
- ``antre.testing`` (the users' test helpers) stands above the worker: it runs jobs with the
  worker's own code, so it may import ``antre_worker``, never the dashboard or the CLI;
- framework integrations live in their own packages (``antre_django/``): ``antre/`` imports no
  web framework, and an integration uses the core (``antre``), never the worker, the
  dashboard or the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RANK = {  # a room of antre/ (a folder, a top-level module, "package": antre/__init__.py)
    "clock": 0, "errors": 0, "embedded": 1, "settings": 0,
    "engine": 1,
    "limits": 2, "stores": 2, "flows": 2,
    "groups": 3,
    "observe": 4,
    "control": 5, "maintenance": 5,
    "context": 6, "tasks": 6, "hooks": 6,
    "app": 7,
    "actions": 8, "package": 8, "integrations": 8, "compat": 8,
    "testing": 9,
}
FORBIDDEN = {
    "antre": {"flask", "apscheduler", "antre_web", "antre_worker", "antre_cli", "django", "django_tasks", "fastapi", "starlette", "antre_django"},
    "antre_worker": {"antre_web", "flask", "antre_cli"},
    "antre_web": {"antre_worker", "apscheduler", "antre_cli"},
    "antre_django": {"antre_web", "antre_worker", "antre_cli", "flask"},
    "antre.testing": {"flask", "apscheduler", "antre_web", "antre_cli", "django", "fastapi"},
}


def room_of(module: str) -> str | None:
    """``antre.engine.keys`` -> ``engine``; ``antre.errors`` -> ``errors``; ``antre`` ->
    ``package``; None outside ``antre``."""
    parts = module.split(".")
    if parts[0] != "antre":
        return None
    return parts[1] if len(parts) > 1 else "package"


def imports_of(path: Path, package: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports, relative imports resolved against ``package``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            if target == "antre" or (node.level and not node.module):
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names
                          if a.name in RANK]
    return found


def floor_of(module: str) -> str:
    """``antre_worker.runner`` -> ``antre_worker``; ``antre.testing`` is a floor of its own."""
    if module == "antre.testing" or module.startswith("antre.testing."):
        return "antre.testing"
    return module.split(".")[0]


def violations(module: str, imported: list[tuple[int, str]]) -> list[str]:
    floor = floor_of(module)
    bad: list[str] = []
    for line, target in imported:
        top = target.split(".")[0]
        if top in FORBIDDEN.get(floor, set()):
            bad.append(f"{module}:{line} imports {target} (the {floor} floor may not)")
        mine, theirs = room_of(module), room_of(target)
        if not mine or not theirs or mine == theirs:
            continue
        if mine not in RANK or theirs not in RANK:
            bad.append(f"{module}:{line} imports {target}: rank '{mine}' and '{theirs}' in RANK")
        elif RANK[theirs] >= RANK[mine]:
            bad.append(f"{module}:{line} imports {target}: room '{mine}' may import only "
                       f"rooms below it, not '{theirs}'")
    return bad


def modules() -> list[tuple[str, Path]]:
    out = []
    for folder, name in (("antre", "antre"), ("worker/antre_worker", "antre_worker"),
                         ("webapp/antre_web", "antre_web"), ("antre_django", "antre_django")):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [name, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append((".".join(parts), path))
    return out


def test_every_import_respects_the_floors_and_rooms() -> None:
    bad: list[str] = []
    for module, path in modules():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        bad += violations(module, imports_of(path, package))
    assert not bad, "\n".join(bad)


def test_the_rooms_are_where_the_picture_says() -> None:
    found = {room_of(m) for m, _ in modules() if m.split(".")[0] == "antre"}
    assert found == set(RANK)


@pytest.mark.parametrize("module,target", [
    ("antre.engine.queue", "antre.observe.readmodels"),   # a lower room reaching up
    ("antre.limits.admission", "antre.stores.sql"),            # a sibling room
    ("antre.errors", "antre.engine.keys"),                # the base imports nothing of Antre
    ("antre.clock", "antre.errors"),                      # two top-level modules of one rank
    ("antre.tasks", "antre.app"),                         # a module below the app reaching up
    ("antre.app", "antre.actions.table"),                 # the app below its action table
    ("antre.engine.queue", "antre"),                      # the package is the top
    ("antre.newroom", "antre.errors"),                    # a room missing from RANK
    ("antre.control.pause", "flask"),                     # no web framework in the core
    ("antre.app", "django.tasks"),
    ("antre_django.jobs", "antre_worker.runner"),       # integrations: the core only
    ("antre_worker.runner", "antre_web.services"),              # the floors never meet
    ("antre_web.api", "antre_worker.pool"),
    ("antre.app", "antre_worker.runner"),                 # only the test helpers may
    ("antre.testing", "antre_web.services"),
])
def test_the_checker_catches_a_wrong_import(module: str, target: str) -> None:
    assert violations(module, [(1, target)])


def test_the_checker_passes_an_allowed_import() -> None:
    assert not violations("antre.control.pause", [(1, "antre.observe.readmodels"),
                                                  (2, "antre.engine.keys"), (3, "redis")])
    assert not violations("antre.testing", [(1, "antre_worker.runner"), (2, "antre.app")])
    assert not violations("antre_worker.runner", [(1, "antre.app"), (2, "apscheduler")])
    assert not violations("antre.app", [(1, "antre.tasks"), (2, "antre.embedded")])
    assert not violations("antre", [(1, "antre.app"), (2, "antre.context")])
