"""The scripts spell no key: every name a script derives from a job prefix or a flow's key is
``keys.Tagged``'s, written into the library as the Lua table ``K``; and the library's parts
(``lua/_lib.lua``'s includes) each name only what is defined before it."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from antre.engine import keys, scripts, states
from antre.engine.keys import QueueKeys, Tagged, lua_keys

LUA = resources.files("antre.engine.lua")
_STRING = re.compile(r"'((?:[^'\\\n]|\\.)*)'")


def code_of(text: str) -> str:
    """A Lua file's code: every comment left out (a '--' outside a string starts one)."""
    out = []
    for line in text.split("\n"):
        quote, cut = None, len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif line.startswith("--", i):
                cut = i
                break
            i += 1
        out.append(line[:cut])
    return "\n".join(out)


def lua_files() -> dict[str, str]:
    return {p.name: code_of(p.read_text()) for p in LUA.iterdir() if p.name.endswith(".lua")}


STATE_WORDS = set(states.JOB_STATES) | set(states.FLOW_STATES)


@pytest.mark.parametrize("name", sorted(lua_keys()))
def test_no_script_spells_a_declared_key_name(name):
    """A key name as a string in a script fails (``K.<name>`` says it). A name that is also a
    state ('ready', 'waiting', 'held', ...; tests/system/test_job_states.py keeps those out of the
    scripts) is looked for where a key is made: joined to a tag or a key with ``..``."""
    value = lua_keys()[name]
    spelled = []
    for file, code in lua_files().items():
        for m in _STRING.finditer(code):
            literal = m.group(1)
            near = code[max(0, m.start() - 4):m.start()] + code[m.end():m.end() + 4]
            joined = ".." in near
            whole = literal == value and (value not in STATE_WORDS or joined)
            prefixed = ":" in value and literal.startswith(value) and joined  # 'flows:running'
            if whole or prefixed:
                spelled.append((file, literal))
    assert spelled == [], f"K.{name} ('{value}') is spelled in the scripts: {spelled}"


def test_the_scripts_table_of_keys_is_the_declaration():
    _, code = scripts.library()
    table = re.search(r"^local K = \{(.*)\}$", code, re.MULTILINE)
    assert table is not None
    assert dict(re.findall(r"(\w+) = '([^']*)'", table.group(1))) == lua_keys()


@pytest.mark.parametrize("name", [n for n in sorted(lua_keys())
                                  if hasattr(QueueKeys, n) and not lua_keys()[n].startswith(":")])
def test_queue_keys_build_each_declared_key_from_its_name(name):
    """The key QueueKeys gives is the tag, ':' and the declared name (followed by what it is
    per): what the scripts make from a job prefix (its tag: the prefix without 'job:')."""
    k = QueueKeys("q", 3)
    attr = getattr(k, name)
    key = attr("x") if callable(attr) else attr
    tag = k.job_prefix.removesuffix(Tagged.job)
    assert key.startswith(tag + lua_keys()[name]), (name, key)


def test_a_flows_keys_are_its_key_and_the_declared_part():
    k = QueueKeys("q")
    flow = k.flow("f1")
    assert (k.flow_jobs("f1"), k.flow_results("f1"), k.flow_failed("f1"), k.flow_wake("f1")) == (
        flow + Tagged.flow_jobs, flow + Tagged.flow_results, flow + Tagged.flow_failed,
        flow + Tagged.flow_wake)
    assert keys.QueueKeys("q").job_prefix.endswith(":" + Tagged.job)


def test_each_part_of_the_library_names_only_definitions_before_it():
    """Lua resolves a name when the function is read: a helper naming one defined after it
    (in a later part, or later in its own) would call a global, which Redis Functions refuse."""
    _, parts, _ = scripts._lib()
    names = {n for n, _ in parts}
    seen: set[str] = set()
    late = []
    for name, text in parts:
        code = _STRING.sub("''", code_of(text))
        code = re.sub(r"\.\w+|\b\w+\s*=(?!=)", "", code)  # a table's fields are no references
        late += [(name, other) for other in
                 (set(scripts._WORD.findall(code)) & names) - {name} - seen]
        seen.add(name)
    assert late == []


def test_every_part_the_library_lists_exists_and_says_what_it_holds():
    text = LUA.joinpath("_lib.lua").read_text()
    parts = re.findall(r"^-- #include (_[a-z_]+\.lua)$", text, re.MULTILINE)
    assert len(parts) >= 10
    files = sorted(p.name for p in LUA.iterdir()
                   if p.name.startswith("_") and p.name.endswith(".lua") and p.name != "_lib.lua")
    assert sorted(parts) == files
    for part in parts:
        head = LUA.joinpath(part).read_text().split("\n", 1)[0]
        assert head.startswith("-- ") and len(head) > 15 and not re.search(r"issue \d", head)
