"""docs/ARCHITECTURE.md says what the code is: its layer picture is ``RANK`` of
tests/system/test_layers.py, every file, module and name it points at exists, its "Where do I
add..." answers each question once and names files that exist, and no Python module of the
product but ``antre/engine/keys.py`` spells a Redis key. Read from the document and the code,
not from a list kept here."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from test_layers import RANK

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "ARCHITECTURE.md").read_text()
ROOTS = ("antre", "worker", "webapp", "antre_cli", "antre_django", "antre_demo", "templates",
         "static", "tests", "docs", "bench", "examples", "deploy")
# named by the document before they land (other work in progress): checked once they exist
PENDING: set[str] = set()
QUESTIONS = ("operator action", "job state", "outcome", "metric", "setting", "Redis key",
             "Lua script", "page")
PRODUCT = ("antre", "worker/antre_worker", "webapp/antre_web", "antre_cli", "antre_django",
           "antre_demo")


def section(title: str, text: str = DOC) -> str:
    """The text of the ``## title`` section (up to the next heading of that level)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/ARCHITECTURE.md has no section '## {title}'"
    return match.group(1)


def picture(text: str) -> dict[str, int]:
    """The rooms of the layer picture with their rank: ``subgraph L<rank>`` holds them."""
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block, "no mermaid picture"
    ranks, rank = {}, None
    for line in block.group(1).splitlines():
        if m := re.match(r"\s*subgraph L(\d+)\b", line):
            rank = int(m.group(1))
        elif re.match(r"\s*end\s*$", line):
            rank = None
        elif rank is not None and (m := re.match(r"\s*(\w+)\[", line)):
            ranks[m.group(1)] = rank
    return ranks


def test_the_layer_picture_is_the_rank_table():
    assert picture(section("Layers")) == RANK


def test_the_picture_reader_reads_a_picture():
    text = "```mermaid\nflowchart BT\n  subgraph L1[\"1\"]\n    a[\"a\"]\n  end\n" \
           "  subgraph L0[\"0\"]\n    b[\"b\"]\n    c[\"c\"]\n  end\n  x[\"x\"] --> L1\n```"
    assert picture(text) == {"a": 1, "b": 0, "c": 0}


def quoted(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def paths(text: str) -> list[str]:
    """The repository paths ``text`` names in backquotes (``antre/engine/keys.py``, ...)."""
    return [t.rstrip("/") for t in quoted(text)
            if re.fullmatch(r"[\w.-]+(/[\w.<>*-]*)+", t) and t.split("/")[0] in ROOTS]


def exists(path: str) -> bool:
    """A path that exists; one with a placeholder (``lua/<name>.lua``, ``*.lua``): its
    folder."""
    if "<" in path or "*" in path:
        return (REPO / path).parent.is_dir()
    return (REPO / path).exists()


def test_every_path_the_document_names_exists():
    missing = [p for p in paths(DOC) if p not in PENDING and not exists(p)]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_pending_paths_load_once_they_exist():
    for path in sorted(PENDING):
        if (REPO / path).exists():
            importlib.import_module(path.removesuffix(".py").replace("/", "."))


def rooms(text: str) -> list[tuple[str, str]]:
    """Each ``### `room/` ...`` section of "The rooms": its floor's folder and its text."""
    found = re.findall(r"^### `([\w/]+)/`[^\n]*\n(.*?)(?=^##)", text + "\n##", re.M | re.S)
    return [(room.split("/")[0], body) for room, body in found]


def test_every_file_a_room_names_is_in_its_floor():
    assert len(rooms(section("The rooms"))) >= 10
    missing = []
    for floor, body in rooms(section("The rooms")):
        for name in quoted(body):
            if re.fullmatch(r"\w+\.py", name) and not list((REPO / floor).rglob(name)):
                missing.append(f"{floor}/**/{name}")
    assert not missing, f"the rooms name files that are not there: {missing}"


def test_every_dotted_name_the_document_gives_resolves():
    names = [t for t in quoted(DOC) if re.fullmatch(r"antre(_\w+)?(\.\w+)+", t)]
    assert names
    for name in names:
        module, attrs = _module_of(name)
        obj = module
        for attr in attrs:
            assert hasattr(obj, attr), f"{name}: {obj.__name__} has no {attr}"
            obj = getattr(obj, attr)


def _module_of(name: str):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            return importlib.import_module(".".join(parts[:cut])), parts[cut:]
        except ModuleNotFoundError:
            continue
    raise AssertionError(f"{name}: no module")


def answers() -> dict[str, str]:
    """``- **a <question>** ...: <answer>`` bullets of "Where do I add...", by question."""
    text = section("Where do I add...")
    found = re.findall(r"^- \*\*an? ([^*]+)\*\*(.*?)(?=^- |\Z)", text, re.M | re.S)
    return {q: a for q, a in found}


@pytest.mark.parametrize("question", QUESTIONS)
def test_each_question_has_one_answer_naming_files_that_exist(question):
    text = section("Where do I add...")
    assert len(re.findall(rf"^- \*\*an? {re.escape(question)}\*\*", text, re.M)) == 1
    named = paths(answers()[question])
    assert named, f"the answer to 'a {question}' names no file"
    missing = [p for p in named if p not in PENDING and not exists(p)]
    assert not missing, f"'a {question}' names {missing}, which do not exist"


def key_spellings(tree: ast.AST) -> list[int]:
    """Lines of string constants that begin a Redis key (``antre:``) or read the prefix."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith("antre:"):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Name, ast.Attribute)) \
                and getattr(node, "id", getattr(node, "attr", "")) == "PREFIX":
            lines.append(node.lineno)
    return sorted(lines)


def test_no_module_but_keys_spells_a_redis_key():
    found = {}
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == REPO / "antre" / "engine" / "keys.py":
                continue
            if lines := key_spellings(ast.parse(path.read_text(), str(path))):
                found[str(path.relative_to(REPO))] = lines
    assert not found, f"build these keys in antre/engine/keys.py: {found}"


def test_the_key_finder_finds_a_key():
    tree = ast.parse('k = f"antre:{{{q}}}:ready"\nj = "antre:locks"\nm = keys.PREFIX\n')
    assert key_spellings(tree) == [1, 2, 3]
