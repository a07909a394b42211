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
    (settings.REDIS_URL, "localhost:6379", "a URL (redis:// or rediss:// or unix://...)"),
    (settings.REDIS_URL, "http://x/", "a URL (redis:// or rediss:// or unix://...)"),
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


