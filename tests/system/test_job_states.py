"""A job's states (and a flow's) are declared once, in ``antre/engine/states.py``: no product
Python module, template or Lua script spells one. Made from the declared sets: a new state is
looked for as soon as it is declared."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from antre.engine import envelope, scripts, states

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("antre", "worker/antre_worker", "webapp/antre_web", "antre_cli", "antre_django",
           "antre_demo")
JOB = set(states.JOB_STATES)
# modules where a 'state' is something else's, with their own declared set
OTHER_STATES = {
    "antre/control/bulk.py": "a bulk task's state (bulk.STATES: running, paused, cancelled, done)",
    "worker/antre_worker/duties.py": "a bulk task's state (bulk.STATES), which the duty follows",
}
# the names under which code holds a job's state (or a purge's source, which is one)
HOLDERS = re.compile(r"(^|_)(state|states|source|sources|order)$", re.IGNORECASE)


def _names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Call):
        return _names(node.func)
    return set()


def _state_holder(node: ast.AST) -> bool:
    return any(HOLDERS.search(n) for n in _names(node))


def _consts(node: ast.AST) -> list[ast.Constant]:
    """The state constants in ``node`` (itself, or the elements of a tuple, list or set)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [c for c in items if isinstance(c, ast.Constant) and c.value in JOB]


def spelled_states(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module spells a job state: compared with, assigned to or defaulting a name
    that holds a state, or a key of a dict looked up by one."""
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_state_holder(s) for s in sides) or any(
                    isinstance(s, ast.Call) and _state_holder(s.func) for s in sides):
                for side in sides:
                    found += _consts(side)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_state_holder(t) for t in targets):
                found += _consts(node.value)
        elif isinstance(node, ast.keyword) and node.arg and HOLDERS.search(node.arg):
            found += _consts(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and HOLDERS.search(node.args[0].value):
            found += [c for a in node.args[1:] for c in _consts(a)]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) \
                and _state_holder(node.slice):
            found += [c for k in node.value.keys if k is not None for c in _consts(k)]
        elif isinstance(node, ast.arguments):
            args = [*node.posonlyargs, *node.args]
            for arg, default in zip(args[len(args) - len(node.defaults):], node.defaults):
                if HOLDERS.search(arg.arg):
                    found += _consts(default)
    return sorted({(c.lineno, c.value) for c in found})


def product_modules() -> list[Path]:
    return sorted(p for root in PRODUCT for p in (REPO / root).rglob("*.py")
                  if p.relative_to(REPO).as_posix() != "antre/engine/states.py")


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_product_module_spells_a_job_state(path):
    rel = path.relative_to(REPO).as_posix()
    spelled = spelled_states(ast.parse(path.read_text()))
    if rel in OTHER_STATES:
        return
    assert spelled == [], f"{rel} spells job states (use antre.engine.states): {spelled}"


def test_the_check_finds_a_spelled_state():
    tree = ast.parse("if job.state == 'dead' or state in ('ready', 'x'):\n    pass\n"
                     "f(state='held')\nSOURCES = ('waiting',)\n"
                     "{'done': 1, 'inflight': 2}[state]\n")
    assert [v for _, v in spelled_states(tree)] == ["dead", "ready", "held", "waiting", "done",
                                                     "inflight"]


def _template_spellings(text: str, flows: bool = True) -> list[str]:
    """The states ``text`` spells (a flow's too when ``flows``: the flow pages; elsewhere a
    'running' is a bulk task's or a purge's)."""
    alt = "|".join(sorted(JOB | (set(states.FLOW_STATES) if flows else set())))
    out = re.findall(rf"\bstate\s*(?:==|!=|=)\s*'({alt})'", text)
    for group in re.findall(r"\bstate\s+(?:not\s+)?in\s*\(([^)]*)\)", text):
        out += re.findall(rf"'({alt})'", group)
    out += re.findall(rf"\btotal\('({alt})'\)", text)
    return out


@pytest.mark.parametrize("path", sorted((REPO / "templates").glob("*.html")), ids=lambda p: p.name)
def test_no_template_spells_a_state(path):
    flows = path.name.lstrip("_").startswith("flow")
    assert _template_spellings(path.read_text(), flows) == [], f"use S.<STATE> in {path.name}"


def test_the_template_check_finds_a_spelled_state():
    assert _template_spellings("{% if job.state == 'dead' %}{% if state in ('ready', 'x') %}"
                               "{{ url_for('a', state='held') }}{{ ov.total('done') }}") == [
        "dead", "held", "ready", "done"]


def _lua_code(text: str) -> str:
    return "\n".join(re.sub(r"--.*$", "", line) if "'--" not in line else line
                     for line in text.split("\n"))


# a flow's counters are named as the states they count (its HASH's 'done')
LUA_COUNTERS = re.compile(r"'HINCRBY', fk, 'done'|members, 'done', 0")


def test_no_script_spells_a_job_state_or_compares_a_flow_state():
    lua = Path(scripts.__file__).parent / "lua"
    alt = "|".join(sorted(JOB))
    flows = "|".join(sorted(states.FLOW_STATES))
    spelled = []
    for path in sorted(lua.glob("*.lua")):
        code = LUA_COUNTERS.sub("", _lua_code(path.read_text()))
        spelled += [(path.name, s) for s in re.findall(rf"'({alt})'", code)]
        spelled += [(path.name, s) for s in re.findall(rf"[=~]=\s*'({flows})'", code)]
    assert spelled == []


def test_every_reader_has_the_declared_states():
    assert envelope.STATES == states.JOB_STATES
    _, code = scripts.library()
    assert f"local S = {{{scripts._lua_table(states.lua_tables()['S'])}}}" in code
    assert all(states.JOB_DOCS[s] and states.FLOW_DOCS.get(s, "x") for s in states.JOB_STATES)
    from antre.flows import FLOW_STATES
    assert FLOW_STATES == states.FLOW_STATES
