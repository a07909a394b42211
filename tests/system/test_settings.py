"""The settings room (antre/settings/): each ``ANTRE_*`` setting declared once, its value from
the environment, else the ``ANTRE_CONFIG`` file, else its default; a bad value refused with
the setting's name, the value and what it takes; secrets masked; and the product reads no
``ANTRE_*`` variable but through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from antre import settings
from antre.settings import SettingError
from antre.settings.reader import Setting

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("antre", "worker", "webapp", "antre_cli", "antre_django", "antre_demo")
ROOM = REPO / "antre" / "settings"
# Flask config keys of create_app(config=...) holding objects, not settings of the environment
CONFIG_KEYS = {"ANTRE_APP", "ANTRE_CLOCK"}
REDIS_TAKES = ("a URL (redis:// or rediss:// or unix:// or redis+cluster:// or "
               "rediss+cluster://...)")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "antre.toml"
    path.write_text(text)
    return str(path)


# -- precedence -----------------------------------------------------------------------------
def test_the_environment_wins_over_the_file_which_wins_over_the_default(tmp_path):
    path = write(tmp_path, 'redis_url = "redis://file:6379/0"\npartitions = 4\n')
    env = {"ANTRE_CONFIG": path}
    assert settings.REDIS_URL.read(env) == ("redis://file:6379/0", path)
    assert settings.PARTITIONS.read(env) == (4, path)
    assert settings.LOG_FORMAT.read(env) == ("json", "default")
    env["ANTRE_REDIS_URL"] = "redis://env:6379/0"
    assert settings.REDIS_URL.read(env) == ("redis://env:6379/0", "environment")
    assert settings.REDIS_URL.read({}) == ("redis://127.0.0.1:6379/0", "default")


def test_an_empty_value_is_unset_unless_the_setting_takes_it(tmp_path):
    path = write(tmp_path, 'partitions = 3\naccess_log = "-"\n')
    env = {"ANTRE_CONFIG": path, "ANTRE_PARTITIONS": "", "ANTRE_ACCESS_LOG": ""}
    assert settings.PARTITIONS.read(env) == (3, path)
    assert settings.ACCESS_LOG.read(env) == ("", "environment")


def test_a_changed_file_is_read_again(tmp_path):
    path = write(tmp_path, "partitions = 2\n")
    assert settings.PARTITIONS.get({"ANTRE_CONFIG": path}) == 2
    Path(path).write_text("partitions = 12\n")
    assert settings.PARTITIONS.get({"ANTRE_CONFIG": path}) == 12


def test_the_process_environment_is_read_at_call_time(monkeypatch):
    monkeypatch.setenv("ANTRE_MAX_SNOOZES", "7")
    assert settings.MAX_SNOOZES.get() == 7
    monkeypatch.delenv("ANTRE_MAX_SNOOZES")
    assert settings.MAX_SNOOZES.get() == 1000


# -- refusals -------------------------------------------------------------------------------
@pytest.mark.parametrize("setting,raw,takes", [
    (settings.PARTITIONS, "lots", "a whole number from 1 to 256"),
    (settings.PARTITIONS, "0", "a whole number from 1 to 256"),
    (settings.PARTITIONS, "257", "a whole number from 1 to 256"),
    (settings.PARTITIONS, "2.5", "a whole number from 1 to 256"),
    (settings.LOG_FLUSH_MS, "-5", "a whole number from 0 up (milliseconds)"),
    (settings.SESSION_HOURS, "0", "a number above 0 (hours)"),
    (settings.SESSION_HOURS, "nan", "a number above 0 (hours)"),
    (settings.DEMO_FLAKY_RATE, "1.5", "a number from 0 to 1"),
    (settings.ALERT_RETRIES_PER_MIN, "many", "a number from 0 up, or off"),
    (settings.SECURE_COOKIES, "maybe", "a flag: 1, true, yes or 0, false, no"),
    (settings.LOG_FORMAT, "xml", "one of json, text"),
    (settings.LOG_LEVEL, "loud", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    (settings.REDIS_URL, "localhost:6379", REDIS_TAKES),
    (settings.REDIS_URL, "http://x/", REDIS_TAKES),
    (settings.DATABASE_URL, "antre.db", "a URL (scheme://...)"),
])
def test_a_bad_value_is_refused_naming_the_setting_the_value_and_what_it_takes(setting, raw,
                                                                                 takes):
    with pytest.raises(SettingError) as caught:
        setting.get({setting.name: raw})
    assert str(caught.value) == (f"{setting.name}={raw!r} (from the environment) is refused: "
                                 f"{setting.name} takes {takes}")
    assert (caught.value.name, caught.value.source) == (setting.name, "environment")


def test_a_bad_value_in_the_file_names_the_file(tmp_path):
    path = write(tmp_path, 'log_level = "loud"\n')
    with pytest.raises(SettingError, match=rf"ANTRE_LOG_LEVEL='loud' \(from {re.escape(path)}\)"):
        settings.LOG_LEVEL.get({"ANTRE_CONFIG": path})
    path = write(tmp_path, "partitions = true\n")
    with pytest.raises(SettingError, match="ANTRE_PARTITIONS='true'"):
        settings.PARTITIONS.get({"ANTRE_CONFIG": path})


def test_a_value_of_the_wrong_toml_type_is_refused(tmp_path):
    path = write(tmp_path, "code_version = 3\ntrace_url = true\nredis_server = 5\n")
    with pytest.raises(SettingError, match="ANTRE_REDIS_SERVER=5 .* takes a file path"):
        settings.REDIS_SERVER.get({"ANTRE_CONFIG": path})
    with pytest.raises(SettingError, match="ANTRE_CODE_VERSION=3 .* takes a text"):
        settings.CODE_VERSION.get({"ANTRE_CONFIG": path})
    with pytest.raises(SettingError, match="ANTRE_TRACE_URL='true' .* takes a text"):
        settings.TRACE_URL.get({"ANTRE_CONFIG": path})


def test_a_preset_gives_way_to_the_environment_and_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTRE_LOG_FORMAT", "json")  # recorded, so the end puts back what was
    monkeypatch.delenv("ANTRE_LOG_FORMAT")          # (a preset writes os.environ itself)
    monkeypatch.setenv("ANTRE_CONFIG", write(tmp_path, 'log_format = "json"\n'))
    settings.preset(settings.LOG_FORMAT, "text")
    assert "ANTRE_LOG_FORMAT" not in __import__("os").environ
    assert settings.LOG_FORMAT.read()[0] == "json"
    monkeypatch.delenv("ANTRE_CONFIG")
    settings.preset(settings.LOG_FORMAT, "text")
    assert settings.LOG_FORMAT.read() == ("text", "environment")


@pytest.mark.parametrize("text,says", [
    ("redis_ulr = 'redis://x'\n", "'redis_ulr' is not one"),
    ("[redis]\nurl = 'x'\n", "'redis' is not one"),
    ("partitions = \n", "a readable TOML file"),
])
def test_a_file_with_an_unknown_key_or_bad_toml_is_refused(tmp_path, text, says):
    path = write(tmp_path, text)
    with pytest.raises(SettingError, match=re.escape(says)) as caught:
        settings.check({"ANTRE_CONFIG": path})
    assert caught.value.name == "ANTRE_CONFIG"


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(SettingError, match="ANTRE_CONFIG=.*nope.toml.*readable TOML file"):
        settings.REDIS_URL.get({"ANTRE_CONFIG": str(tmp_path / "nope.toml")})


def test_bounds_are_refused_not_clamped():
    assert settings.LOG_FLUSH_MS.get({"ANTRE_LOG_FLUSH_MS": "0"}) == 0
    assert settings.FLOW_RESULT_MAX.get({"ANTRE_FLOW_RESULT_MAX": "1"}) == 1
    for name, raw in (("ANTRE_LOG_FLUSH_MS", "-1"), ("ANTRE_FLOW_RESULT_MAX", "0"),
                      ("ANTRE_BURST_REDIS_WAIT_S", "-1")):
        with pytest.raises(SettingError):
            settings.ALL[name].get({name: raw})


@pytest.mark.parametrize("raw,value", [("1", True), ("true", True), ("YES", True),
                                       ("0", False), ("False", False), ("no", False)])
def test_a_flag_takes_one_zero_true_false_yes_no(raw, value):
    assert settings.SECURE_COOKIES.get({"ANTRE_SECURE_COOKIES": raw}) is value


def test_each_kind_reads_its_values(tmp_path):
    assert settings.LOG_LEVEL.get({"ANTRE_LOG_LEVEL": "debug"}) == "DEBUG"
    assert settings.ALERT_PAUSED_MAX_MIN.get({"ANTRE_ALERT_PAUSED_MAX_MIN": "off"}) is None
    assert settings.SESSION_HOURS.get({"ANTRE_SESSION_HOURS": "0.5"}) == 0.5
    path = write(tmp_path, "secure_cookies = true\nsession_hours = 2\n")
    assert settings.SECURE_COOKIES.get({"ANTRE_CONFIG": path}) is True
    assert settings.SESSION_HOURS.get({"ANTRE_CONFIG": path}) == 2.0


# -- secrets --------------------------------------------------------------------------------
def test_secrets_are_masked_in_the_listing_and_the_refusal():
    env = {"ANTRE_SECRET_KEY": "k" * 40, "ANTRE_DATABASE_URL": "postgresql://u:pw@db/antre"}
    shown = {e.name: e for e in settings.effective(env)}
    assert shown["ANTRE_SECRET_KEY"].shown == "***" and shown["ANTRE_SECRET_KEY"].value == "***"
    assert shown["ANTRE_DATABASE_URL"].shown == "postgresql://u:***@db/antre"
    assert shown["ANTRE_ALERT_WEBHOOK_SECRET"].shown == "(unset)"
    assert "k" * 40 not in repr(settings.effective(env))
    bad = Setting("ANTRE_X", "int", 0, "x", secret=True)
    with pytest.raises(SettingError) as caught:
        bad.parse("hunter2")
    assert "hunter2" not in str(caught.value) and "ANTRE_X=***" in str(caught.value)


# -- the declarations -----------------------------------------------------------------------
@pytest.mark.parametrize("setting", list(settings.ALL.values()), ids=list(settings.ALL))
def test_every_declaration_has_a_doc_a_kind_and_a_default_it_accepts(setting):
    assert setting.name.startswith("ANTRE_") and setting.name == setting.name.upper()
    assert setting.doc.strip() and "\n" not in setting.doc and setting.doc.endswith(".")
    assert setting.kind in ("str", "int", "float", "flag", "choice", "url", "path")
    if setting.default is not None and setting.kind != "str":
        assert setting.parse(setting.show(setting.default)) == setting.default
    if setting.kind == "choice":
        assert setting.default in setting.choices


def test_the_alert_settings_are_the_alert_config_fields():
    from dataclasses import fields

    from antre.observe.alerts import AlertConfig
    assert [f.name for f in fields(AlertConfig)] == list(settings.ALERTS)
    assert {f.name: f.default for f in fields(AlertConfig)} == \
        {k: s.default for k, s in settings.ALERTS.items()}


def test_the_partition_bound_is_the_engines():
    from antre.engine import keys
    assert settings.PARTITIONS.max == keys.MAX_PARTITIONS


# -- every reader goes through the room -----------------------------------------------------
def product_files() -> list[Path]:
    return [p for root in PRODUCT for p in sorted((REPO / root).rglob("*"))
            if p.is_file() and p.suffix in (".py", ".lua", ".html", ".js")
            and "__pycache__" not in p.parts]


def env_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``os.environ.get("ANTRE_...")``, ``os.environ[...]``, ``os.getenv(...)``, ``... in
    os.environ``, and any read of the environment with a name that is neither a literal nor a
    module's string constant (it could be one): line and what was read."""
    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
            (isinstance(node, ast.Name) and node.id == "environ")

    constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}

    def name_of(node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        return "<not a literal>"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and is_environ(f.value) or (isinstance(f, ast.Attribute) and f.attr == "getenv") or \
                    (isinstance(f, ast.Name) and f.id == "getenv"):
                found.append((node.lineno, name_of(node.args[0])))
        elif isinstance(node, ast.Subscript) and is_environ(node.value) \
                and isinstance(node.ctx, ast.Load):
            found.append((node.lineno, name_of(node.slice)))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and isinstance(node.ops[0], (ast.In, ast.NotIn)) and is_environ(node.comparators[0]):
            found.append((node.lineno, name_of(node.left)))
    return [(line, name) for line, name in found
            if name.startswith("ANTRE_") or name == "<not a literal>"]


def test_no_product_file_reads_an_antre_variable_but_the_settings_room():
    found = {}
    for path in product_files():
        if path.suffix != ".py" or ROOM in path.parents:
            continue
        if reads := env_reads(ast.parse(path.read_text(), str(path))):
            found[str(path.relative_to(REPO))] = reads
    assert not found, f"read these through antre.settings (antre/settings/declared.py): {found}"


def test_the_reader_finder_finds_each_way_of_reading():
    tree = ast.parse('import os\na = os.environ.get("ANTRE_A")\nb = os.getenv("ANTRE_B")\n'
                     'c = os.environ["ANTRE_C"]\nd = "ANTRE_D" in os.environ\n'
                     'e = os.environ.get(name)\nf = os.environ.get("HOME")\n'
                     'os.environ["ANTRE_G"] = "1"\nH = "ANTRE_H"\nh = H in os.environ\n')
    assert env_reads(tree) == [(2, "ANTRE_A"), (3, "ANTRE_B"), (4, "ANTRE_C"), (5, "ANTRE_D"),
                               (6, "<not a literal>"), (10, "ANTRE_H")]


def test_every_antre_name_the_product_spells_is_declared():
    spelled: dict[str, set[str]] = {}
    for path in product_files():
        text = path.read_text()
        for name in re.findall(r"\bANTRE_[A-Z0-9_]*[A-Z0-9]\b", text):
            spelled.setdefault(name, set()).add(str(path.relative_to(REPO)))
        for built in re.findall(r"\bANTRE_[A-Z0-9_]*\{", text):  # a name built: f"ANTRE_{x}"
            spelled.setdefault(built + "...}", set()).add(str(path.relative_to(REPO)))
    unknown = {n: sorted(p) for n, p in spelled.items()
               if n not in settings.ALL and n not in CONFIG_KEYS}
    assert not unknown, f"declare these in antre/settings/declared.py: {unknown}"
    assert "ANTRE_REDIS_URL" in spelled  # the finder finds names


# -- the generated docs ---------------------------------------------------------------------
def _generator():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  REPO / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_reference_is_made_from_the_declarations():
    page = (REPO / "docs" / "reference" / "settings.md").read_text()
    assert page == _generator().settings_page(), \
        "docs/reference/settings.md is not what the declarations make: run python docs/gen_reference.py"
    for setting in settings.ALL.values():
        assert f"| `{setting.name}` |" in page


def test_the_readme_configuration_block_is_made_from_the_declarations():
    readme = (REPO / "README.md").read_text()
    gen = _generator()
    assert readme == gen.readme_with_block(readme), \
        "README.md's settings block is not what the declarations make: run python docs/gen_reference.py"
    block = readme[readme.index(gen.README_START):readme.index(gen.README_END)]
    assert len(block.splitlines()) <= 60
    assert all(f"`{s.name}`" in block for s in settings.ESSENTIAL)
    assert "(docs/reference/settings.md)" in block
